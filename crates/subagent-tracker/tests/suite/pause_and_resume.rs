//! CONTRACT §5, pause and resume: a runner pauses its task for a person, the session resumes it with a value,
//! and a pause is pending like running, so cancels, cascades, deadlines and ends still reach it.

use crate::common;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use subagent_tracker::{
    InMemorySubagentTaskTracker, Resumption, SubagentEventKind, SubagentStatus, TaskFilter,
    TaskStart,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(1_000)
}

#[test]
fn a_paused_task_is_pending_until_the_session_resumes_it_with_a_value() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert_eq!(handle.resumption(), Resumption::Resumed(None));
    assert!(handle.pause(Some("needs approval")));
    let paused = tracker.get("a").unwrap();
    assert_eq!(paused.status, SubagentStatus::Paused);
    assert!(paused.status.is_pending() && !paused.finished);
    assert_eq!(paused.pause_reason.as_deref(), Some("needs approval"));
    assert_eq!(tracker.pending().len(), 1);
    assert_eq!(handle.resumption(), Resumption::Paused);

    assert!(tracker.resume("a", Some("approved".into())));
    assert_eq!(
        handle.resumption(),
        Resumption::Resumed(Some("approved".into()))
    );
    let resumed = tracker.get("a").unwrap();
    assert_eq!(resumed.status, SubagentStatus::Running);
    assert_eq!(resumed.pause_reason, None);
    assert!(handle.complete(None));
}

#[test]
fn only_a_running_task_pauses_and_only_a_paused_one_resumes() {
    let tracker = tracker();
    tracker
        .reserve(TaskStart::new().task_id("queued"), None)
        .unwrap();
    let queued = tracker.claim("queued").unwrap();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(!tracker.resume("a", None), "a running task is not paused");
    assert!(handle.pause(None));
    assert!(!handle.pause(Some("again")), "a paused task is not running");
    assert_eq!(tracker.get("a").unwrap().pause_reason, None);
    assert!(tracker.resume("a", None));
    assert!(!tracker.resume("a", None), "resumed once");
    assert!(!tracker.resume("unknown", None));
    assert!(handle.complete(None));
    assert!(!handle.pause(None), "a finished task does not pause");
    assert!(
        queued.pause(None),
        "a claimed reservation runs, so it pauses"
    );
    drop(queued);
}

#[test]
fn a_cancel_reaches_a_paused_task_and_its_waiting_runner() {
    let tracker = tracker();
    let parent = tracker.start(TaskStart::new().task_id("p")).unwrap();
    let child = tracker
        .start(TaskStart::new().task_id("c").parent_id("p"))
        .unwrap();
    assert!(child.pause(Some("approval")));
    assert!(tracker.cancel("p", Some("user pressed stop")));
    assert_eq!(child.resumption(), Resumption::Cancelled);
    assert!(child
        .resume_watch()
        .wait_for_resume_blocking(Some(Duration::ZERO)));
    let snapshot = tracker.get("c").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert_eq!(snapshot.cancel_origin.as_deref(), Some("p"));
    assert_eq!(
        snapshot.pause_reason.as_deref(),
        Some("approval"),
        "what the task waited for stays visible"
    );
    assert!(!tracker.resume("c", None), "a cancelled task never resumes");
    assert!(!child.complete(None));
    assert!(!parent.complete(None));
    let finished = tracker.get("c").unwrap();
    assert!(finished.finished);
    assert_eq!(finished.pause_reason.as_deref(), Some("approval"));
}

#[test]
fn a_paused_task_ends_as_a_running_one_does() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.pause(None));
    assert!(tracker.end("a", Err("rejected by the reviewer")));
    assert_eq!(handle.resumption(), Resumption::Ended);
    assert_eq!(tracker.get("a").unwrap().status, SubagentStatus::Failed);

    let runner_ends = tracker.start(TaskStart::new().task_id("b")).unwrap();
    assert!(runner_ends.pause(None));
    assert!(runner_ends.complete(Some("gave up waiting".into())));
    assert_eq!(tracker.get("b").unwrap().status, SubagentStatus::Completed);
}

