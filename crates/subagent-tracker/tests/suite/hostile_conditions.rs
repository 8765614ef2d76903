//! The core under hostile use (each test once a defect, numbered as in its report): what a hostile caller, input
//! or callback does to it in memory.

use crate::common;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant, SystemTime};

use subagent_tracker::{
    CancelCause, InMemorySubagentTaskTracker, SubagentStatus, SubagentTaskToken, TaskStart,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(100_000)
}

/// A waker that counts its wake-ups.
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs `work` on a thread with a small stack, so that recursion on the chain's depth would overflow it.
fn on_small_stack(work: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(work)
        .unwrap()
        .join()
        .expect("the work overflowed or panicked");
}

/// Defect 1: a chain of linked tasks fires (and is dropped) without recursing on its depth.
#[test]
fn a_long_chain_of_linked_tasks_fires_without_recursion() {
    on_small_stack(|| {
        let tracker = tracker();
        let mut handles = vec![tracker.start(TaskStart::new().task_id("t0")).unwrap()];
        for index in 1..20_000 {
            let previous = handles.last().unwrap().token();
            let start = TaskStart::new()
                .task_id(format!("t{index}"))
                .linked(previous);
            handles.push(tracker.start(start).unwrap());
        }
        assert!(tracker.cancel("t0", Some("stop")));
        assert!(handles
            .iter()
            .all(subagent_tracker::SubagentTaskHandle::is_cancelled));
        let last = tracker.get("t19999").unwrap();
        assert_eq!(last.cancel_cause, Some(CancelCause::Linked));
        assert_eq!(last.cancel_reason.as_deref(), Some("stop"));
        drop(handles);
        drop(tracker);
    });
}

/// Defect 1: nested `any()` tokens fire and drop without recursing on their depth.
#[test]
fn deeply_nested_any_tokens_fire_and_drop_without_recursion() {
    on_small_stack(|| {
        let tracker = tracker();
        let root = tracker.start(TaskStart::new().task_id("root")).unwrap();
        let other = tracker.start(TaskStart::new().task_id("other")).unwrap();
        let mut token = root.token();
        for _ in 0..20_000 {
            token = SubagentTaskToken::any([token, other.token()]);
        }
        assert!(tracker.cancel("root", None));
        assert!(token.is_cancelled());
        assert_eq!(token.origin().as_deref(), Some("root"));
        drop(token);

        let mut unfired = other.token();
        for _ in 0..20_000 {
            unfired = SubagentTaskToken::any([unfired]);
        }
        drop(unfired);
        assert_eq!(
            other.token().callback_count(),
            0,
            "the dropped chain left no registration"
        );
    });
}

/// Defect 6: user callbacks of a deadline never run on the timer thread, and a slow one delays no other
/// deadline.
#[test]
fn deadline_callbacks_run_off_the_timer_and_a_slow_one_delays_nothing() {
    let tracker = tracker();
    let slow = tracker
        .start(
            TaskStart::new()
                .task_id("slow")
                .timeout(Duration::from_millis(20)),
        )
        .unwrap();
    let thread_name = Arc::new(Mutex::new(None));
    let seen = thread_name.clone();
    let _slow_registration = slow.token().on_cancel(move || {
        *seen.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        std::thread::sleep(Duration::from_millis(1500));
    });
    let other_session = tracker_in_other_session();
    let started = Instant::now();
    let quick = other_session
        .start(
            TaskStart::new()
                .task_id("quick")
                .timeout(Duration::from_millis(150)),
        )
        .unwrap();
    assert!(quick.token().wait_blocking(Some(Duration::from_secs(5))));
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    let name = thread_name.lock().unwrap().clone();
    assert_ne!(name.as_deref(), Some("subagent-deadlines"));
}

fn tracker_in_other_session() -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::new()
}

/// Defect 7: a cancel wakes its waiters before it runs its callbacks.
#[test]
fn wake_ups_are_delivered_before_callbacks_run() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let token = handle.token();
    let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let waker = Waker::from(counter.clone());
    let mut wait = token.cancelled();
    assert!(wait
        .poll_cancelled(&mut Context::from_waker(&waker))
        .is_pending());
    let woken_first = Arc::new(AtomicBool::new(false));
    let record = (counter.clone(), woken_first.clone());
    let _registration = token.on_cancel(move || {
        record
            .1
            .store(record.0 .0.load(Ordering::SeqCst) == 1, Ordering::SeqCst);
    });
    assert!(tracker.cancel("a", None));
    assert!(woken_first.load(Ordering::SeqCst));
}

/// Defect 10: a task linked to an `any()` token that nobody keeps is still cancelled through it.
#[test]
fn a_task_linked_to_an_unkept_any_token_is_cancelled() {
    let tracker = tracker();
    let stop = tracker.start(TaskStart::new().task_id("stop")).unwrap();
    let budget = tracker.start(TaskStart::new().task_id("budget")).unwrap();
    let job = tracker
        .start(
            TaskStart::new()
                .task_id("job")
                .linked(SubagentTaskToken::any([stop.token(), budget.token()])),
        )
        .unwrap();
    assert!(tracker.cancel("stop", Some("user pressed stop")));
    assert!(job.is_cancelled());
    let snapshot = tracker.get("job").unwrap();
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Linked));
    assert_eq!(snapshot.cancel_reason.as_deref(), Some("user pressed stop"));
    drop(job);
    assert_eq!(
        budget.token().callback_count(),
        0,
        "the combined token left with the job"
    );
}

