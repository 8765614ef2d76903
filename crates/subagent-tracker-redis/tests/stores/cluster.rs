//! The store on a Redis Cluster (three primaries, three replicas, on loopback): registries find the cluster
//! through one node, sessions spread across the primaries by slot, cancels cross workers, and a cancel with
//! `wait_for_replicas` returns once a replica has it. Failover is tested in `tests/test_redis_cluster.py`.

use std::time::{Duration, Instant};

use crate::common::{eventually, RedisCluster, RedisServer};
use subagent_tracker::{SubagentStatus, TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisTrackerError};

fn options(worker_id: &str) -> RedisOptions {
    RedisOptions::default()
        .with_key_prefix("cluster:")
        .with_worker_id(worker_id)
        .with_reconcile_interval(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_spreads_sessions_carries_cancels_and_confirms_them_on_a_replica() {
    let cluster = RedisCluster::start("rust");
    // Found by asking the node: no setting says it is a cluster.
    let runner = RedisRegistry::connect(&cluster.url(), options("runner"))
        .await
        .unwrap();
    let stopper = RedisRegistry::connect(
        &cluster.url(),
        options("stopper")
            .with_cluster(true)
            .with_wait_for_replicas(1),
    )
    .await
    .unwrap();

    for index in 0..300 {
        runner
            .session(Some(&format!("user-{index}")), TrackerConfig::default())
            .await
            .unwrap();
    }
    let keys = cluster.keys_per_primary();
    let share = keys.iter().sum::<u64>() as f64 / keys.len() as f64;
    assert!(
        keys.iter()
            .all(|&count| (count as f64 - share).abs() <= 0.25 * share),
        "{keys:?}"
    );

    let session = runner
        .session(Some("work"), TrackerConfig::default())
        .await
        .unwrap();
    let handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    let child = session
        .start(TaskStart::new().task_id("child").parent_id("job"))
        .await
        .unwrap();
    let elsewhere = stopper.get_session("work").await.unwrap().unwrap();
    let sent = Instant::now();
    assert!(elsewhere.cancel("job", Some("stop")).await.unwrap());
    assert!(eventually(|| handle.is_cancelled() && child.is_cancelled()).await);
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "pushed, not reconciled"
    );
    let snapshot = elsewhere.get("child").await.unwrap().unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(
        elsewhere.close(None).await.is_ok(),
        "the close is confirmed by a replica"
    );
    assert!(runner.sessions().await.unwrap().len() >= 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_setting_that_the_node_contradicts_is_refused() {
    fn refusal(result: Result<RedisRegistry, RedisTrackerError>) -> String {
        match result {
            Err(RedisTrackerError::InvalidOption(message)) => message.into_owned(),
            Err(other) => panic!("expected an InvalidOption, got {other}"),
            Ok(_) => panic!("expected an InvalidOption, got a registry"),
        }
    }
    let cluster = RedisCluster::start("mismatch");
    let server = RedisServer::start();
    // A one-server client would retry the cluster's MOVED answers until its timeout.
    let on_cluster = RedisRegistry::connect(&cluster.url(), options("a").with_cluster(false)).await;
    assert!(
        refusal(on_cluster).contains("is a node of a Redis Cluster, but the cluster setting says")
    );
    let on_server = RedisRegistry::connect(&server.url(), options("b").with_cluster(true)).await;
    assert!(
        refusal(on_server).contains("is not a node of a Redis Cluster, but the cluster setting")
    );
    // Agreeing settings connect.
    assert!(
        RedisRegistry::connect(&cluster.url(), options("c").with_cluster(true))
            .await
            .is_ok()
    );
    assert!(
        RedisRegistry::connect(&server.url(), options("d").with_cluster(false))
            .await
            .is_ok()
    );
}
