//! CONTRACT §5 (structured failures): a failure keeps its message, type and code, on the live task and on its
//! finished record, by handle and by id, and the first transition still wins.

use crate::common;
use std::sync::{Arc, Barrier};
use std::thread;

use subagent_tracker::{InMemorySubagentTaskTracker, SubagentStatus, TaskFailure, TaskStart};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(1_000)
}

fn rate_limited() -> TaskFailure {
    TaskFailure::new("the provider refused: too many requests")
        .error_type("RateLimitError")
        .error_code("429")
}

#[test]
fn a_runner_s_failure_keeps_its_type_and_code() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.fail_with(rate_limited()));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Failed);
    assert_eq!(
        snapshot.error.as_deref(),
        Some("the provider refused: too many requests")
    );
    assert_eq!(snapshot.error_type.as_deref(), Some("RateLimitError"));
    assert_eq!(snapshot.error_code.as_deref(), Some("429"));
    // The handle's own snapshot reads the same record.
    assert_eq!(handle.snapshot().error_code.as_deref(), Some("429"));
}

#[test]
fn a_plain_failure_has_no_type_or_code() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.fail("boom"));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.error.as_deref(), Some("boom"));
    assert_eq!(snapshot.error_type, None);
    assert_eq!(snapshot.error_code, None);
}

#[test]
fn a_failure_recorded_by_id_keeps_its_type_and_code_and_the_first_end_wins() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(tracker.fail("a", rate_limited()));
    assert!(!tracker.fail("a", TaskFailure::new("later").error_code("other")));
    assert!(!handle.complete(None));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Failed);
    assert_eq!(snapshot.error_code.as_deref(), Some("429"));
    assert!(!tracker.fail("never-started", rate_limited()));
}

#[test]
fn a_late_failure_after_a_cancel_is_kept_whole_and_the_task_stays_cancelled() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(tracker.cancel("a", Some("user pressed stop")));
    assert!(!handle.fail_with(rate_limited()));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert_eq!(snapshot.error_type.as_deref(), Some("RateLimitError"));
    assert_eq!(snapshot.error_code.as_deref(), Some("429"));
}

#[test]
fn a_finished_record_keeps_the_failure_after_the_run_collapses() {
    let tracker = tracker();
    // A parent and metadata give the finished record its box of details; a plain run keeps the failure too.
    let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
    for (task_id, parent_id) in [("plain", None), ("child", Some("parent"))] {
        let mut start = TaskStart::new().task_id(task_id);
        if let Some(parent_id) = parent_id {
            start = start.parent_id(parent_id);
        }
        let handle = tracker.start(start).unwrap();
        assert!(handle.fail_with(rate_limited()));
        drop(handle);
        let snapshot = tracker.get(task_id).unwrap();
        assert!(snapshot.finished);
        assert_eq!(snapshot.error_type.as_deref(), Some("RateLimitError"));
        assert_eq!(snapshot.error_code.as_deref(), Some("429"));
    }
    drop(parent);
}

#[test]
fn a_failure_racing_a_completion_and_a_cancel_leaves_one_whole_outcome() {
    for round in 0..200 {
        let tracker = tracker();
        let handle = Arc::new(tracker.start(TaskStart::new().task_id("a")).unwrap());
        let barrier = Arc::new(Barrier::new(3));
        let failing = {
            let (handle, barrier) = (handle.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                handle.fail_with(rate_limited())
            })
        };
        let completing = {
            let (handle, barrier) = (handle.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                handle.complete(Some("done".into()))
            })
        };
        barrier.wait();
        let cancelled = tracker.cancel("a", None);
        let (failed, completed) = (failing.join().unwrap(), completing.join().unwrap());
        assert_eq!(
            [failed, completed, cancelled]
                .iter()
                .filter(|won| **won)
                .count(),
            1,
            "round {round}"
        );
        let snapshot = tracker.get("a").unwrap();
        if failed {
            assert_eq!(snapshot.status, SubagentStatus::Failed);
            assert_eq!(snapshot.error_code.as_deref(), Some("429"));
        }
        if completed {
            assert_eq!(snapshot.status, SubagentStatus::Completed);
        }
    }
}
