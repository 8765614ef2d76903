//! CONTRACT §3 (task groups): on a parent started `structured`, a failing attached child cancels the parent
//! (cause `ChildFailed`, the child as origin) and so its other children; the parent's own end, completing or
//! failing, cancels its pending children. Without `structured` a failure is the child's own.

use crate::common;
use std::sync::{Arc, Barrier};
use std::thread;

use subagent_tracker::{
    CancelCause, InMemorySubagentTaskTracker, SubagentStatus, TaskStart, CHILD_FAILED_REASON,
    GROUP_ENDED_REASON,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(1_000)
}

fn group(
    tracker: &InMemorySubagentTaskTracker,
    task_id: &str,
) -> subagent_tracker::SubagentTaskHandle {
    tracker
        .start(TaskStart::new().task_id(task_id).structured(true))
        .unwrap()
}

fn child(
    tracker: &InMemorySubagentTaskTracker,
    task_id: &str,
    parent_id: &str,
) -> subagent_tracker::SubagentTaskHandle {
    tracker
        .start(TaskStart::new().task_id(task_id).parent_id(parent_id))
        .unwrap()
}

#[test]
fn a_failing_child_cancels_its_group_and_so_its_siblings() {
    let tracker = tracker();
    let parent = group(&tracker, "plan");
    let failing = child(&tracker, "search", "plan");
    let sibling = child(&tracker, "fetch", "plan");
    tracker
        .reserve(TaskStart::new().task_id("queued").parent_id("plan"), None)
        .unwrap();
    assert!(failing.fail("rate limited"));
    assert!(parent.is_cancelled() && sibling.is_cancelled());
    let cancelled = tracker.get("plan").unwrap();
    assert_eq!(cancelled.status, SubagentStatus::Cancelled);
    assert_eq!(cancelled.cancel_cause, Some(CancelCause::ChildFailed));
    assert_eq!(cancelled.cancel_origin.as_deref(), Some("search"));
    assert_eq!(
        cancelled.cancel_reason.as_deref(),
        Some(CHILD_FAILED_REASON)
    );
    for task_id in ["fetch", "queued"] {
        let task = tracker.get(task_id).unwrap();
        assert_eq!(task.status, SubagentStatus::Cancelled, "{task_id}");
        assert_eq!(task.cancel_cause, Some(CancelCause::Parent));
        assert_eq!(task.cancel_origin.as_deref(), Some("search"));
    }
    assert!(tracker.get("queued").unwrap().finished);
    assert_eq!(
        tracker.get("search").unwrap().status,
        SubagentStatus::Failed
    );
}

#[test]
fn without_structured_a_failure_is_the_child_s_own() {
    let tracker = tracker();
    let parent = tracker.start(TaskStart::new().task_id("plan")).unwrap();
    let failing = child(&tracker, "search", "plan");
    let sibling = child(&tracker, "fetch", "plan");
    assert!(failing.fail("rate limited"));
    assert!(!parent.is_cancelled() && !sibling.is_cancelled());
    assert!(sibling.complete(None));
    assert!(
        parent.complete(None),
        "the default stays as before: no group rule"
    );
}

#[test]
fn a_failure_by_id_and_a_claim_timeout_count_as_failures() {
    let tracker = tracker();
    let _parent = group(&tracker, "plan");
    let _failing = child(&tracker, "search", "plan");
    assert!(tracker.end("search", Err("the worker pool is gone")));
    assert_eq!(
        tracker.get("plan").unwrap().cancel_cause,
        Some(CancelCause::ChildFailed)
    );

    let other = group(&tracker, "other-plan");
    tracker
        .reserve(
            TaskStart::new()
                .task_id("unclaimed")
                .parent_id("other-plan"),
            Some(std::time::Duration::from_millis(20)),
        )
        .unwrap();
    assert!(other
        .token()
        .wait_blocking(Some(std::time::Duration::from_secs(5))));
    let cancelled = tracker.get("other-plan").unwrap();
    assert_eq!(cancelled.cancel_origin.as_deref(), Some("unclaimed"));
}

