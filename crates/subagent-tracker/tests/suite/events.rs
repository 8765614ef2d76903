//! CONTRACT §8: lifecycle events, their order, and bounded subscriber buffers.

use subagent_tracker::{
    InMemorySubagentTaskTracker, SubagentEventKind, SubagentStatus, TaskStart, TrackerConfig,
};

#[test]
fn a_subscriber_sees_every_lifecycle_step_in_order() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let before = tracker.start(TaskStart::new().task_id("before")).unwrap();
    let mut events = tracker.subscribe();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    handle.progress("step 1");
    tracker.cancel("a", Some("stop"));
    handle.complete(None);
    before.complete(None);
    let mut seen = Vec::new();
    while let Some(event) = events.try_next() {
        seen.push((event.task_id.to_string(), event.kind, event.status));
    }
    assert_eq!(
        seen,
        [
            (
                "a".to_owned(),
                SubagentEventKind::Started,
                SubagentStatus::Running
            ),
            (
                "a".to_owned(),
                SubagentEventKind::Progress,
                SubagentStatus::Running
            ),
            (
                "a".to_owned(),
                SubagentEventKind::Cancelled,
                SubagentStatus::Cancelled
            ),
            (
                "a".to_owned(),
                SubagentEventKind::Ended,
                SubagentStatus::Cancelled
            ),
            (
                "before".to_owned(),
                SubagentEventKind::Ended,
                SubagentStatus::Completed
            ),
        ]
    );
}

#[test]
fn cancelled_events_carry_the_reason_and_progress_events_the_message() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let mut events = tracker.subscribe();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    handle.progress("reading");
    tracker.cancel("a", Some("deadline"));
    let collected: Vec<_> = std::iter::from_fn(|| events.try_next()).collect();
    assert_eq!(collected[1].message.as_deref(), Some("reading"));
    assert_eq!(collected[2].reason.as_deref(), Some("deadline"));
}

#[test]
fn a_slow_subscriber_gets_one_lagged_event_and_the_newest_events() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::with_config(
        None,
        TrackerConfig::default().with_event_buffer(4),
    );
    let mut events = tracker.subscribe();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    for step in 0..10 {
        handle.progress(&step.to_string());
    }
    let first = events.try_next().unwrap();
    assert_eq!(first.kind, SubagentEventKind::Lagged);
    assert_eq!(first.missed, 7);
    let rest: Vec<_> = std::iter::from_fn(|| events.try_next())
        .map(|event| event.message.unwrap().to_string())
        .collect();
    assert_eq!(rest, ["6", "7", "8", "9"]);
}

#[test]
fn events_of_one_task_stay_ordered_when_threads_race() {
    for _ in 0..200 {
        let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
        let mut events = tracker.subscribe();
        let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| tracker.cancel("a", None));
            scope.spawn(|| handle.complete(None));
        });
        let kinds: Vec<_> = std::iter::from_fn(|| events.try_next())
            .map(|event| event.kind)
            .collect();
        assert_eq!(kinds.first(), Some(&SubagentEventKind::Started));
        assert_eq!(kinds.last(), Some(&SubagentEventKind::Ended), "{kinds:?}");
    }
}

#[tokio::test]
async fn a_subscriber_can_await_the_next_event() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let mut events = tracker.subscribe();
    let starter = tracker.clone();
    let task = tokio::spawn(async move {
        starter
            .start(TaskStart::new().task_id("a"))
            .map(|handle| handle.complete(None))
    });
    let event = events.next().await.expect("the subscription is open");
    assert_eq!(event.kind, SubagentEventKind::Started);
    task.await.unwrap().unwrap();
}
