//! Deadlines, cancel callbacks, linked tokens, detached children and cancel causes (docs/agent-loops.md).

use crate::common;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use subagent_tracker::{
    CancelCause, InMemorySubagentTaskTracker, SubagentStatus, TaskStart, DEADLINE_REASON,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(100_000)
}

#[test]
fn cancel_causes_tell_apart_request_parent_and_session() {
    let tracker = tracker();
    let _a = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let _b = tracker
        .start(TaskStart::new().task_id("b").parent_id("a"))
        .unwrap();
    let _c = tracker.start(TaskStart::new().task_id("c")).unwrap();
    tracker.cancel("a", None);
    tracker.cancel_all(None);
    let cause = |id: &str| tracker.get(id).unwrap().cancel_cause;
    assert_eq!(cause("a"), Some(CancelCause::Requested));
    assert_eq!(cause("b"), Some(CancelCause::Parent));
    assert_eq!(cause("c"), Some(CancelCause::Session));
    let late = tracker
        .start(TaskStart::new().task_id("late").parent_id("a"))
        .unwrap();
    assert_eq!(late.snapshot().cancel_cause, Some(CancelCause::Parent));
}

#[test]
fn a_deadline_cancels_the_task_with_its_reason_and_cause() {
    let tracker = tracker();
    let handle = tracker
        .start(
            TaskStart::new()
                .task_id("a")
                .timeout(Duration::from_millis(30)),
        )
        .unwrap();
    assert!(handle.snapshot().deadline.is_some());
    assert!(handle.token().wait_blocking(Some(Duration::from_secs(5))));
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert_eq!(snapshot.cancel_reason.as_deref(), Some(DEADLINE_REASON));
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Deadline));
}

#[test]
fn a_deadline_already_past_cancels_at_start() {
    let tracker = tracker();
    let handle = tracker
        .start(TaskStart::new().task_id("a").deadline(Instant::now()))
        .unwrap();
    assert!(handle.is_cancelled());
    assert_eq!(handle.snapshot().cancel_cause, Some(CancelCause::Deadline));
}

#[test]
fn a_childs_deadline_is_never_later_than_its_parents() {
    let tracker = tracker();
    let parent = tracker
        .start(
            TaskStart::new()
                .task_id("p")
                .timeout(Duration::from_millis(40)),
        )
        .unwrap();
    let child = tracker
        .start(
            TaskStart::new()
                .task_id("c")
                .parent_id("p")
                .timeout(Duration::from_secs(60)),
        )
        .unwrap();
    let grandchild = tracker
        .start(TaskStart::new().task_id("g").parent_id("c"))
        .unwrap();
    let parent_deadline = parent.snapshot().deadline.unwrap();
    assert!(child.snapshot().deadline.unwrap() <= parent_deadline);
    assert!(grandchild.snapshot().deadline.unwrap() <= parent_deadline);
    assert!(grandchild
        .token()
        .wait_blocking(Some(Duration::from_secs(5))));
    let cause = grandchild.snapshot().cancel_cause;
    assert!(
        matches!(cause, Some(CancelCause::Deadline | CancelCause::Parent)),
        "{cause:?}"
    );
}

#[test]
fn a_detached_child_is_out_of_its_parents_reach_but_not_its_sessions() {
    let tracker = tracker();
    let _parent = tracker
        .start(
            TaskStart::new()
                .task_id("p")
                .timeout(Duration::from_secs(60)),
        )
        .unwrap();
    let detached = tracker
        .start(TaskStart::new().task_id("d").parent_id("p").detached(true))
        .unwrap();
    assert!(
        detached.snapshot().deadline.is_none(),
        "a detached child does not inherit the deadline"
    );
    assert!(detached.snapshot().detached);
    assert_eq!(detached.snapshot().parent_id.as_deref(), Some("p"));
    tracker.cancel("p", None);
    assert!(!detached.is_cancelled());
    let late = tracker
        .start(
            TaskStart::new()
                .task_id("late")
                .parent_id("p")
                .detached(true),
        )
        .unwrap();
    assert!(
        !late.is_cancelled(),
        "a detached child of a cancelled parent starts running"
    );
    assert!(tracker.cancel("d", None));
    assert_eq!(tracker.cancel_all(None), 1);
    assert!(late.is_cancelled());
}

#[test]
fn a_deadline_racing_completion_has_exactly_one_winner() {
    let tracker = tracker();
    for round in 0..2_000 {
        let start = TaskStart::new()
            .task_id(format!("t{round}"))
            .timeout(Duration::from_micros(round % 50));
        let handle = tracker.start(start).unwrap();
        thread::sleep(Duration::from_micros(round % 7));
        let completed = handle.complete(None);
        let status = handle.snapshot().status;
        assert_eq!(
            completed,
            status == SubagentStatus::Completed,
            "round {round}"
        );
        if !completed {
            assert_eq!(handle.snapshot().cancel_cause, Some(CancelCause::Deadline));
        }
    }
}