#[test]
fn a_group_s_end_cancels_its_pending_children_and_their_descendants() {
    for fails in [false, true] {
        let tracker = tracker();
        let parent = group(&tracker, "plan");
        let running = child(&tracker, "search", "plan");
        let grandchild = child(&tracker, "deep", "search");
        let done = child(&tracker, "done", "plan");
        assert!(done.complete(None));
        let detached = tracker
            .start(
                TaskStart::new()
                    .task_id("audit")
                    .parent_id("plan")
                    .detached(true),
            )
            .unwrap();
        tracker
            .reserve(TaskStart::new().task_id("queued").parent_id("plan"), None)
            .unwrap();
        if fails {
            assert!(parent.fail("gave up"));
        } else {
            assert!(parent.complete(None));
        }
        assert!(running.is_cancelled() && grandchild.is_cancelled());
        for (task_id, cause) in [
            ("search", CancelCause::Parent),
            ("deep", CancelCause::Parent),
            ("queued", CancelCause::Parent),
        ] {
            let task = tracker.get(task_id).unwrap();
            assert_eq!(task.status, SubagentStatus::Cancelled, "{task_id}");
            assert_eq!(task.cancel_cause, Some(cause), "{task_id}");
            assert_eq!(task.cancel_origin.as_deref(), Some("plan"), "{task_id}");
            assert_eq!(task.cancel_reason.as_deref(), Some(GROUP_ENDED_REASON));
        }
        assert_eq!(
            tracker.get("done").unwrap().status,
            SubagentStatus::Completed
        );
        assert!(
            !detached.is_cancelled(),
            "a detached child is out of the group"
        );
        assert_eq!(
            tracker.get("plan").unwrap().status,
            if fails {
                SubagentStatus::Failed
            } else {
                SubagentStatus::Completed
            }
        );
        drop((running, grandchild, detached));
    }
}

#[test]
fn a_detached_child_s_failure_leaves_the_group_alone() {
    let tracker = tracker();
    let parent = group(&tracker, "plan");
    let detached = tracker
        .start(
            TaskStart::new()
                .task_id("audit")
                .parent_id("plan")
                .detached(true),
        )
        .unwrap();
    assert!(detached.fail("boom"));
    assert!(!parent.is_cancelled());
    assert!(parent.complete(None));
}

#[test]
fn a_group_cancelled_first_keeps_its_first_cause() {
    let tracker = tracker();
    let parent = group(&tracker, "plan");
    let failing = child(&tracker, "search", "plan");
    assert!(tracker.cancel("plan", Some("user pressed stop")));
    assert!(
        !failing.fail("late"),
        "the child was cancelled with its group"
    );
    let cancelled = tracker.get("plan").unwrap();
    assert_eq!(cancelled.cancel_cause, Some(CancelCause::Requested));
    assert_eq!(
        cancelled.cancel_reason.as_deref(),
        Some("user pressed stop")
    );
    drop(parent);
}

#[test]
fn of_children_failing_at_once_exactly_one_cancels_the_group() {
    for _ in 0..50 {
        let tracker = tracker();
        let parent = group(&tracker, "plan");
        let children: Vec<_> = (0..8)
            .map(|index| child(&tracker, &format!("c{index}"), "plan"))
            .collect();
        let barrier = Arc::new(Barrier::new(children.len()));
        let failed: Vec<bool> = children
            .into_iter()
            .map(|handle| {
                let barrier = barrier.clone();
                thread::spawn(move || {
                    barrier.wait();
                    handle.fail("boom")
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .collect();
        assert!(parent.is_cancelled());
        let cancelled = tracker.get("plan").unwrap();
        assert_eq!(cancelled.cancel_cause, Some(CancelCause::ChildFailed));
        let origin = cancelled.cancel_origin.unwrap();
        let index: usize = origin.trim_start_matches('c').parse().unwrap();
        assert!(
            failed[index],
            "the origin is a child whose failure won: {origin}"
        );
        for (index, failed) in failed.iter().enumerate() {
            let task = tracker.get(&format!("c{index}")).unwrap();
            assert_eq!(
                task.status,
                if *failed {
                    SubagentStatus::Failed
                } else {
                    SubagentStatus::Cancelled
                }
            );
        }
    }
}
