//! CONTRACT §5 (progress log): a task keeps its latest `progress_log_size` progress reports, oldest first, each
//! with its time, its message and its data; a report after the end is refused and kept nowhere.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::SystemTime;

use subagent_tracker::{
    InMemorySubagentTaskTracker, TaskStart, TrackerConfig, DEFAULT_PROGRESS_LOG_SIZE,
    MAX_PROGRESS_LOG_SIZE,
};

fn tracker(log_size: usize) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        Some("session"),
        TrackerConfig::default().with_progress_log_size(log_size),
    )
}

#[test]
fn the_latest_reports_are_kept_oldest_first_with_their_data() {
    let tracker = tracker(3);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let before = SystemTime::now();
    assert!(handle.progress("searching"));
    for step in 1..=4 {
        assert!(handle.progress_with(&format!("step {step}"), format!("{{\"step\":{step}}}")));
    }
    let snapshot = tracker.get("a").unwrap();
    assert_eq!(snapshot.progress_count, 5);
    assert_eq!(snapshot.progress.as_deref(), Some("step 4"));
    let kept: Vec<(&str, Option<&str>)> = snapshot
        .progress_log
        .iter()
        .map(|entry| (&*entry.message, entry.data.as_deref()))
        .collect();
    assert_eq!(
        kept,
        [
            ("step 2", Some("{\"step\":2}")),
            ("step 3", Some("{\"step\":3}")),
            ("step 4", Some("{\"step\":4}")),
        ]
    );
    assert!(snapshot.progress_log.iter().all(|entry| entry.at >= before));
    assert!(snapshot
        .progress_log
        .windows(2)
        .all(|pair| pair[0].at <= pair[1].at));
    assert!(handle.complete(None));
    let finished = tracker.get("a").unwrap();
    assert_eq!(
        finished.progress_log, snapshot.progress_log,
        "kept once finished"
    );
    assert!(
        !handle.progress("late"),
        "a report after the end is refused"
    );
    assert_eq!(
        tracker.get("a").unwrap().progress_log,
        snapshot.progress_log
    );
}

#[test]
fn a_size_of_zero_keeps_no_log_and_the_size_is_bounded() {
    let tracker = tracker(0);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.progress_with("step", "1".to_owned()));
    let snapshot = tracker.get("a").unwrap();
    assert!(snapshot.progress_log.is_empty());
    assert_eq!(snapshot.progress.as_deref(), Some("step"));
    assert_eq!(
        TrackerConfig::default().progress_log_size,
        DEFAULT_PROGRESS_LOG_SIZE
    );
    assert_eq!(
        TrackerConfig::default()
            .with_progress_log_size(usize::MAX)
            .progress_log_size,
        MAX_PROGRESS_LOG_SIZE
    );
}

#[test]
fn reports_racing_the_end_are_logged_only_when_accepted() {
    for _ in 0..50 {
        let tracker = tracker(1_000);
        let handle = Arc::new(tracker.start(TaskStart::new().task_id("a")).unwrap());
        let barrier = Arc::new(Barrier::new(2));
        let reporter = {
            let (handle, barrier) = (handle.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                (0..200)
                    .filter(|step| handle.progress(&step.to_string()))
                    .count()
            })
        };
        barrier.wait();
        assert!(tracker.cancel("a", None));
        assert!(!handle.complete(None));
        let accepted = reporter.join().unwrap();
        let snapshot = tracker.get("a").unwrap();
        assert_eq!(snapshot.progress_log.len(), accepted);
        assert_eq!(snapshot.progress_count, accepted as u64);
    }
}
