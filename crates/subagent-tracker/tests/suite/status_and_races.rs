//! CONTRACT §2 and §3: status transitions, and the first transition winning under races.

use crate::common;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use subagent_tracker::{InMemorySubagentTaskTracker, SubagentStatus, TaskStart};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(100_000)
}

#[test]
fn a_task_is_running_from_its_start_and_completes() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert_eq!(tracker.get("a").unwrap().status, SubagentStatus::Running);
    assert!(handle.complete(Some("done".into())));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Completed);
    assert!(snapshot.finished);
    assert_eq!(snapshot.result.as_deref(), Some("done"));
    assert!(snapshot.ended_at.is_some());
}

#[test]
fn terminal_statuses_are_sticky() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.fail("boom"));
    assert!(!handle.complete(None));
    assert!(!tracker.cancel("a", None));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Failed);
    assert_eq!(snapshot.error.as_deref(), Some("boom"));
    assert!(!handle.token().is_cancelled());
}

#[test]
fn a_late_end_never_downgrades_cancelled_and_is_kept_for_diagnosis() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(tracker.cancel("a", Some("stop")));
    let cancelled = tracker.get("a").unwrap();
    assert_eq!(cancelled.status, SubagentStatus::Cancelled);
    assert!(
        !cancelled.finished,
        "a cancelled task stays unfinished until its runner stops"
    );
    assert!(!handle.complete(Some("late result".into())));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(snapshot.finished);
    assert_eq!(snapshot.result.as_deref(), Some("late result"));
    assert_eq!(snapshot.cancel_reason.as_deref(), Some("stop"));
    assert!(
        !handle.fail("later still"),
        "a finished task takes no further end"
    );
    assert_eq!(tracker.get("a").unwrap().error, None);
}

#[test]
fn a_late_failure_is_kept_too() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    tracker.cancel("a", None);
    assert!(!handle.fail("crashed while stopping"));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert_eq!(snapshot.error.as_deref(), Some("crashed while stopping"));
}

#[test]
fn dropping_a_running_handle_fails_the_task_and_a_cancelled_one_finishes() {
    let tracker = tracker();
    drop(tracker.start(TaskStart::new().task_id("dropped")).unwrap());
    let snapshot = tracker.get("dropped").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Failed);
    assert!(snapshot.finished);
    assert_eq!(
        snapshot.error.as_deref(),
        Some(subagent_tracker::DROPPED_HANDLE_ERROR)
    );

    let handle = tracker
        .start(TaskStart::new().task_id("cancelled"))
        .unwrap();
    tracker.cancel("cancelled", None);
    drop(handle);
    let snapshot = tracker.get("cancelled").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(snapshot.finished);
}

#[test]
fn stop_cancelled_cancels_a_running_task_then_finishes_it() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let _child = tracker
        .start(TaskStart::new().task_id("b").parent_id("a"))
        .unwrap();
    assert!(handle.stop_cancelled(Some("runner saw a cancel")));
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(snapshot.finished);
    assert_eq!(tracker.get("b").unwrap().status, SubagentStatus::Cancelled);
}

/// Races `cancel` against an end on many tasks; exactly one wins each, and each call's return value agrees with
/// the final status.
fn race_cancel_against(
    end: fn(&subagent_tracker::SubagentTaskHandle) -> bool,
    expected: SubagentStatus,
) {
    const TASKS: usize = 5_000;
    let tracker = tracker();
    let handles: Vec<_> = (0..TASKS)
        .map(|index| {
            tracker
                .start(TaskStart::new().task_id(format!("task-{index}")))
                .unwrap()
        })
        .collect();
    let barrier = Arc::new(Barrier::new(3));
    let cancel_wins: Vec<AtomicBool> = (0..TASKS).map(|_| AtomicBool::new(false)).collect();
    let cancel_wins = Arc::new(cancel_wins);
    thread::scope(|scope| {
        for _ in 0..2 {
            let tracker = tracker.clone();
            let barrier = barrier.clone();
            let cancel_wins = cancel_wins.clone();
            scope.spawn(move || {
                barrier.wait();
                for index in 0..TASKS {
                    if tracker.cancel(&format!("task-{index}"), None) {
                        assert!(
                            !cancel_wins[index].swap(true, Ordering::SeqCst),
                            "two cancels won"
                        );
                    }
                }
            });
        }
        barrier.wait();
        let end_wins: Vec<bool> = handles.iter().map(end).collect();
        for (index, end_won) in end_wins.into_iter().enumerate() {
            let cancel_won = cancel_wins[index].load(Ordering::SeqCst);
            // Other threads may still be cancelling later indices; only judge settled tasks below.
            let _ = (end_won, cancel_won);
        }
    });
    for (index, handle) in handles.iter().enumerate() {
        let snapshot = tracker.get(&format!("task-{index}")).unwrap();
        let cancel_won = cancel_wins[index].load(Ordering::SeqCst);
        assert_eq!(
            snapshot.status == SubagentStatus::Cancelled,
            cancel_won,
            "task {index}"
        );
        if !cancel_won {
            assert_eq!(snapshot.status, expected);
        }
        assert_eq!(handle.is_cancelled(), cancel_won);
        assert!(snapshot.finished);
    }
}

