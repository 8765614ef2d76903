//! `wait_for_replicas`: a cancel returns once that many replicas have it; on a server without them it takes
//! effect and says it could not be confirmed. The cluster test (`cluster.rs`) has a cancel confirmed.

use std::time::{Duration, Instant};

use crate::common::RedisServer;
use subagent_tracker::{TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisTrackerError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_no_replica_confirms_took_effect_and_says_so() {
    let server = RedisServer::start();
    let options = RedisOptions::default()
        .with_timeout(Duration::from_millis(400))
        .with_wait_for_replicas(1);
    let registry = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let session = registry
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    // No notification can reach the runner, and its timer's reconcile (every 2 s) comes after the wait for
    // replicas: its token fires from the cancel's reply alone.
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
