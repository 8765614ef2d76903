//! CONTRACT §7 (age): finished tasks forgotten once old enough, on request (`forget_finished`) or by the
//! session's `max_finished_age`; pending tasks never.

use crate::common;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use subagent_tracker::{InMemorySubagentTaskTracker, TaskStart, TrackerConfig};

fn aged(max_finished_age: Duration) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        Some("session"),
        TrackerConfig::default().with_max_finished_age(max_finished_age),
    )
}

#[test]
fn forget_finished_forgets_only_tasks_that_ended_long_enough_ago() {
    let tracker = common::tracker_retaining(100);
    tracker
        .start(TaskStart::new().task_id("old"))
        .unwrap()
        .complete(None);
    thread::sleep(Duration::from_millis(300));
    tracker
        .start(TaskStart::new().task_id("young"))
        .unwrap()
        .complete(None);
    let running = tracker.start(TaskStart::new().task_id("running")).unwrap();
    // "old" ended at least 300 ms ago, "young" a moment ago: 150 ms tells them apart on a loaded machine.
    assert_eq!(tracker.forget_finished(Duration::from_millis(150)), 1);
    assert!(tracker.get("old").is_none());
    assert!(tracker.get("young").is_some());
    assert!(tracker.get("running").is_some());
    assert_eq!(tracker.retained_count(), 2);
    // Nothing finished is old enough now; a pending task is never forgotten, however old.
    assert_eq!(tracker.forget_finished(Duration::from_secs(3600)), 0);
    assert_eq!(tracker.forget_finished(Duration::ZERO), 1);
    assert_eq!(common::task_ids(&tracker), ["running"]);
    drop(running);
}

#[test]
fn a_forgotten_id_may_start_again_and_its_new_run_is_kept() {
    let tracker = common::tracker_retaining(100);
    tracker
        .start(TaskStart::new().task_id("a"))
        .unwrap()
        .complete(None);
    assert_eq!(tracker.forget_finished(Duration::ZERO), 1);
    let again = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(tracker.get("a").is_some_and(|task| !task.finished));
    assert!(again.complete(None));
    assert_eq!(tracker.retained_count(), 1);
}

/// A task forgotten for its age stops counting against `max_finished_tasks`, as an evicted one does: the bound
/// then keeps the tasks that finished after it, and evicts none of them early. A run kept as its entry (a
/// reservation cancelled before its claim) ages the same way.
#[test]
fn a_task_forgotten_for_its_age_frees_its_place_in_the_bound() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::with_config(
        Some("session"),
        TrackerConfig::default()
            .with_max_finished_tasks(2)
            .with_max_finished_age(Duration::from_millis(100)),
    );
    let reserved = tracker
        .reserve(TaskStart::new().task_id("reserved"), None)
        .unwrap();
    assert!(tracker.cancel(&reserved, None));
    tracker
        .start(TaskStart::new().task_id("old"))
        .unwrap()
        .complete(None);
    thread::sleep(Duration::from_millis(150));
    assert_eq!(tracker.retained_count(), 0);
    for task_id in ["b", "c"] {
        tracker
            .start(TaskStart::new().task_id(task_id))
            .unwrap()
            .complete(None);
    }
    assert_eq!(common::task_ids(&tracker), ["b", "c"]);
}

#[test]
fn max_finished_age_forgets_a_task_once_it_is_old_enough_and_no_query_shows_it_after() {
    let tracker = aged(Duration::from_millis(80));
    tracker
        .start(TaskStart::new().task_id("a"))
        .unwrap()
        .complete(None);
    let running = tracker.start(TaskStart::new().task_id("b")).unwrap();
    thread::sleep(Duration::from_millis(120));
    // No end has happened since: the queries themselves leave it out, and forget it.
    assert!(tracker.get("a").is_none());
    assert_eq!(common::task_ids(&tracker), ["b"]);
    assert_eq!(tracker.retained_count(), 1);
    assert_eq!(tracker.forget_finished(Duration::ZERO), 0);
    // A handle follows its own run, aged or not.
    assert!(running.complete(None));
    assert!(running.snapshot().finished);
}

#[tokio::test]
async fn a_waiter_gets_the_final_snapshot_even_when_the_task_ages_at_once() {
    let tracker = aged(Duration::ZERO);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let watch = tracker.watch("a").unwrap();
    assert!(handle.complete(Some("done".into())));
    let finished = watch.finished().await;
    assert_eq!(finished.result.as_deref(), Some("done"));
    assert!(tracker.get("a").is_none());
}

#[test]
fn forgetting_races_ends_and_restarts_without_losing_a_pending_task() {
    let tracker = Arc::new(common::tracker_retaining(10_000));
    let began = Instant::now();
    let forgetting = {
        let tracker = tracker.clone();
        thread::spawn(move || {
            let mut forgotten = 0;
            while began.elapsed() < Duration::from_millis(300) {
                forgotten += tracker.forget_finished(Duration::ZERO);
            }
            forgotten
        })
    };
    let mut ended = 0;
    let mut round = 0;
    while began.elapsed() < Duration::from_millis(300) && round < 50_000 {
        let task_id = format!("t{}", round % 50);
        let handle = tracker.start(TaskStart::new().task_id(task_id.as_str()));
        if let Ok(handle) = handle {
            assert!(
                tracker.get(&task_id).is_some(),
                "a pending task was forgotten"
            );
            handle.complete(None);
            ended += 1;
        }
        round += 1;
    }
    let forgotten = forgetting.join().unwrap();
    let left = tracker.forget_finished(Duration::ZERO);
    assert_eq!(tracker.retained_count(), 0);
    assert!(tracker.tasks().is_empty());
    assert!(ended > 0 && forgotten + left > 0);
}
