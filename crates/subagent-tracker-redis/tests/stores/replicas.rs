//! `wait_for_replicas`: a cancel returns once that many replicas have it; on a server without them it takes
//! effect and says it could not be confirmed. The cluster test (`cluster.rs`) has a cancel confirmed.

use std::time::{Duration, Instant};

use crate::common::RedisServer;
use subagent_tracker::{TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisSession, RedisTrackerError};

/// A session whose cancels want one replica, on `server`, which has none. No reconcile on the worker's timer
/// comes during a test: a token fires from the cancel's reply, or a notification.
async fn unconfirmed_session(server: &RedisServer) -> RedisSession {
    let options = RedisOptions::default()
        .with_timeout(Duration::from_millis(400))
        .with_reconcile_interval(Duration::from_secs(600))
        .with_wait_for_replicas(1);
    let registry = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    registry
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_no_replica_confirms_took_effect_and_says_so() {
    let server = RedisServer::start();
    let session = unconfirmed_session(&server).await;
    let handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    // No notification can reach the runner.
    server.refuse_subscriptions().await;
    let started = Instant::now();
    match session.cancel("job", Some("stop")).await {
        Err(RedisTrackerError::NotReplicated {
            wanted: 1,
            acknowledged: 0,
        }) => {}
        other => panic!("expected an unconfirmed cancel, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        handle.is_cancelled(),
        "the unconfirmed cancel fired this registry's own token"
    );
    assert!(
        !session.cancel("job", None).await.unwrap(),
        "the cancel took effect"
    );
    assert!(matches!(
        session.close(None).await,
        Err(RedisTrackerError::NotReplicated { .. })
    ));
}

/// A cascade of several steps that no replica confirms is still taken to its end before the refusal: every
/// descendant is cancelled in Redis, and this registry's tokens have fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_cascade_is_taken_to_its_end_before_the_refusal() {
    let server = RedisServer::start();
    let session = unconfirmed_session(&server).await;
    let root = session
        .start(TaskStart::new().task_id("root"))
        .await
        .unwrap();
    // More children than one step of a cascade reads (`WALK_STEP`, 32).
    let mut children = Vec::new();
    for index in 0..40 {
        let start = TaskStart::new()
            .task_id(format!("child-{index}"))
            .parent_id("root");
        children.push(session.start(start).await.unwrap());
    }
    server.refuse_subscriptions().await;
    assert!(matches!(
        session.cancel("root", Some("stop")).await,
        Err(RedisTrackerError::NotReplicated { .. })
    ));
    assert!(root.is_cancelled());
    let unfired = children
        .iter()
        .filter(|child| !child.is_cancelled())
        .count();
    assert_eq!(unfired, 0, "children whose token had not fired");
    assert!(
        session.pending().await.unwrap().is_empty(),
        "every descendant cancelled"
    );
}
