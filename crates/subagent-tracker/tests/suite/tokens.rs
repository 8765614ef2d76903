//! CONTRACT §4: tokens fire exactly when their task becomes cancelled, and never after a normal end.

use std::thread;
use std::time::{Duration, Instant};

use subagent_tracker::{CancelCause, InMemorySubagentTaskTracker, TaskStart};

#[test]
fn the_token_fires_on_cancel_with_its_reason() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let token = handle.token();
    assert!(!token.is_cancelled());
    assert_eq!(token.reason(), None);
    tracker.cancel("a", Some("user pressed stop"));
    assert!(token.is_cancelled());
    assert_eq!(token.reason().as_deref(), Some("user pressed stop"));
    assert!(
        token.cancellation_token().is_cancelled(),
        "a token made after the cancel is already cancelled"
    );
}

#[test]
fn the_token_of_a_completed_task_never_fires_even_when_its_parent_is_cancelled() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let _parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
    let child = tracker
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .unwrap();
    let token = child.token();
    let tokio_token = token.cancellation_token();
    child.complete(None);
    tracker.cancel("parent", None);
    assert!(!token.is_cancelled());
    assert!(!tokio_token.is_cancelled());
    assert!(!token.wait_blocking(Some(Duration::from_millis(20))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_code_can_select_on_the_token() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let tokio_token = handle.token().cancellation_token();
    let token = handle.token();
    let canceller = tracker.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        canceller.cancel("a", None);
    });
    tokio::select! {
        _ = tokio_token.cancelled() => {}
        _ = tokio::time::sleep(Duration::from_secs(5)) => panic!("the tokio-util token did not fire"),
    }
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascade_fires_descendant_tokens() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let _root = tracker.start(TaskStart::new().task_id("root")).unwrap();
    let child = tracker
        .start(TaskStart::new().task_id("child").parent_id("root"))
        .unwrap();
    let waiter = tokio::spawn({
        let token = child.token();
        async move { token.cancelled().await }
    });
    tracker.cancel("root", None);
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
}

#[test]
fn wait_blocking_is_woken_from_another_thread_and_times_out_otherwise() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let token = handle.token();
    let started = Instant::now();
    assert!(!token.wait_blocking(Some(Duration::from_millis(30))));
    assert!(started.elapsed() >= Duration::from_millis(30));
    let canceller = tracker.clone();
    let thread = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        canceller.cancel("a", None)
    });
    assert!(token.wait_blocking(None));
    assert!(thread.join().unwrap());
}

/// CONTRACT §4 (a token by id): `token(task_id)` hands any retained task's token to code without a handle.
#[test]
fn a_token_by_id_follows_its_task_and_a_finished_one_is_settled() {
    let tracker = InMemorySubagentTaskTracker::<String>::with_config(
        Some("session"),
        subagent_tracker::TrackerConfig::default().with_max_finished_tasks(10),
    );
    assert!(matches!(
        tracker.token("nobody"),
        Err(subagent_tracker::TrackerError::UnknownTask { .. })
    ));
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let token = tracker.token("a").unwrap();
    assert!(!token.is_cancelled());
    assert!(tracker.cancel("a", Some("stop")));
    assert!(token.is_cancelled());
    assert_eq!(token.reason().as_deref(), Some("stop"));
    drop(handle);
    // Collapsed into its finished record: the token is rebuilt in its final state.
    let settled = tracker.token("a").unwrap();
    assert!(settled.is_cancelled());
    assert_eq!(settled.reason().as_deref(), Some("stop"));
    let done = tracker.start(TaskStart::new().task_id("b")).unwrap();
    let live = tracker.token("b").unwrap();
    assert!(done.complete(None));
    let finished = tracker.token("b").unwrap();
    assert!(!live.is_cancelled() && !finished.is_cancelled());
    assert!(!finished.wait_blocking(Some(std::time::Duration::from_millis(10))));
    assert!(tracker.forget_finished(std::time::Duration::ZERO) >= 2);
    assert!(tracker.token("b").is_err(), "a forgotten task has no token");
}

/// Cancels decided elsewhere and applied together take effect together: the first task's callback sees the
/// second's token fired already.
#[test]
fn remote_cancels_applied_together_fire_every_token_before_any_callback() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let first = tracker.start(TaskStart::new().task_id("first")).unwrap();
    let second = tracker.start(TaskStart::new().task_id("second")).unwrap();
    let second_token = second.token();
    let (seen, saw) = std::sync::mpsc::channel();
    let _registration = first.token().on_cancel(move || {
        let _ = seen.send(second_token.is_cancelled());
    });
    let moved = tracker.apply_remote_cancels([
        ("first", "stop", CancelCause::Parent, "root"),
        ("second", "stop", CancelCause::Parent, "root"),
    ]);
    assert_eq!(moved, 2);
    assert_eq!(saw.recv_timeout(Duration::from_secs(5)), Ok(true));
    assert_eq!(second.token().origin().as_deref(), Some("root"));
}
