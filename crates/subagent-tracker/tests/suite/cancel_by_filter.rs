//! CONTRACT §3 (cancel by filter): `cancel_matching` cancels the pending tasks that match every filter given,
//! each with its pending descendants and cause `requested`, and returns the ids of the matching tasks it moved,
//! in start order. Of racing cancels, each task is reported by exactly one.

use crate::common;
use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;

use subagent_tracker::{
    CancelCause, InMemorySubagentTaskTracker, SubagentStatus, SubagentTaskHandle, TaskFilter,
    TaskStart,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(1_000)
}

fn start(tracker: &InMemorySubagentTaskTracker, start: TaskStart) -> SubagentTaskHandle {
    tracker.start(start).unwrap()
}

/// Metadata as "key=value" text, for these tests: a task matches when its metadata is `wanted`.
fn metadata_is(wanted: &str) -> impl Fn(Option<&String>) -> bool + '_ {
    move |metadata| metadata.map(String::as_str) == Some(wanted)
}

#[test]
fn every_filter_given_must_match_and_the_ids_come_in_start_order() {
    let tracker = tracker();
    let _coder = start(&tracker, TaskStart::new().task_id("coder-1").agent("coder"));
    let _researcher = start(
        &tracker,
        TaskStart::new().task_id("researcher").agent("researcher"),
    );
    tracker
        .reserve(
            TaskStart::new().task_id("coder-queued").agent("coder"),
            None,
        )
        .unwrap();
    let _tagged = start(
        &tracker,
        TaskStart::new()
            .task_id("coder-2")
            .agent("coder")
            .metadata("user=42".to_owned()),
    );
    let done = start(
        &tracker,
        TaskStart::new().task_id("coder-done").agent("coder"),
    );
    assert!(done.complete(None));

    let running_coders = TaskFilter::new()
        .agent("coder")
        .status(SubagentStatus::Running)
        .metadata(metadata_is("user=42"));
    assert_eq!(
        tracker.cancel_matching(&running_coders, Some("user 42 left")),
        [Arc::from("coder-2")]
    );
    let cancelled = tracker.get("coder-2").unwrap();
    assert_eq!(cancelled.cancel_reason.as_deref(), Some("user 42 left"));
    assert_eq!(cancelled.cancel_cause, Some(CancelCause::Requested));
    assert_eq!(cancelled.cancel_origin.as_deref(), Some("coder-2"));

    let coders: TaskFilter = TaskFilter::new().agent("coder");
    assert_eq!(
        tracker.cancel_matching(&coders, None),
        [Arc::from("coder-1"), Arc::from("coder-queued")],
        "pending coders only, in start order: the finished one and the one already cancelled are left"
    );
    assert_eq!(
        tracker.get("coder-done").unwrap().status,
        SubagentStatus::Completed
    );
    assert_eq!(
        tracker.get("researcher").unwrap().status,
        SubagentStatus::Running
    );
    assert!(tracker.cancel_matching(&coders, None).is_empty());
}

#[test]
fn a_status_that_is_not_pending_matches_nothing() {
    let tracker = tracker();
    let done = start(&tracker, TaskStart::new().task_id("done"));
    assert!(done.complete(None));
    let _running = start(&tracker, TaskStart::new().task_id("running"));
    for status in [
        SubagentStatus::Completed,
        SubagentStatus::Failed,
        SubagentStatus::Cancelled,
    ] {
        let filter: TaskFilter = TaskFilter::new().status(status);
        assert!(tracker.cancel_matching(&filter, None).is_empty());
    }
    assert_eq!(
        tracker.get("running").unwrap().status,
        SubagentStatus::Running
    );
}

