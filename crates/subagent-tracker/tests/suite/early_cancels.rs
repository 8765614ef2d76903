//! CONTRACT §3 (cancel before start): a cancel of an id with no pending task is recorded, and the next start or
//! reservation of the id begins `Cancelled`, with its reason and cause `requested`; records expire, are used
//! once, and never miss a start that races them.

use crate::common;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use subagent_tracker::{
    CancelCause, InMemorySubagentTaskTracker, SubagentStatus, TaskStart, TrackerConfig,
    MAX_EARLY_CANCELS,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(1_000)
}

#[test]
fn a_start_after_a_recorded_cancel_begins_cancelled_with_its_reason() {
    let tracker = tracker();
    assert!(!tracker.cancel_before_start("a", Some("user pressed stop")));
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.is_cancelled());
    let task = tracker.get("a").unwrap();
    assert_eq!(task.status, SubagentStatus::Cancelled);
    assert_eq!(task.cancel_reason.as_deref(), Some("user pressed stop"));
    assert_eq!(task.cancel_cause, Some(CancelCause::Requested));
    assert_eq!(task.cancel_origin.as_deref(), Some("a"));
    drop(handle);
    // Used once: the next run of the id runs.
    let again = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(!again.is_cancelled());
}

#[test]
fn a_pending_task_is_cancelled_at_once_and_nothing_is_recorded() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(tracker.cancel_before_start("a", None));
    assert!(handle.is_cancelled());
    drop(handle);
    let again = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(!again.is_cancelled());
}

#[test]
fn a_reservation_after_a_recorded_cancel_begins_cancelled_and_finished() {
    let tracker = tracker();
    tracker.cancel_before_start("q", Some("not needed"));
    tracker
        .reserve(TaskStart::new().task_id("q"), None)
        .unwrap();
    let task = tracker.get("q").unwrap();
    assert_eq!(task.status, SubagentStatus::Cancelled);
    assert!(task.finished);
    // Its claim still hands over a handle whose token has fired (contract §18).
    assert!(tracker.claim("q").unwrap().is_cancelled());
}

#[test]
fn a_child_of_a_cancelled_parent_is_cancelled_by_its_parent_and_uses_the_record_up() {
    let tracker = tracker();
    let _parent = tracker.start(TaskStart::new().task_id("p")).unwrap();
    tracker.cancel("p", Some("parent stopped"));
    tracker.cancel_before_start("c", Some("recorded"));
    let _child = tracker
        .start(TaskStart::new().task_id("c").parent_id("p"))
        .unwrap();
    let task = tracker.get("c").unwrap();
    assert_eq!(task.cancel_cause, Some(CancelCause::Parent));
    assert_eq!(task.cancel_reason.as_deref(), Some("parent stopped"));
}

#[test]
fn a_refused_start_leaves_the_record_for_the_next_one() {
    let tracker = tracker();
    tracker.cancel_before_start("a", Some("stop"));
    assert!(tracker
        .start(TaskStart::new().task_id("a").parent_id("unknown"))
        .is_err());
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.is_cancelled());
}

#[test]
fn a_record_expires_after_the_session_s_ttl() {
    let tracker = InMemorySubagentTaskTracker::<String>::with_config(
        Some("s"),
        TrackerConfig::default().with_early_cancel_ttl(Duration::from_millis(50)),
    );
    tracker.cancel_before_start("a", None);
    thread::sleep(Duration::from_millis(120));
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(!handle.is_cancelled());
}

#[test]
fn at_most_max_early_cancels_are_kept_and_the_oldest_goes_first() {
    let tracker = tracker();
    for index in 0..=MAX_EARLY_CANCELS {
        tracker.cancel_before_start(&format!("t{index}"), None);
    }
    let oldest = tracker.start(TaskStart::new().task_id("t0")).unwrap();
    assert!(!oldest.is_cancelled(), "the oldest record was dropped");
    let newest = tracker
        .start(TaskStart::new().task_id(format!("t{MAX_EARLY_CANCELS}").as_str()))
        .unwrap();
    assert!(newest.is_cancelled());
}

#[test]
fn a_batch_honours_recorded_cancels() {
    let tracker = tracker();
    tracker.cancel_before_start("b", Some("stop b"));
    let handles = tracker
        .start_batch(vec![
            TaskStart::new().task_id("a"),
            TaskStart::new().task_id("b"),
        ])
        .unwrap();
    assert!(!handles[0].is_cancelled());
    assert!(handles[1].is_cancelled());
}

#[test]
fn a_recorded_cancel_racing_a_start_is_never_lost() {
    for round in 0..300 {
        let tracker = Arc::new(tracker());
        let task_id = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(2));
        let starting = {
            let (tracker, barrier, task_id) = (tracker.clone(), barrier.clone(), task_id.clone());
            thread::spawn(move || {
                barrier.wait();
                tracker
                    .start(TaskStart::new().task_id(task_id.as_str()))
                    .unwrap()
            })
        };
        barrier.wait();
        let cancelled_now = tracker.cancel_before_start(&task_id, Some("stop"));
        let handle = starting.join().unwrap();
        // Whichever came first, the start is cancelled, by this cancel, exactly once.
        assert!(
            handle.is_cancelled(),
            "round {round}: the cancel missed the start"
        );
        let task = tracker.get(&task_id).unwrap();
        assert_eq!(task.cancel_reason.as_deref(), Some("stop"), "round {round}");
        drop(handle);
        let next = tracker
            .start(TaskStart::new().task_id(task_id.as_str()))
            .unwrap();
        assert!(
            !next.is_cancelled(),
            "round {round}: the record outlived its start"
        );
        let _ = cancelled_now;
    }
}
