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
    let _handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
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
        !session.cancel("job", None).await.unwrap(),
        "the cancel took effect"
    );
    assert!(matches!(
        session.close(None).await,
        Err(RedisTrackerError::NotReplicated { .. })
    ));
}
