//! A server that evicts keys under memory pressure (`maxmemory` with `allkeys-lru`, common on managed Redis used
//! as a cache), against a real `redis-server`: refused at connect unless allowed; once allowed, a session whose
//! keys were evicted is reported lost, never closed, its runners stop, and the sweep removes what is left of it.
//! The regression test of defect 8 of the hostile run on the store; `tests/stores/test_redis_eviction.py` is its Python
//! twin.

use std::time::{Duration, Instant};

use crate::common::{cli, RedisServer};
use subagent_tracker::{TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisTrackerError, SESSION_LOST_REASON};

fn options() -> RedisOptions {
    RedisOptions::default()
        .with_key_prefix("ev:")
        .with_reconcile_interval(Duration::from_millis(100))
        .with_timeout(Duration::from_secs(1))
        .with_lease(Duration::from_millis(600))
        // Long enough that the session is not swept before its task starts.
        .with_session_ttl(Duration::from_secs(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_session_is_lost_never_closed_and_its_runners_stop() {
    let server =
        RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"]);
    let refused = RedisRegistry::connect(&server.url(), options()).await;
    let Err(RedisTrackerError::InvalidOption(message)) = refused else {
        panic!("an evicting server is refused");
    };
    assert!(
        message.contains("allkeys-lru") && message.contains("allow_eviction"),
        "{message}"
    );

    let registry = RedisRegistry::connect(&server.url(), options().with_eviction_allowed(true))
        .await
        .unwrap();
    let session = registry
        .session(Some("keep"), TrackerConfig::default())
        .await
        .unwrap();
    let runner = session.start(TaskStart::new().task_id("t")).await.unwrap();
    let session_key = "ev:v2:{s:keep}:session";
    let index = "ev:v2:{registry}:sessions";
    // Fill the server past its memory: the session's hash, idle for seconds (the server counts idle time in
    // whole seconds), goes first; the index, read after every write, is among the most recently used and stays.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let began = Instant::now();
    for round in 0.. {
        if cli(server.port, &["EXISTS", session_key]).trim() == "0" {
            break;
        }
        assert!(
            round < 400 && began.elapsed() < Duration::from_secs(30),
            "the session's hash was not evicted"
        );
        // A quarter of a megabyte of zero bytes.
        cli(
            server.port,
            &["SETRANGE", &format!("filler:{round}"), "262143", "x"],
        );
        cli(server.port, &["ZSCORE", index, "keep"]);
    }

    let read = session.get("t").await;
    assert!(
        matches!(read, Err(RedisTrackerError::SessionLost { .. })),
        "{read:?}"
    );
    let cancelled = session.cancel("t", None).await;
    assert!(
        matches!(cancelled, Err(RedisTrackerError::SessionLost { .. })),
        "{cancelled:?}"
    );
    let token = runner.token();
    let fired = tokio::time::timeout(Duration::from_secs(5), token.cancelled()).await;
    assert!(fired.is_ok(), "the lost session's runner stops");
    assert_eq!(token.reason().as_deref(), Some(SESSION_LOST_REASON));

    // The sweep removes what eviction left of it, and the session stays lost, never closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cli(server.port, &["KEYS", "ev:v2:{s:keep}:*"])
        .trim()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the sweep removes what is left: {}",
            cli(server.port, &["KEYS", "ev:v2:*"])
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let read = session.get("t").await;
    assert!(
        matches!(read, Err(RedisTrackerError::SessionLost { .. })),
        "{read:?}"
    );
}
