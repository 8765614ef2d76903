//! The Redis store at its edges: cascades that evict on the way, ids reused after a close, retention with
//! restarted ids, bounded progress and events, lost replies and orphans past the first page.

use std::time::Duration;

use crate::common::{eventually, RedisServer};
use subagent_tracker::{
    SubagentStatus, TaskStart, TrackerConfig, DROPPED_HANDLE_ERROR, MAX_PROGRESS_MESSAGE_BYTES,
};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisTrackerError};

fn retaining(max: usize) -> TrackerConfig {
    TrackerConfig::default().with_max_finished_tasks(max)
}

/// A cascade that finishes a queued task (and so evicts) must still reach every pending descendant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_that_evicts_on_the_way_still_reaches_every_descendant() {
    let server = RedisServer::start();
    let worker = server.worker("r1:", "a").await;
    let session = worker.session(Some("zero"), retaining(0)).await.unwrap();
    session
        .reserve(TaskStart::new().task_id("parent"), None)
        .await
        .unwrap();
    let child = session
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .await
        .unwrap();
    assert!(session.cancel("parent", None).await.unwrap());
    assert!(eventually(|| child.is_cancelled()).await);

    let session = worker.session(Some("one"), retaining(1)).await.unwrap();
    let parent = session.start(TaskStart::new().task_id("p")).await.unwrap();
    let mut finished = session
        .start(TaskStart::new().task_id("f").parent_id("p"))
        .await
        .unwrap();
    let grandchild = session
        .start(TaskStart::new().task_id("g").parent_id("f"))
        .await
        .unwrap();
    assert!(finished.complete(None).await.unwrap());
    session
        .reserve(TaskStart::new().task_id("q").parent_id("p"), None)
        .await
        .unwrap();
    assert!(session.cancel("p", None).await.unwrap());
    assert!(eventually(|| grandchild.is_cancelled()).await);
    drop((child, parent, grandchild));
}

/// A runner that stops on a cancel of its own cancels the task first: never running and finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_stopping_on_its_own_cancel_leaves_the_task_cancelled() {
    let server = RedisServer::start();
    let worker = server.worker("r2:", "a").await;
    let session = worker.session(Some("s"), retaining(10)).await.unwrap();
    let mut handle = session.start(TaskStart::new().task_id("a")).await.unwrap();
    assert!(!handle.stopped(Some("its own stop")).await.unwrap());
    let snapshot = session.get("a").await.unwrap().unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(snapshot.finished);
    assert_eq!(snapshot.cancel_reason.as_deref(), Some("its own stop"));
    assert!(!session.cancel("a", None).await.unwrap());
    // The token stays readable after the end.
    assert!(handle.token().is_cancelled());
}

/// A closed session that has drained leaves, and its id names a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_and_drained_session_s_id_names_a_new_session() {
    let server = RedisServer::start();
    let worker = server.worker("r3:", "a").await;
    let session = worker.session(Some("s"), retaining(10)).await.unwrap();
    session.close(None).await.unwrap();
    assert!(worker.get_session("s").await.unwrap().is_none());
    let fresh = worker.session(Some("s"), retaining(10)).await.unwrap();
    let mut handle = fresh.start(TaskStart::new().task_id("a")).await.unwrap();
    assert!(handle.complete(None).await.unwrap());
}

/// Restarting one id many times leaves one entry in the finished list, and ids holding tabs are retained and
/// evicted like any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_holds_with_restarted_ids_and_ids_with_tabs() {
    let server = RedisServer::start();
    let worker = server.worker("r4:", "a").await;
    let session = worker.session(Some("s"), retaining(1)).await.unwrap();
    for _ in 0..200 {
        let mut handle = session
            .start(TaskStart::new().task_id("same"))
            .await
            .unwrap();
        handle.complete(None).await.unwrap();
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let listed: usize = redis::cmd("LLEN")
        .arg("r4:v2:{s:s}:finished")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(listed, 1, "a replaced run leaves the index");
    for task_id in ["a\tb", "c"] {
        let mut handle = session
            .start(TaskStart::new().task_id(task_id))
            .await
            .unwrap();
        handle.complete(None).await.unwrap();
    }
    let retained: Vec<_> = session
        .tasks()
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.task_id.to_string())
        .collect();
    assert_eq!(
        retained,
        ["c"],
        "the oldest finished is evicted, tab or not"
    );
}

/// Progress messages are cut as in memory, and a dropped handle of a cancelled task records no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_bounded_and_a_dropped_cancelled_handle_records_no_error() {
    let server = RedisServer::start();
    let worker = server.worker("r5:", "a").await;
    let session = worker.session(Some("s"), retaining(10)).await.unwrap();
    let handle = session.start(TaskStart::new().task_id("a")).await.unwrap();
    handle.progress(&"x".repeat(100_000)).await.unwrap();
    let snapshot = session.get("a").await.unwrap().unwrap();
    assert_eq!(
        snapshot.progress.map(|progress| progress.len()),
        Some(MAX_PROGRESS_MESSAGE_BYTES)
    );
    assert!(session.cancel("a", None).await.unwrap());
    drop(handle);
    let dropped_running = session.start(TaskStart::new().task_id("b")).await.unwrap();
    drop(dropped_running);
    let mut finished = (None, None);
    for _ in 0..200 {
        finished = (
            session.get("a").await.unwrap().filter(|task| task.finished),
            session.get("b").await.unwrap().filter(|task| task.finished),
        );
        if finished.0.is_some() && finished.1.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (cancelled, failed) = (finished.0.unwrap(), finished.1.unwrap());
    assert_eq!(
        (cancelled.status, cancelled.error),
        (SubagentStatus::Cancelled, None)
    );
    assert_eq!(failed.status, SubagentStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some(DROPPED_HANDLE_ERROR));
}

