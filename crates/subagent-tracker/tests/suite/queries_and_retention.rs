//! CONTRACT §5, §6 and §7: starts, queries and the bound on retained tasks.

use crate::common;
use std::time::Duration;

use subagent_tracker::{
    InMemorySubagentTaskTracker, SubagentStatus, TaskStart, TrackerError,
    MAX_PROGRESS_MESSAGE_BYTES, MAX_TASK_ID_BYTES,
};

fn tracker(max_finished_tasks: usize) -> InMemorySubagentTaskTracker {
    common::tracker_retaining(max_finished_tasks)
}

#[test]
fn start_records_what_it_was_given() {
    let tracker = tracker(10);
    let handle = tracker
        .start(
            TaskStart::new()
                .task_id("a")
                .agent("researcher")
                .description("find papers")
                .metadata("m".to_owned()),
        )
        .unwrap();
    assert_eq!(&**handle.task_id(), "a");
    assert_eq!(&**handle.session_id(), "session");
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.agent.as_deref(), Some("researcher"));
    assert_eq!(snapshot.description.as_deref(), Some("find papers"));
    assert_eq!(snapshot.metadata.as_deref(), Some("m"));
    assert_eq!(snapshot.parent_id, None);
    assert_eq!(snapshot.cancelled_at, None);
    assert_eq!(snapshot.ended_at, None);
}

#[test]
fn omitted_ids_are_generated_and_unique() {
    let tracker = tracker(10);
    let handles: Vec<_> = (0..100)
        .map(|_| tracker.start(TaskStart::new()).unwrap())
        .collect();
    let mut ids: Vec<_> = handles
        .iter()
        .map(|handle| handle.task_id().clone())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 100);
}

#[test]
fn a_live_id_is_a_duplicate_and_a_finished_id_may_run_again() {
    let tracker = tracker(10);
    let first = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let error = tracker.start(TaskStart::new().task_id("a")).unwrap_err();
    assert!(
        matches!(error, TrackerError::DuplicateTask { .. }),
        "{error}"
    );
    tracker.cancel("a", None);
    let error = tracker.start(TaskStart::new().task_id("a")).unwrap_err();
    assert!(
        matches!(error, TrackerError::DuplicateTask { .. }),
        "cancelled but unfinished is still live"
    );
    first.complete(None);
    let second = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert_eq!(
        tracker.get("a").unwrap().status,
        SubagentStatus::Running,
        "the new run replaced the old"
    );
    assert_eq!(tracker.retained_count(), 1);
    assert!(second.complete(None));
}

#[test]
fn invalid_ids_are_refused() {
    let tracker = tracker(10);
    assert!(matches!(
        tracker.start(TaskStart::new().task_id("")),
        Err(TrackerError::InvalidId { .. })
    ));
    let long = "x".repeat(MAX_TASK_ID_BYTES + 1);
    assert!(matches!(
        tracker.start(TaskStart::new().task_id(long)),
        Err(TrackerError::InvalidId { .. })
    ));
    assert!(tracker
        .start(TaskStart::new().task_id("x".repeat(MAX_TASK_ID_BYTES)))
        .is_ok());
    assert_eq!(tracker.retained_count(), 1);
}

#[test]
fn progress_keeps_the_latest_message_bounded_and_a_count() {
    let tracker = tracker(10);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.progress("searching"));
    assert!(handle.progress(&"é".repeat(MAX_PROGRESS_MESSAGE_BYTES)));
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.progress_count, 2);
    assert!(snapshot.progress.as_ref().unwrap().len() <= MAX_PROGRESS_MESSAGE_BYTES);
    handle.complete(None);
    assert!(!handle.progress("after the end"));
    assert_eq!(handle.snapshot().progress_count, 2);
}

#[test]
fn queries_list_in_start_order_and_pending_lists_running_only() {
    let tracker = tracker(100);
    let handles: Vec<_> = (0..10)
        .map(|index| {
            tracker
                .start(TaskStart::new().task_id(format!("t{index}")))
                .unwrap()
        })
        .collect();
    handles[1].complete(None);
    handles[2].fail("x");
    tracker.cancel("t3", None);
    let all: Vec<_> = tracker
        .tasks()
        .into_iter()
        .map(|snapshot| snapshot.task_id.to_string())
        .collect();
    assert_eq!(
        all,
        (0..10).map(|index| format!("t{index}")).collect::<Vec<_>>()
    );
    let pending: Vec<_> = tracker
        .pending()
        .into_iter()
        .map(|snapshot| snapshot.task_id.to_string())
        .collect();
    assert_eq!(pending, ["t0", "t4", "t5", "t6", "t7", "t8", "t9"]);
    assert!(tracker.get("nobody").is_none());
}

