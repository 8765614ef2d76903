//! CONTRACT §3, cancel and wait: the wait ends once the runner has ended and every cancel handler of the task
//! and of its descendants has finished its work, a handler that hands its work on included.

use crate::common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use subagent_tracker::{
    HandlerDone, InMemorySubagentTaskTracker, OnCancel, SubagentStatus, TaskStart, TrackerError,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(1_000)
}

/// A handler whose work goes on in a thread of its own for `work`, as a coroutine goes on on its loop.
struct SlowCleanup {
    work: Duration,
    done_flag: Arc<AtomicBool>,
}

impl OnCancel for SlowCleanup {
    fn on_cancel(self: Box<Self>) {
        unreachable!("run with its HandlerDone")
    }

    fn on_cancel_with(self: Box<Self>, done: HandlerDone) {
        thread::spawn(move || {
            thread::sleep(self.work);
            self.done_flag.store(true, Ordering::SeqCst);
            done.finish();
        });
    }
}

fn slow_cleanup(work: Duration) -> (SlowCleanup, Arc<AtomicBool>) {
    let done_flag = Arc::new(AtomicBool::new(false));
    (
        SlowCleanup {
            work,
            done_flag: done_flag.clone(),
        },
        done_flag,
    )
}

#[tokio::test]
async fn the_wait_ends_after_the_runner_and_every_handler_of_the_subtree() {
    let tracker = tracker();
    let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
    let child = tracker
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .unwrap();
    let (cleanup, cleaned) = slow_cleanup(Duration::from_millis(100));
    let _registration = child.token().on_cancel(cleanup);
    let plain_ran = Arc::new(AtomicBool::new(false));
    let plain = plain_ran.clone();
    let _plain = parent
        .token()
        .on_cancel(move || plain.store(true, Ordering::SeqCst));
    let runner = thread::spawn(move || {
        assert!(parent.token().wait_blocking(Some(Duration::from_secs(5))));
        thread::sleep(Duration::from_millis(30));
        parent.stop_cancelled(None);
        child.stop_cancelled(None);
    });
    let began = Instant::now();
    let wait = tracker.cancel_and_watch("parent", Some("stop")).unwrap();
    assert!(wait.moved());
    assert!(
        plain_ran.load(Ordering::SeqCst),
        "a plain handler ran within the cancel"
    );
    assert_eq!(wait.handlers_at_work(), vec![Arc::from("child")]);
    let snapshot = wait.finished().await;
    assert!(
        cleaned.load(Ordering::SeqCst),
        "the child's handler finished its work first"
    );
    assert!(began.elapsed() >= Duration::from_millis(100));
    assert_eq!(
        (snapshot.status, snapshot.finished),
        (SubagentStatus::Cancelled, true)
    );
    assert!(wait.handlers_at_work().is_empty());
    runner.join().unwrap();
}

#[tokio::test]
async fn a_task_cancelled_or_finished_before_is_waited_for_all_the_same() {
    let tracker = tracker();
    let done = tracker.start(TaskStart::new().task_id("done")).unwrap();
    assert!(done.complete(None));
    let snapshot = tracker.cancel_and_wait("done", None).await.unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Completed);

    let stopping = tracker.start(TaskStart::new().task_id("stopping")).unwrap();
    assert!(tracker.cancel("stopping", None));
    let wait = tracker.cancel_and_watch("stopping", None).unwrap();
    assert!(!wait.moved());
    assert!(!wait.watch().is_finished());
    stopping.stop_cancelled(None);
    assert!(wait.finished().await.finished);
}

#[test]
fn an_unknown_id_is_refused() {
    let tracker = tracker();
    assert!(matches!(
        tracker.cancel_and_watch("nobody", None),
        Err(TrackerError::UnknownTask { .. })
    ));
}

#[tokio::test]
async fn a_handler_registered_after_the_cancel_and_a_panicking_one_are_counted_and_never_hang_the_wait(
) {
    let tracker = tracker();
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    let _panics = handle.token().on_cancel(|| panic!("a faulty cleanup"));
    let wait = tracker.cancel_and_watch("a", None).unwrap();
    let (late, late_done) = slow_cleanup(Duration::from_millis(50));
    let _late = handle.token().on_cancel(late);
    assert_eq!(wait.handlers_at_work(), vec![Arc::from("a")]);
    handle.stop_cancelled(None);
    tokio::time::timeout(Duration::from_secs(5), wait.finished())
        .await
        .expect("the wait ended");
    assert!(late_done.load(Ordering::SeqCst));
}

#[test]
fn concurrent_cancels_that_wait_see_one_move_and_both_end() {
    let tracker = tracker();
    for round in 0..50 {
        let task_id = format!("t{round}");
        let handle = tracker
            .start(TaskStart::new().task_id(task_id.as_str()))
            .unwrap();
        let (cleanup, _) = slow_cleanup(Duration::from_millis(1));
        let _registration = handle.token().on_cancel(cleanup);
        let waits: Vec<_> = thread::scope(|scope| {
            let cancellers: Vec<_> = (0..2)
                .map(|_| scope.spawn(|| tracker.cancel_and_watch(&task_id, None).unwrap()))
                .collect();
            cancellers
                .into_iter()
                .map(|canceller| canceller.join().unwrap())
                .collect()
        });
        assert_eq!(waits.iter().filter(|wait| wait.moved()).count(), 1);
        handle.stop_cancelled(None);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        for wait in &waits {
            let snapshot = runtime
                .block_on(async {
                    tokio::time::timeout(Duration::from_secs(5), wait.finished()).await
                })
                .expect("each wait ended");
            assert_eq!(snapshot.status, SubagentStatus::Cancelled);
        }
    }
}