#[test]
fn cancel_racing_complete_has_exactly_one_winner() {
    race_cancel_against(
        |handle| handle.complete(Some("ok".into())),
        SubagentStatus::Completed,
    );
}

#[test]
fn cancel_racing_fail_has_exactly_one_winner() {
    race_cancel_against(|handle| handle.fail("error"), SubagentStatus::Failed);
}

#[test]
fn complete_returns_true_iff_the_task_ends_completed_under_races() {
    const TASKS: usize = 3_000;
    let tracker = tracker();
    let handles: Vec<_> = (0..TASKS)
        .map(|index| {
            tracker
                .start(TaskStart::new().task_id(format!("t{index}")))
                .unwrap()
        })
        .collect();
    let completions = AtomicUsize::new(0);
    thread::scope(|scope| {
        scope.spawn(|| {
            for index in 0..TASKS {
                tracker.cancel(&format!("t{index}"), None);
            }
        });
        scope.spawn(|| {
            for handle in &handles {
                let won = handle.complete(None);
                let status = handle.status();
                assert_eq!(won, status == SubagentStatus::Completed);
                if won {
                    completions.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    });
    let completed = tracker
        .tasks()
        .iter()
        .filter(|snapshot| snapshot.status == SubagentStatus::Completed)
        .count();
    assert_eq!(completed, completions.load(Ordering::Relaxed));
}

#[test]
fn of_many_concurrent_cancels_exactly_one_returns_true() {
    for round in 0..200 {
        let tracker = tracker();
        let _handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
        let barrier = Barrier::new(4);
        let wins = AtomicUsize::new(0);
        thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    barrier.wait();
                    if tracker.cancel("a", Some("race")) {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(wins.load(Ordering::SeqCst), 1, "round {round}");
    }
}

#[test]
fn an_end_recorded_by_id_keeps_the_first_transition_rule() {
    let tracker = common::tracker_retaining(100);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(tracker.end("a", Ok(Some("done".into()))));
    assert!(!handle.complete(None), "the runner finds the task finished");
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Completed);
    assert_eq!(snapshot.result.as_deref(), Some("done"));

    let _failing = tracker.start(TaskStart::new().task_id("b")).unwrap();
    assert!(tracker.end("b", Err("boom")));
    assert_eq!(tracker.get("b").unwrap().status, SubagentStatus::Failed);

    let _cancelled = tracker.start(TaskStart::new().task_id("c")).unwrap();
    assert!(tracker.cancel("c", None));
    assert!(
        !tracker.end("c", Ok(Some("late".into()))),
        "a late end never downgrades Cancelled"
    );
    let snapshot = tracker.get("c").unwrap();
    assert_eq!(
        (snapshot.status, snapshot.finished),
        (SubagentStatus::Cancelled, true)
    );
    assert_eq!(snapshot.result.as_deref(), Some("late"));

    assert!(!tracker.end("unknown", Ok(None)));
    assert!(
        !tracker.end("a", Err("again")),
        "a finished task changes nothing"
    );
}

#[test]
fn ends_by_id_race_cancels_with_exactly_one_winner() {
    for _ in 0..200 {
        let tracker = common::tracker_retaining(100);
        let _handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
        let canceller = tracker.clone();
        let cancel = std::thread::spawn(move || canceller.cancel("a", None));
        let ended = tracker.end("a", Ok(None));
        let cancelled = cancel.join().unwrap();
        assert!(ended ^ cancelled);
        let expected = if ended {
            SubagentStatus::Completed
        } else {
            SubagentStatus::Cancelled
        };
        assert_eq!(tracker.get("a").unwrap().status, expected);
    }
}