/// Defect 11: an ancestor's cancel reaches a running grandchild whose parent has finished.
#[test]
fn a_cancel_reaches_grandchildren_through_a_finished_parent() {
    let tracker = tracker();
    let _a = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let b = tracker
        .start(TaskStart::new().task_id("b").parent_id("a"))
        .unwrap();
    let c = tracker
        .start(TaskStart::new().task_id("c").parent_id("b"))
        .unwrap();
    assert!(b.complete(None));
    assert!(tracker.cancel("a", None));
    assert!(c.is_cancelled());
    let snapshot = tracker.get("c").unwrap();
    assert_eq!(snapshot.cancel_origin.as_deref(), Some("a"));
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Parent));
}

/// Defect 11, the other way: the subtree of a detached child stays out of reach of the task it was detached
/// from, even after the detached child finishes.
#[test]
fn a_detached_subtree_is_not_adopted_by_the_task_it_left() {
    let tracker = tracker();
    let _a = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let b = tracker
        .start(TaskStart::new().task_id("b").parent_id("a").detached(true))
        .unwrap();
    let c = tracker
        .start(TaskStart::new().task_id("c").parent_id("b"))
        .unwrap();
    assert!(tracker.cancel("a", None));
    assert!(b.complete(None));
    assert_eq!(tracker.get("c").unwrap().status, SubagentStatus::Running);
    assert!(c.complete(None));
}

/// Defect 13: abandoned waits take their registrations back.
#[test]
fn abandoned_waits_leave_no_registration() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("loop")).unwrap();
    let token = handle.token();
    let waker = Waker::from(Arc::new(CountingWaker(AtomicUsize::new(0))));
    for _ in 0..50_000 {
        let mut wait = token.cancelled();
        assert_eq!(
            wait.poll_cancelled(&mut Context::from_waker(&waker)),
            Poll::Pending
        );
        assert!(!token.wait_blocking(Some(Duration::ZERO)));
    }
    // The wakers went with their waits: the first cancel wakes nothing stale, and a new wait still works.
    let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let mut wait = token.cancelled();
    assert!(wait
        .poll_cancelled(&mut Context::from_waker(&Waker::from(counter.clone())))
        .is_pending());
    assert!(tracker.cancel("loop", None));
    assert_eq!(counter.0.load(Ordering::SeqCst), 1);
}

/// Defect 15: a combined token belongs to no task and builds no id.
#[test]
fn combined_tokens_have_no_task_id() {
    let tracker = tracker();
    let a = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let mut token = a.token();
    for _ in 0..1_000 {
        token = SubagentTaskToken::any([token]);
    }
    assert_eq!(token.task_id(), None);
    assert!(format!("{token:?}").len() < 100);
}

/// Defect 16: restarting a finished id evicts nothing while fewer than the bound are retained.
#[test]
fn restarting_a_finished_id_evicts_no_other_task_early() {
    let tracker = common::tracker_retaining(3);
    for id in ["a", "b", "c"] {
        assert!(tracker
            .start(TaskStart::new().task_id(id))
            .unwrap()
            .complete(None));
    }
    for _ in 0..10 {
        assert!(tracker
            .start(TaskStart::new().task_id("a"))
            .unwrap()
            .complete(None));
    }
    assert_eq!(common::task_ids(&tracker), ["b", "c", "a"]);
    // The bound still holds, oldest first.
    assert!(tracker
        .start(TaskStart::new().task_id("d"))
        .unwrap()
        .complete(None));
    assert_eq!(common::task_ids(&tracker), ["c", "a", "d"]);
}

/// Defect 17: an `any()` that fires at construction registers on none of its other sources.
#[test]
fn an_any_token_that_fires_at_once_keeps_no_registration() {
    let tracker = tracker();
    let a = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let b = tracker.start(TaskStart::new().task_id("b")).unwrap();
    let c = tracker.start(TaskStart::new().task_id("c")).unwrap();
    assert!(tracker.cancel("b", Some("early")));
    let combined = SubagentTaskToken::any([a.token(), b.token(), c.token()]);
    assert!(combined.is_cancelled());
    assert_eq!(combined.reason().as_deref(), Some("early"));
    assert_eq!(a.token().callback_count(), 0);
    assert_eq!(c.token().callback_count(), 0);
}

/// Defect 18: a deadline in the past shows as given, and cancels the task during its start.
#[test]
fn a_past_deadline_shows_as_given() {
    let tracker = tracker();
    let ten_seconds_ago = SystemTime::now() - Duration::from_secs(10);
    let handle = tracker
        .start(
            TaskStart::new()
                .task_id("late")
                .deadline_at(ten_seconds_ago),
        )
        .unwrap();
    assert!(handle.is_cancelled());
    let snapshot = tracker.get("late").unwrap();
    assert_eq!(snapshot.deadline, Some(ten_seconds_ago));
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Deadline));
}

/// Defect 4: closing a subscription from elsewhere wakes its consumer, which then reads `None`.
#[tokio::test]
async fn closing_a_subscription_wakes_its_consumer() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let mut events = tracker.subscribe();
    let closer = events.closer();
    let consumer = tokio::spawn(async move { events.next().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    closer.close();
    let next = tokio::time::timeout(Duration::from_secs(5), consumer)
        .await
        .expect("the consumer woke")
        .unwrap();
    assert!(next.is_none());
}
