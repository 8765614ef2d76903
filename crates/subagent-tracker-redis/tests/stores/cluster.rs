//! The store on a Redis Cluster (three primaries, three replicas, on loopback): registries find the cluster
//! through one node, sessions spread across the primaries by slot, cancels cross workers, and a cancel with
//! `wait_for_replicas` returns once a replica has it. Failover is tested in `tests/stores/test_redis_cluster.py`.

use std::time::{Duration, Instant};

use crate::common::{cli, eventually, RedisCluster, RedisServer};
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

/// The cluster's own commands on a node, each answer trimmed.
fn on(node: &RedisServer, command: &[&str]) -> String {
    cli(node.port, command).trim().to_owned()
}

/// Regression tests of three defects a hostile run found with slot migrations done as `redis-cli --cluster
/// reshard` does them: a function that wrote part of a transition, then failed on a key that had moved
/// (defect 5); that failure classed as a protocol error, which callers never retry (defect 6); and functions
/// that ran on the node the slot moves to, where the session's other keys were missing (defect 7). Every
/// function declares its slot's guard, so while the slot moves each is refused before it runs, retryably, and
/// nothing is half written; once the slot has moved the same calls succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_slot_moves_is_never_cut_in_half() {
    let cluster = RedisCluster::start("migration");
    let runner = RedisRegistry::connect(
        &cluster.url(),
        options("runner").with_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    let session = runner
        .session(Some("moving"), TrackerConfig::default())
        .await
        .unwrap();
    let mut first = session
        .start(TaskStart::new().task_id("first"))
        .await
        .unwrap();
    let second = session
        .start(TaskStart::new().task_id("second"))
        .await
        .unwrap();
    let base = "cluster:v2:{s:moving}:";
    let slot = on(
        &cluster.nodes[0],
        &["CLUSTER", "KEYSLOT", &format!("{base}session")],
    );
    let primaries: Vec<&RedisServer> = cluster
        .nodes
        .iter()
        .filter(|node| cli(node.port, &["INFO", "replication"]).contains("role:master"))
        .collect();
    let source = *primaries
        .iter()
        .find(|node| on(node, &["CLUSTER", "COUNTKEYSINSLOT", &slot]) != "0")
        .expect("a primary holds the session");
    let target = *primaries
        .iter()
        .find(|node| node.port != source.port)
        .expect("another primary");
    let (source_id, target_id) = (
        on(source, &["CLUSTER", "MYID"]),
        on(target, &["CLUSTER", "MYID"]),
    );
    on(
        target,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
    );
    on(
        source,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
    );
    let target_port = target.port.to_string();
    let migrate = |key: &str| {
        let answer = on(
            source,
            &["MIGRATE", "127.0.0.1", &target_port, key, "0", "5000"],
        );
        assert_eq!(answer, "OK", "MIGRATE {key}");
    };
    migrate(&format!("{base}events"));

    let refused = first.complete(Some("done")).await;
    assert!(
        matches!(refused, Err(RedisTrackerError::Unavailable { .. })),
        "a transition during the migration is refused, retryably: {refused:?}"
    );
    let refused = session.cancel("second", Some("stop")).await;
    assert!(
        matches!(refused, Err(RedisTrackerError::Unavailable { .. })),
        "{refused:?}"
    );
    assert_eq!(
        on(source, &["HGET", &format!("{base}t:first"), "status"]),
        "running",
        "nothing was half written"
    );
    assert_eq!(on(source, &["ZCARD", &format!("{base}live")]), "2");

    loop {
        let left = cli(source.port, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
        let keys: Vec<&str> = left.lines().filter(|key| !key.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        keys.iter().for_each(|key| migrate(key));
    }
    for node in &cluster.nodes {
        on(node, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    }

    assert!(first.complete(Some("done")).await.unwrap());
    assert!(session.cancel("second", Some("stop")).await.unwrap());
    assert!(eventually(|| second.is_cancelled()).await);
    let events = cli(target.port, &["XRANGE", &format!("{base}events"), "-", "+"]);
    assert!(
        events.contains("ended") && events.contains("cancelled"),
        "the ends and the cancel are recorded whole: {events}"
    );
    assert_eq!(on(target, &["ZCARD", &format!("{base}live")]), "1");
}