#[tokio::test]
async fn a_key_prefix_with_braces_is_refused() {
    let server = RedisServer::start();
    let refused = RedisRegistry::connect(
        &server.url(),
        RedisOptions::default().with_key_prefix("app{1}:"),
    )
    .await;
    assert!(matches!(refused, Err(RedisTrackerError::InvalidOption(_))));
}

/// A start that took effect in Redis but whose reply never reached its worker is ended, not left pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_reply_was_lost_is_ended_by_its_worker() {
    let server = RedisServer::start();
    let options = RedisOptions::default()
        .with_key_prefix("r6:")
        .with_worker_id("runner")
        .with_reconcile_interval(Duration::from_millis(100))
        .with_timeout(Duration::from_millis(200));
    let worker = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let session = worker.session(Some("s"), retaining(10)).await.unwrap();
    let held = session
        .start(TaskStart::new().task_id("held"))
        .await
        .unwrap();
    // A start whose reply is lost: the server holds writes past the call's timeout, then carries it out.
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "600", "WRITE"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let lost = session.start(TaskStart::new().task_id("lost")).await;
    assert!(
        matches!(lost, Err(RedisTrackerError::Unavailable { .. })),
        "the start timed out"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut ended = None;
    for _ in 0..300 {
        let Some(snapshot) = session.get("lost").await.unwrap() else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if snapshot.finished {
            ended = Some(snapshot);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ended = ended.expect("the orphaned run was ended");
    assert_eq!(ended.status, SubagentStatus::Failed);
    assert_eq!(
        ended.error.as_deref(),
        Some(subagent_tracker_redis::ORPHANED_RUN_ERROR)
    );
    assert!(
        !session.get("held").await.unwrap().unwrap().finished,
        "a held run is left alone"
    );
    drop(held);
}

/// §18 across processes: an end recorded by id is a transition out of `Queued` like any other, and a claim
/// after it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_by_id_of_a_queued_task_wins_and_refuses_later_claims() {
    let server = RedisServer::start();
    let api = server.worker("r7:", "api").await;
    let worker = server.worker("r7:", "worker").await;
    let queue = api.session(Some("s"), retaining(10)).await.unwrap();
    queue
        .reserve(TaskStart::new().task_id("job"), None)
        .await
        .unwrap();
    assert!(queue.end("job", Err("the pool is gone")).await.unwrap());
    assert!(!queue.end("job", Ok(Some("late"))).await.unwrap());
    let snapshot = queue.get("job").await.unwrap().unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Failed);
    assert!(snapshot.finished);
    let claim = worker
        .session(Some("s"), retaining(10))
        .await
        .unwrap()
        .claim("job")
        .await;
    assert!(matches!(
        claim,
        Err(RedisTrackerError::Tracker(
            subagent_tracker::TrackerError::NotClaimable {
                problem: subagent_tracker::ClaimProblem::Ended(SubagentStatus::Failed),
                ..
            }
        ))
    ));
}

/// A cascade far larger than the event stream's bound leaves the stream at about its bound: the one trim at
/// its end is not capped at the 10,000 entries a trim removes by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_far_larger_than_the_event_bound_leaves_the_stream_bounded() {
    const EVENT_LIMIT: usize = 10_000;
    let server = RedisServer::start();
    let worker = server.worker("r9:", "a").await;
    let session = worker.session(Some("s"), retaining(0)).await.unwrap();
    let _root = session
        .start(TaskStart::new().task_id("root"))
        .await
        .unwrap();
    let mut handles = Vec::new();
    for chunk in 0..25 {
        let starts = (0..1_000).map(|index| {
            session.start(
                TaskStart::new()
                    .task_id(format!("child-{chunk}-{index}"))
                    .parent_id("root"),
            )
        });
        for started in futures_util::future::join_all(starts).await {
            handles.push(started.unwrap());
        }
    }
    assert!(session.cancel("root", None).await.unwrap());
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let length: usize = redis::cmd("XLEN")
        .arg("r9:v2:{s:s}:events")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        length <= EVENT_LIMIT + 1_000,
        "{length} events kept after a cascade of 25,001 tasks"
    );
    assert!(
        eventually(|| handles
            .iter()
            .all(subagent_tracker_redis::RedisTaskHandle::is_cancelled))
        .await
    );
}

/// The orphan check goes through a session's live index in pages: an orphan past the first page is ended, and
/// none of the many runs the process holds is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_past_the_first_page_is_ended_and_every_held_run_is_left_alone() {
    let server = RedisServer::start();
    let options = RedisOptions::default()
        .with_key_prefix("r9:")
        .with_worker_id("runner")
        .with_reconcile_interval(Duration::from_millis(100))
        .with_timeout(Duration::from_millis(200));
    let worker = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let session = worker.session(Some("s"), retaining(10)).await.unwrap();
    let mut held = Vec::new();
    for first in (0..250).step_by(50) {
        let batch = (first..first + 50)
            .map(|index| TaskStart::new().task_id(format!("held-{index}")))
            .collect();
        held.extend(session.start_batch(batch).await.unwrap());
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "600", "WRITE"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let lost = session.start(TaskStart::new().task_id("lost")).await;
    assert!(matches!(lost, Err(RedisTrackerError::Unavailable { .. })));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut ended = None;
    for _ in 0..300 {
        match session.get("lost").await.unwrap() {
            Some(snapshot) if snapshot.finished => {
                ended = Some(snapshot);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    let ended = ended.expect("the orphaned run was ended");
    assert_eq!(
        ended.error.as_deref(),
        Some(subagent_tracker_redis::ORPHANED_RUN_ERROR)
    );
    assert_eq!(
        session.pending().await.unwrap().len(),
        250,
        "every held run is left alone"
    );
    drop(held);
}