#[test]
fn a_deadline_and_a_filter_reach_paused_tasks() {
    let tracker = tracker();
    let timed = tracker
        .start(
            TaskStart::new()
                .task_id("timed")
                .timeout(Duration::from_millis(50)),
        )
        .unwrap();
    assert!(timed.pause(None));
    assert!(timed
        .resume_watch()
        .wait_for_resume_blocking(Some(Duration::from_secs(5))));
    assert_eq!(timed.resumption(), Resumption::Cancelled);

    let handles: Vec<_> = ["x", "y"]
        .iter()
        .map(|id| tracker.start(TaskStart::new().task_id(*id)).unwrap())
        .collect();
    assert!(handles[0].pause(None));
    let paused: TaskFilter = TaskFilter::new().status(SubagentStatus::Paused);
    let cancelled = tracker.cancel_matching(&paused, Some("stale approvals"));
    assert_eq!(cancelled, vec![Arc::from("x")]);
    assert_eq!(tracker.get("y").unwrap().status, SubagentStatus::Running);
}

#[test]
fn pause_and_resume_are_published_in_order_with_the_reason() {
    let tracker = tracker();
    let mut events = tracker.subscribe();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.pause(Some("approval")));
    assert!(tracker.resume("a", None));
    assert!(handle.complete(None));
    let seen: Vec<_> = std::iter::from_fn(|| events.try_next()).collect();
    let kinds: Vec<_> = seen.iter().map(|event| event.kind).collect();
    assert_eq!(
        kinds,
        [
            SubagentEventKind::Started,
            SubagentEventKind::Paused,
            SubagentEventKind::Resumed,
            SubagentEventKind::Ended
        ]
    );
    assert_eq!(seen[1].status, SubagentStatus::Paused);
    assert_eq!(seen[1].reason.as_deref(), Some("approval"));
    assert_eq!(seen[2].status, SubagentStatus::Running);
}

#[tokio::test]
async fn the_async_wait_returns_the_resume_value() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.pause(None));
    let resumer = tokio::spawn({
        let tracker = tracker.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tracker.resume("a", Some("yes".into()))
        }
    });
    assert_eq!(
        handle.resumed().await,
        Resumption::Resumed(Some("yes".into()))
    );
    assert!(resumer.await.unwrap());
}

#[test]
fn a_blocking_wait_times_out_while_paused() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.pause(None));
    assert!(!handle
        .resume_watch()
        .wait_for_resume_blocking(Some(Duration::from_millis(20))));
    assert_eq!(handle.resumption(), Resumption::Paused);
}

/// Resumes and cancels racing on one paused task: at most one resume wins, a cancel always ends the pause, and
/// the waiting runner is woken whichever comes first.
#[test]
fn resumes_racing_a_cancel_wake_the_runner_once_and_never_undo_the_cancel() {
    let tracker = tracker();
    for round in 0..200 {
        let task_id = format!("t{round}");
        let handle = tracker
            .start(TaskStart::new().task_id(task_id.as_str()))
            .unwrap();
        assert!(handle.pause(None));
        let barrier = Barrier::new(3);
        let (resumes, cancelled) = thread::scope(|scope| {
            let resumers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        tracker.resume(&task_id, Some("go".into()))
                    })
                })
                .collect();
            barrier.wait();
            let cancelled = tracker.cancel(&task_id, None);
            let resumes = resumers
                .into_iter()
                .map(|resumer| resumer.join().unwrap())
                .filter(|resumed| *resumed)
                .count();
            (resumes, cancelled)
        });
        assert!(resumes <= 1);
        assert!(cancelled, "a cancel moves a paused or resumed task");
        assert!(handle
            .resume_watch()
            .wait_for_resume_blocking(Some(Duration::from_secs(5))));
        assert_eq!(handle.resumption(), Resumption::Cancelled);
        assert_eq!(
            tracker.get(&task_id).unwrap().status,
            SubagentStatus::Cancelled
        );
        handle.stop_cancelled(None);
    }
}

#[test]
fn a_finished_paused_task_keeps_its_reason_in_the_compact_record() {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    assert!(handle.pause(Some("waiting for a person")));
    assert!(tracker.cancel("a", None));
    assert!(!handle.complete(None));
    drop(handle);
    let snapshot = tracker.get("a").unwrap();
    assert!(snapshot.finished);
    assert_eq!(
        snapshot.pause_reason.as_deref(),
        Some("waiting for a person")
    );
}
