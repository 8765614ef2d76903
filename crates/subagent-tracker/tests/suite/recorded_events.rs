//! CONTRACT §5, event-sourced ingestion: a session fed by a runtime's stream of starts, progress and ends, which
//! may come late, early or twice.

use std::sync::Arc;

use subagent_tracker::{
    InMemorySubagentTaskTracker, RecordedEvent, SubagentStatus, TaskFailure, TaskStart,
};

fn started(task_id: &str) -> RecordedEvent<String> {
    RecordedEvent::Started(TaskStart::new().task_id(task_id).agent("coder"))
}

fn ended(task_id: &str, outcome: Result<Option<String>, TaskFailure>) -> RecordedEvent<String> {
    RecordedEvent::Ended {
        task_id: Arc::from(task_id),
        outcome,
    }
}

#[test]
fn a_stream_of_events_runs_a_task_without_a_runner_here() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    assert!(tracker.record_event(started("a")).unwrap());
    assert!(
        !tracker.record_event(started("a")).unwrap(),
        "a repeat changes nothing"
    );
    assert_eq!(tracker.get("a").unwrap().status, SubagentStatus::Running);
    let progress = RecordedEvent::Progress {
        task_id: Arc::from("a"),
        message: Arc::from("half way"),
        data: None,
    };
    assert!(tracker.record_event(progress).unwrap());
    assert!(tracker
        .record_event(ended("a", Ok(Some("done".into()))))
        .unwrap());
    assert!(
        !tracker.record_event(ended("a", Ok(None))).unwrap(),
        "the first end wins"
    );
    let task = tracker.get("a").unwrap();
    assert_eq!(
        (task.status, task.finished),
        (SubagentStatus::Completed, true)
    );
    assert_eq!(
        (task.progress.as_deref(), task.result.as_deref()),
        (Some("half way"), Some("done"))
    );
    assert!(
        !tracker.record_event(started("a")).unwrap(),
        "a late start of a finished task is a repeat"
    );
}

#[test]
fn an_end_before_its_start_records_the_finished_task() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    assert!(tracker
        .record_event(ended("b", Err(TaskFailure::new("boom"))))
        .unwrap());
    let task = tracker.get("b").unwrap();
    assert_eq!(
        (task.status, task.error.as_deref()),
        (SubagentStatus::Failed, Some("boom"))
    );
    assert!(!tracker.record_event(started("b")).unwrap());
    assert!(!tracker
        .record_event(RecordedEvent::Progress {
            task_id: Arc::from("b"),
            message: Arc::from("late"),
            data: None,
        })
        .unwrap());
}

#[test]
fn a_recorded_task_is_cancelled_and_its_late_end_keeps_the_cancel() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    assert!(tracker.record_event(started("c")).unwrap());
    assert!(tracker.cancel("c", Some("stop")));
    assert!(!tracker.record_event(ended("c", Ok(None))).unwrap());
    let task = tracker.get("c").unwrap();
    assert_eq!(
        (task.status, task.finished),
        (SubagentStatus::Cancelled, true)
    );
}

#[test]
fn a_start_under_an_unknown_parent_is_refused() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let orphan = RecordedEvent::Started(TaskStart::new().task_id("d").parent_id("nobody"));
    assert!(tracker.record_event(orphan).is_err());
}
