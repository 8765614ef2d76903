//! CONTRACT §3: cascade, session cancel and close, and cascades racing child starts.

use crate::common;
use std::sync::Barrier;
use std::thread;

use subagent_tracker::{InMemorySubagentTaskTracker, SubagentStatus, TaskStart, TrackerError};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(1_000_000)
}

#[test]
fn cancelling_a_parent_cancels_running_descendants_with_its_reason_and_origin() {
    let tracker = tracker();
    let _root = tracker.start(TaskStart::new().task_id("root")).unwrap();
    let _child = tracker
        .start(TaskStart::new().task_id("child").parent_id("root"))
        .unwrap();
    let _grandchild = tracker
        .start(TaskStart::new().task_id("grandchild").parent_id("child"))
        .unwrap();
    let done = tracker
        .start(TaskStart::new().task_id("done").parent_id("child"))
        .unwrap();
    done.complete(None);
    let _sibling = tracker
        .start(TaskStart::new().task_id("sibling").parent_id("root"))
        .unwrap();

    assert!(tracker.cancel("child", Some("too slow")));

    for task_id in ["child", "grandchild"] {
        let snapshot = tracker.get(task_id).unwrap();
        assert_eq!(snapshot.status, SubagentStatus::Cancelled, "{task_id}");
        assert_eq!(snapshot.cancel_reason.as_deref(), Some("too slow"));
        assert_eq!(snapshot.cancel_origin.as_deref(), Some("child"));
        assert!(snapshot.cancelled_at.is_some());
    }
    assert_eq!(
        tracker.get("done").unwrap().status,
        SubagentStatus::Completed
    );
    assert_eq!(
        tracker.get("root").unwrap().status,
        SubagentStatus::Running,
        "the parent is untouched"
    );
    assert_eq!(
        tracker.get("sibling").unwrap().status,
        SubagentStatus::Running,
        "siblings are untouched"
    );
}

#[test]
fn a_cancelled_child_does_not_touch_its_parent() {
    let tracker = tracker();
    let _root = tracker.start(TaskStart::new().task_id("root")).unwrap();
    let _child = tracker
        .start(TaskStart::new().task_id("child").parent_id("root"))
        .unwrap();
    assert!(tracker.cancel("child", None));
    assert_eq!(tracker.get("root").unwrap().status, SubagentStatus::Running);
    assert_eq!(
        tracker.get("child").unwrap().cancel_reason.as_deref(),
        Some("cancelled")
    );
}

#[test]
fn a_deep_chain_cascades_without_recursion() {
    let tracker = tracker();
    let mut handles = vec![tracker.start(TaskStart::new().task_id("0")).unwrap()];
    for depth in 1..5_000 {
        let start = TaskStart::new()
            .task_id(depth.to_string())
            .parent_id((depth - 1).to_string());
        handles.push(tracker.start(start).unwrap());
    }
    assert!(tracker.cancel("0", None));
    assert!(handles
        .iter()
        .all(subagent_tracker::SubagentTaskHandle::is_cancelled));
    assert_eq!(
        tracker.get("4999").unwrap().cancel_origin.as_deref(),
        Some("0")
    );
}

#[test]
fn a_child_started_under_a_cancelled_parent_starts_cancelled() {
    let tracker = tracker();
    let _root = tracker.start(TaskStart::new().task_id("root")).unwrap();
    tracker.cancel("root", Some("shutting down"));
    let child = tracker
        .start(TaskStart::new().task_id("late-child").parent_id("root"))
        .unwrap();
    assert!(child.is_cancelled());
    let snapshot = child.snapshot();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert_eq!(snapshot.cancel_reason.as_deref(), Some("shutting down"));
    assert_eq!(snapshot.cancel_origin.as_deref(), Some("root"));
    assert!(tracker
        .pending()
        .iter()
        .all(|pending| &*pending.task_id != "late-child"));
}

#[test]
fn a_finished_or_unknown_parent_is_refused_and_nothing_changes() {
    let tracker = tracker();
    let root = tracker.start(TaskStart::new().task_id("root")).unwrap();
    root.complete(None);
    let error = tracker
        .start(TaskStart::new().task_id("child").parent_id("root"))
        .unwrap_err();
    assert!(
        matches!(error, TrackerError::ParentFinished { .. }),
        "{error}"
    );
    let error = tracker
        .start(TaskStart::new().task_id("child").parent_id("nobody"))
        .unwrap_err();
    assert!(matches!(error, TrackerError::UnknownTask { .. }), "{error}");
    assert!(tracker.get("child").is_none());
    assert_eq!(tracker.retained_count(), 1);
}

