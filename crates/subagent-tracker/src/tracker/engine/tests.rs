//! The engine's races, widened by pauses the engine takes where these switches say (test builds only).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::{InMemorySubagentTaskTracker, TaskStart};

/// Widens the window between the end of a run in a tree and its collapse into a record (a run outside any
/// tree collapses within its end).
pub(super) static PAUSE_BEFORE_COLLAPSE: AtomicBool = AtomicBool::new(false);

pub(super) fn pause(switch: &AtomicBool, milliseconds: u64) {
    if switch.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(milliseconds));
    }
}

/// An end by id that finds a task as soon as its start makes it visible leaves nothing among the pending runs:
/// the start counts it under the lock that makes it visible, before anything can find it.
#[test]
fn an_end_racing_a_start_leaves_nothing_among_the_pending_runs() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    for round in 0..20 {
        let task_id = format!("t{round}");
        std::thread::scope(|scope| {
            let ender = scope.spawn(|| {
                let began = Instant::now();
                while !tracker.end(&task_id, Ok(None)) {
                    if began.elapsed() > Duration::from_secs(5) {
                        panic!("the start never became visible");
                    }
                    std::hint::spin_loop();
                }
            });
            let handle = tracker.start(TaskStart::new().task_id(task_id.as_str()));
            ender.join().unwrap();
            drop(handle);
        });
    }
    assert!(tracker.shared.tasks.pending_entries().is_empty());
}

/// A restart that replaces a finished run while that run is still an entry (a child collapses once the
/// session has settled its end; the pause widens the window between the two): the collapse then finds its id
/// started again, and the retention window counts the restart alone, never a run the id map no longer holds.
#[test]
fn a_restart_between_an_end_and_its_collapse_forgets_the_record() {
    a_restart_racing_an_end_forgets_what_it_replaces(Some("parent"));
}

/// A task outside any tree collapses within its end, under the record lock the end holds. A restart may
/// still find its entry finished and not yet collapsed (it reads the status without that lock): the model
/// check `restart_races_an_end` explores that order. Here the restart waits for a snapshot, which takes the
/// lock, and so finds the record.
#[test]
fn a_restart_racing_the_end_of_a_task_outside_a_tree_forgets_the_record() {
    a_restart_racing_an_end_forgets_what_it_replaces(None);
}

/// The tests that set the pauses run one at a time: one's reset would cut the other's pauses short.
static PAUSING: Mutex<()> = Mutex::new(());

fn a_restart_racing_an_end_forgets_what_it_replaces(parent: Option<&str>) {
    let _pausing = PAUSING.lock().unwrap_or_else(PoisonError::into_inner);
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let _parent = parent.map(|parent| tracker.start(TaskStart::new().task_id(parent)).unwrap());
    PAUSE_BEFORE_COLLAPSE.store(true, Ordering::Relaxed);
    let mut start = TaskStart::new().task_id("a");
    if let Some(parent) = parent {
        start = start.parent_id(parent);
    }
    let handle = tracker.start(start).unwrap();
    std::thread::scope(|scope| {
        let restarter = scope.spawn(|| {
            let began = Instant::now();
            while !tracker.get("a").is_some_and(|snapshot| snapshot.finished) {
                assert!(
                    began.elapsed() < Duration::from_secs(5),
                    "the end never came"
                );
                std::hint::spin_loop();
            }
            tracker.start(TaskStart::new().task_id("a")).unwrap()
        });
        handle.complete(None);
        let restarted = restarter.join().unwrap();
        PAUSE_BEFORE_COLLAPSE.store(false, Ordering::Relaxed);
        restarted.complete(None);
    });
    // The parent, unfinished, is retained beside the restarted run; the window counts the restart alone.
    assert_eq!(tracker.retained_count(), 1 + usize::from(parent.is_some()));
    assert_eq!(tracker.shared.finished.retained(), 1);
}

/// Threads that start, end, cancel and restart tasks from a small pool of ids, with a small bound and an age
/// limit, race every way a run enters and leaves the retention window (its end, its collapse, a restart that
/// replaces it, an eviction, a forgetting for its age). Once they stop, the window counts exactly the finished
/// runs the map holds, no more than the bound, and no pending slot is left taken.
#[test]
fn the_window_counts_exactly_the_finished_runs_the_map_holds_after_racing_threads() {
    const BOUND: usize = 8;
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::with_config(
        None,
        crate::TrackerConfig::default()
            .with_max_finished_tasks(BOUND)
            .with_max_finished_age(Duration::from_millis(2)),
    );
    let began = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..4_u64 {
            let tracker = &tracker;
            scope.spawn(move || {
                for round in 0..20_000_u64 {
                    if began.elapsed() > Duration::from_secs(20) {
                        break;
                    }
                    let task_id = format!("t{}", (round * 7 + thread * 3) % 11);
                    let Ok(handle) = tracker.start(TaskStart::new().task_id(task_id.as_str()))
                    else {
                        continue;
                    };
                    match round % 4 {
                        0 => drop(handle),
                        1 => {
                            tracker.cancel(&task_id, None);
                            handle.stop_cancelled(None);
                        }
                        _ => {
                            handle.complete(None);
                        }
                    }
                    // A query forgets the runs past their age, as an end does.
                    if round % 64 == 0 {
                        assert!(tracker.tasks().len() <= 11);
                    }
                }
            });
        }
    });
    let finished_in_map = tracker
        .shared
        .tasks
        .runs()
        .iter()
        .filter(|run| run.is_finished())
        .count();
    let counted = tracker.shared.finished.retained();
    assert_eq!(counted, finished_in_map, "the window and the map disagree");
    assert!(
        counted <= BOUND,
        "{counted} finished runs counted with a bound of {BOUND}"
    );
    assert!(tracker.shared.tasks.pending_entries().is_empty());
    assert_eq!(
        tracker.shared.tasks.len(),
        counted,
        "every task ended, so every run retained is finished"
    );
}