#[test]
fn the_cascade_reaches_descendants_and_reports_only_the_matching_ones() {
    let tracker = tracker();
    let _parent = start(&tracker, TaskStart::new().task_id("plan").agent("planner"));
    let _helper = start(
        &tracker,
        TaskStart::new()
            .task_id("helper")
            .parent_id("plan")
            .agent("tool"),
    );
    let _sub_planner = start(
        &tracker,
        TaskStart::new()
            .task_id("sub-plan")
            .parent_id("helper")
            .agent("planner"),
    );
    let _other = start(&tracker, TaskStart::new().task_id("other").agent("tool"));
    let planners: TaskFilter = TaskFilter::new().agent("planner");
    assert_eq!(
        tracker.cancel_matching(&planners, None),
        [Arc::from("plan"), Arc::from("sub-plan")],
        "sub-plan matched, and the cascade of plan moved it: it is reported"
    );
    let helper = tracker.get("helper").unwrap();
    assert_eq!(
        helper.status,
        SubagentStatus::Cancelled,
        "a descendant that did not match is cancelled too"
    );
    assert_eq!(helper.cancel_cause, Some(CancelCause::Parent));
    assert_eq!(
        tracker.get("sub-plan").unwrap().cancel_cause,
        Some(CancelCause::Parent),
        "reached first by the cascade"
    );
    assert_eq!(
        tracker.get("other").unwrap().status,
        SubagentStatus::Running
    );
}

#[test]
fn an_empty_filter_cancels_every_pending_task() {
    let tracker = tracker();
    let handles: Vec<_> = (0..5)
        .map(|index| start(&tracker, TaskStart::new().task_id(format!("t{index}"))))
        .collect();
    let everything: TaskFilter = TaskFilter::new();
    let moved = tracker.cancel_matching(&everything, None);
    assert_eq!(moved.len(), 5);
    assert!(handles.iter().all(SubagentTaskHandle::is_cancelled));
}

#[test]
fn racing_cancels_by_filter_and_by_id_report_each_task_exactly_once() {
    for _ in 0..50 {
        let tracker = tracker();
        let handles: Vec<_> = (0..40)
            .map(|index| {
                start(
                    &tracker,
                    TaskStart::new()
                        .task_id(format!("t{index}"))
                        .agent("worker"),
                )
            })
            .collect();
        let barrier = Arc::new(Barrier::new(3));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (tracker, barrier) = (tracker.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    let workers: TaskFilter = TaskFilter::new().agent("worker");
                    tracker.cancel_matching(&workers, None)
                })
            })
            .collect();
        barrier.wait();
        let by_id: Vec<Arc<str>> = (0..40)
            .rev()
            .map(|index| format!("t{index}"))
            .filter(|task_id| tracker.cancel(task_id, None))
            .map(Arc::from)
            .collect();
        let mut reported: Vec<Arc<str>> = by_id;
        for racer in racers {
            reported.extend(racer.join().unwrap());
        }
        let unique: HashSet<_> = reported.iter().cloned().collect();
        assert_eq!(reported.len(), 40, "each task reported once: {reported:?}");
        assert_eq!(unique.len(), 40);
        assert!(handles.iter().all(SubagentTaskHandle::is_cancelled));
    }
}

#[test]
fn a_cancel_by_filter_racing_ends_either_cancels_a_task_or_leaves_its_end() {
    for _ in 0..50 {
        let tracker = tracker();
        let handles: Vec<_> = (0..40)
            .map(|index| start(&tracker, TaskStart::new().task_id(format!("t{index}"))))
            .collect();
        let barrier = Arc::new(Barrier::new(2));
        let canceller = {
            let (tracker, barrier) = (tracker.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                let everything: TaskFilter = TaskFilter::new();
                tracker.cancel_matching(&everything, None)
            })
        };
        barrier.wait();
        let completed: HashSet<Arc<str>> = handles
            .into_iter()
            .filter_map(|handle| handle.complete(None).then(|| handle.task_id().clone()))
            .collect();
        let cancelled: HashSet<Arc<str>> = canceller.join().unwrap().into_iter().collect();
        assert!(completed.is_disjoint(&cancelled));
        assert_eq!(completed.len() + cancelled.len(), 40);
        for task_id in &cancelled {
            assert_eq!(
                tracker.get(task_id).unwrap().status,
                SubagentStatus::Cancelled
            );
        }
    }
}