#[test]
fn cascade_racing_child_starts_never_leaves_an_orphan_running() {
    for round in 0..50 {
        let tracker = tracker();
        let _root = tracker.start(TaskStart::new().task_id("root")).unwrap();
        let barrier = Barrier::new(3);
        thread::scope(|scope| {
            let spawners: Vec<_> = (0..2)
                .map(|spawner| {
                    let tracker = &tracker;
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        let mut handles = Vec::new();
                        for index in 0..300 {
                            let parent = if index % 3 == 0 || handles.is_empty() {
                                "root".to_owned()
                            } else {
                                format!("s{spawner}-{}", index - 1)
                            };
                            let start = TaskStart::new()
                                .task_id(format!("s{spawner}-{index}"))
                                .parent_id(parent);
                            match tracker.start(start) {
                                Ok(handle) => handles.push(handle),
                                // The parent chain may have been refused already; keep going.
                                Err(
                                    TrackerError::UnknownTask { .. }
                                    | TrackerError::ParentFinished { .. },
                                ) => {}
                                Err(other) => panic!("unexpected {other}"),
                            }
                        }
                        handles
                    })
                })
                .collect();
            barrier.wait();
            assert!(tracker.cancel("root", Some("race")));
            // Hold every handle while judging: a dropped handle would end its task.
            let _handles: Vec<_> = spawners
                .into_iter()
                .map(|spawner| spawner.join().unwrap())
                .collect();
            for snapshot in tracker.tasks() {
                assert_eq!(
                    snapshot.status,
                    SubagentStatus::Cancelled,
                    "round {round}: {} ran on",
                    snapshot.task_id
                );
                assert_eq!(snapshot.cancel_origin.as_deref(), Some("root"));
                assert!(!snapshot.finished);
            }
            assert!(tracker.pending().is_empty());
        });
    }
}

#[test]
fn session_cancel_moves_every_running_task_and_counts_them() {
    let tracker = tracker();
    let _a = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let _b = tracker
        .start(TaskStart::new().task_id("b").parent_id("a"))
        .unwrap();
    let c = tracker.start(TaskStart::new().task_id("c")).unwrap();
    c.complete(None);
    let _d = tracker.start(TaskStart::new().task_id("d")).unwrap();
    tracker.cancel("d", None);
    assert_eq!(tracker.cancel_all(Some("session over")), 2);
    assert_eq!(
        tracker.get("b").unwrap().cancel_reason.as_deref(),
        Some("session over")
    );
    assert_eq!(
        tracker.get("b").unwrap().cancel_origin.as_deref(),
        Some("b")
    );
    assert_eq!(tracker.cancel_all(None), 0);
    // The session stays open after cancel_all.
    assert!(tracker.start(TaskStart::new().task_id("e")).is_ok());
}

#[test]
fn close_cancels_and_refuses_new_starts() {
    let tracker = tracker();
    let _a = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert_eq!(tracker.close(Some("bye")), 1);
    assert!(tracker.is_closed());
    let error = tracker.start(TaskStart::new().task_id("b")).unwrap_err();
    assert!(
        matches!(error, TrackerError::SessionClosed { .. }),
        "{error}"
    );
    assert_eq!(
        tracker.get("a").unwrap().cancel_reason.as_deref(),
        Some("bye")
    );
}

#[test]
fn starts_racing_close_end_refused_or_cancelled() {
    for _ in 0..100 {
        let tracker = tracker();
        let barrier = Barrier::new(2);
        thread::scope(|scope| {
            let starter = scope.spawn(|| {
                barrier.wait();
                let mut handles = Vec::new();
                for index in 0..200 {
                    match tracker.start(TaskStart::new().task_id(index.to_string())) {
                        Ok(handle) => handles.push(handle),
                        Err(TrackerError::SessionClosed { .. }) => break,
                        Err(other) => panic!("{other}"),
                    }
                }
                handles
            });
            barrier.wait();
            tracker.close(Some("closing"));
            let handles = starter.join().unwrap();
            assert!(
                tracker.pending().is_empty(),
                "a start raced past close and kept running"
            );
            assert!(handles
                .iter()
                .all(subagent_tracker::SubagentTaskHandle::is_cancelled));
        });
    }
}