#[test]
fn callbacks_run_once_on_cancel_and_at_once_when_already_cancelled() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let token = handle.token();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let _registration = token.on_cancel(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(token.callback_count(), 1);
    tracker.cancel("a", None);
    tracker.cancel("a", None);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(token.callback_count(), 0);
    let counter = runs.clone();
    token.on_cancel(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "registered after the cancel: runs at once"
    );
}

#[test]
fn callbacks_are_released_unrun_on_a_normal_end_or_removal() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let token = handle.token();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let removed = token.on_cancel(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    assert!(removed.remove());
    assert!(!removed.remove(), "a second remove finds nothing");
    let counter = runs.clone();
    token.on_cancel(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    handle.complete(None);
    assert_eq!(
        token.callback_count(),
        0,
        "finishing frees the registrations"
    );
    tracker.cancel("a", None);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn a_panicking_callback_does_not_stop_the_others_or_the_canceller() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    handle.token().on_cancel(|| panic!("a faulty callback"));
    let counter = runs.clone();
    handle.token().on_cancel(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    assert!(tracker.cancel("a", None));
    std::panic::set_hook(previous_hook);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn a_callback_registered_as_the_token_fires_runs_exactly_once() {
    for _ in 0..200 {
        let tracker = tracker();
        let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
        let token = handle.token();
        let runs = Arc::new(AtomicUsize::new(0));
        let barrier = Barrier::new(2);
        thread::scope(|scope| {
            scope.spawn(|| {
                barrier.wait();
                tracker.cancel("a", None);
            });
            barrier.wait();
            for _ in 0..50 {
                let counter = runs.clone();
                token.on_cancel(move || {
                    counter.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 50);
    }
}

#[test]
fn a_linked_task_is_cancelled_by_its_source_with_the_sources_reason() {
    let tracker = tracker();
    let other_session: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let source = other_session
        .start(TaskStart::new().task_id("request"))
        .unwrap();
    let linked = tracker
        .start(TaskStart::new().task_id("a").linked(source.token()))
        .unwrap();
    assert_eq!(source.token().callback_count(), 1);
    other_session.cancel("request", Some("client disconnected"));
    let snapshot = linked.snapshot();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Linked));
    assert_eq!(
        snapshot.cancel_reason.as_deref(),
        Some("client disconnected")
    );
}

#[test]
fn a_link_is_dropped_when_the_linked_task_finishes() {
    let tracker = tracker();
    let source = tracker
        .start(TaskStart::new().task_id("long-lived"))
        .unwrap();
    for index in 0..1_000 {
        let task = tracker
            .start(
                TaskStart::new()
                    .task_id(format!("t{index}"))
                    .linked(source.token()),
            )
            .unwrap();
        task.complete(None);
    }
    assert_eq!(
        source.token().callback_count(),
        0,
        "no registration outlives its task"
    );
}

#[test]
fn a_link_to_an_already_cancelled_token_starts_cancelled() {
    let tracker = tracker();
    let source = tracker.start(TaskStart::new().task_id("source")).unwrap();
    tracker.cancel("source", Some("gone"));
    let linked = tracker
        .start(TaskStart::new().task_id("a").linked(source.token()))
        .unwrap();
    assert!(linked.is_cancelled());
    assert_eq!(linked.snapshot().cancel_reason.as_deref(), Some("gone"));
}

#[test]
fn a_link_to_a_token_cancelled_during_start_always_takes() {
    for round in 0..500 {
        let tracker = tracker();
        let source = tracker.start(TaskStart::new().task_id("source")).unwrap();
        let barrier = Barrier::new(2);
        thread::scope(|scope| {
            scope.spawn(|| {
                barrier.wait();
                tracker.cancel("source", None);
            });
            barrier.wait();
            let linked = tracker
                .start(TaskStart::new().task_id("a").linked(source.token()))
                .unwrap();
            scope.spawn(move || {
                // Whatever the interleaving, the linked task ends up cancelled once the source is.
                assert!(
                    linked.token().wait_blocking(Some(Duration::from_secs(5))),
                    "round {round}"
                );
            });
        });
    }
}

#[test]
fn any_fires_with_the_first_source_and_leaks_nothing_when_dropped() {
    let tracker = tracker();
    let long_lived = tracker
        .start(TaskStart::new().task_id("long-lived"))
        .unwrap();
    let other = tracker.start(TaskStart::new().task_id("other")).unwrap();
    for _ in 0..1_000 {
        drop(subagent_tracker::SubagentTaskToken::any([
            long_lived.token(),
            other.token(),
        ]));
    }
    assert_eq!(
        long_lived.token().callback_count(),
        0,
        "dropped combinations leave no registration"
    );
    let combined = subagent_tracker::SubagentTaskToken::any([long_lived.token(), other.token()]);
    assert!(!combined.is_cancelled());
    tracker.cancel("other", Some("user left"));
    assert!(combined.is_cancelled());
    assert_eq!(combined.reason().as_deref(), Some("user left"));
    assert_eq!(
        long_lived.token().callback_count(),
        0,
        "a fired combination unlinks from the rest"
    );
    let already = subagent_tracker::SubagentTaskToken::any([other.token()]);
    assert!(already.is_cancelled());
}