/// Tasks started from many threads (each thread indexes its pending tasks apart), some ended on other
/// threads: the pending list holds exactly the unfinished ones, in start order, and a session cancel reaches
/// every one of them.
#[test]
fn pending_tasks_started_on_many_threads_are_listed_in_start_order_and_all_cancelled() {
    let tracker = tracker(1_000);
    let mut handles = Vec::new();
    // One thread after another: each start happens before the next, so their start order is defined.
    for thread in 0..8 {
        let tracker = tracker.clone();
        let started = std::thread::spawn(move || {
            (0..4)
                .map(|index| {
                    tracker
                        .start(TaskStart::new().task_id(format!("{thread}-{index}")))
                        .unwrap()
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        handles.extend(started);
    }
    // Every other task ends on a thread that did not start it.
    let (ended, kept): (Vec<_>, Vec<_>) = handles
        .into_iter()
        .enumerate()
        .partition(|(index, _)| index % 2 == 0);
    std::thread::spawn(move || {
        for (_, handle) in ended {
            assert!(handle.complete(None));
        }
    })
    .join()
    .unwrap();
    let expected: Vec<String> = kept
        .iter()
        .map(|(_, handle)| handle.task_id().to_string())
        .collect();
    let pending: Vec<String> = tracker
        .pending()
        .iter()
        .map(|task| task.task_id.to_string())
        .collect();
    assert_eq!(pending, expected);
    assert_eq!(tracker.cancel_all(None), expected.len());
    assert!(tracker.pending().is_empty());
    assert!(kept.iter().all(|(_, handle)| handle.is_cancelled()));
}

#[test]
fn retention_evicts_the_oldest_finished_and_never_an_unfinished_task() {
    let tracker = tracker(3);
    let long_running = tracker.start(TaskStart::new().task_id("long")).unwrap();
    let cancelled = tracker
        .start(TaskStart::new().task_id("cancelled-unfinished"))
        .unwrap();
    tracker.cancel("cancelled-unfinished", None);
    for index in 0..10 {
        tracker
            .start(TaskStart::new().task_id(format!("f{index}")))
            .unwrap()
            .complete(None);
    }
    let retained: Vec<_> = tracker
        .tasks()
        .into_iter()
        .map(|snapshot| snapshot.task_id.to_string())
        .collect();
    assert_eq!(retained, ["long", "cancelled-unfinished", "f7", "f8", "f9"]);
    drop(cancelled);
    drop(long_running);
    assert_eq!(tracker.retained_count(), 3);
}

#[test]
fn retention_bounds_memory_under_churn_from_many_threads() {
    let tracker = tracker(1_000);
    std::thread::scope(|scope| {
        for thread in 0..2 {
            let tracker = &tracker;
            scope.spawn(move || {
                for index in 0..50_000 {
                    let handle = tracker
                        .start(TaskStart::new().task_id(format!("{thread}-{}", index % 5_000)))
                        .unwrap();
                    if index % 7 == 0 {
                        tracker.cancel(handle.task_id(), None);
                    }
                    handle.complete(None);
                }
            });
        }
    });
    assert!(
        tracker.retained_count() <= 1_000,
        "retained {}",
        tracker.retained_count()
    );
    assert!(tracker.pending().is_empty());
}

#[tokio::test]
async fn wait_finished_returns_the_final_snapshot_only_after_the_runner_stops() {
    let tracker = tracker(10);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    tracker.cancel("a", None);
    let waited = tokio::time::timeout(Duration::from_millis(30), tracker.wait_finished("a")).await;
    assert!(waited.is_err(), "cancelled but not stopped is not finished");
    let waiter = tokio::spawn({
        let tracker = tracker.clone();
        async move { tracker.wait_finished("a").await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    handle.complete(Some("partial".into()));
    let snapshot = waiter.await.unwrap().unwrap();
    assert!(snapshot.finished);
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(matches!(
        tracker.wait_finished("nobody").await,
        Err(TrackerError::UnknownTask { .. })
    ));
}

#[test]
fn a_watch_follows_its_run_after_eviction() {
    let tracker = tracker(0);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let watch = tracker.watch("a").unwrap();
    handle.complete(Some("kept".into()));
    assert!(
        tracker.get("a").is_none(),
        "max_finished_tasks = 0 evicts at once"
    );
    assert!(watch.is_finished());
    assert_eq!(watch.snapshot().result.as_deref(), Some("kept"));
}

/// A listing in pages (contract §6): bounded pages, a cursor to the next, the whole listing in order, and a
/// cursor no page gave refused.
#[test]
fn a_listing_pages_through_the_tasks_in_start_order() {
    let tracker = InMemorySubagentTaskTracker::<String>::with_config(
        Some("pages"),
        subagent_tracker::TrackerConfig::default(),
    );
    let handles: Vec<_> = (0..25)
        .map(|index| {
            tracker
                .start(TaskStart::new().task_id(format!("t{index:02}")))
                .unwrap()
        })
        .collect();
    for handle in handles.iter().step_by(2) {
        handle.complete(None);
    }
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let (page, next) = tracker.tasks_page(false, cursor.as_deref(), 10).unwrap();
        assert!(page.len() <= 10);
        listed.extend(page.into_iter().map(|task| task.task_id.to_string()));
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).map(|index| format!("t{index:02}")).collect();
    assert_eq!(listed, expected);
    let (pending, next) = tracker.tasks_page(true, None, 100).unwrap();
    assert_eq!(pending.len(), 12);
    assert!(next.is_none());
    assert!(matches!(
        tracker.tasks_page(false, Some("somewhere"), 10),
        Err(subagent_tracker::TrackerError::InvalidCursor { .. })
    ));
}
