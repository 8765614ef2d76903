//! `rediss://`: the store over TLS, against `redis-server --tls-port` with a certificate the test's own
//! authority signed. The client trusts the system's authorities and whatever `SSL_CERT_FILE` names.

use std::time::{Duration, Instant};

use crate::common::{eventually, CertificateAuthority};
use subagent_tracker::{TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisTrackerError};

fn options(worker_id: &str) -> RedisOptions {
    RedisOptions::default()
        .with_worker_id(worker_id)
        .with_reconcile_interval(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(2))
}

// One test: it sets this process's `SSL_CERT_FILE`, which no other test here may see change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_refused_and_a_trusted_one_carries_cancels_at_once() {
    let directory =
        std::env::temp_dir().join(format!("subagent-tracker-tls-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let authority = CertificateAuthority::make(&directory);
    a_scheme_that_does_not_match_the_server_says_so(&authority).await;
    let (_server, tls_port) = authority.serve();
    let url = format!("rediss://127.0.0.1:{tls_port}/0");

    match RedisRegistry::connect(&url, options("untrusting")).await {
        Err(RedisTrackerError::InvalidOption(message)) => {
            assert!(message.contains("did not verify"), "{message}");
            assert!(message.contains("SSL_CERT_FILE"), "{message}");
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("expected a refusal, got a registry"),
    }

    std::env::set_var("SSL_CERT_FILE", &authority.ca);
    let runner = RedisRegistry::connect(&url, options("runner"))
        .await
        .unwrap();
    let stopper = RedisRegistry::connect(&url, options("stopper"))
        .await
        .unwrap();
    let session = runner
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    let elsewhere = stopper.get_session("s").await.unwrap().unwrap();
    let sent = Instant::now();
    assert!(elsewhere.cancel("job", Some("stop")).await.unwrap());
    assert!(eventually(|| handle.is_cancelled()).await);
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "the notification over TLS, not the 5 s reconcile, fired it"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

/// A scheme that does not match the server is said in one line and is not retryable, where it looked like a
/// server that timed out (`rediss://` to a plain port) or went away (`redis://` to a TLS port). Part of the one
/// test above, before it trusts the authority: the handshake that tells a TLS port reads `SSL_CERT_FILE`.
async fn a_scheme_that_does_not_match_the_server_says_so(authority: &CertificateAuthority) {
    let (server, tls_port) = authority.serve();

    let started = Instant::now();
    match RedisRegistry::connect(
        &format!("rediss://127.0.0.1:{}/0", server.port),
        options("tls-to-plain"),
    )
    .await
    {
        Err(RedisTrackerError::InvalidOption(message)) => {
            assert!(message.contains("does not speak TLS"), "{message}");
            assert!(message.contains("redis://"), "{message}");
            assert!(!message.contains('\n'), "{message}");
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("expected a refusal, got a registry"),
    }
    // The handshake's timeout (2 s), then a plain PING that a server answers at once.
    assert!(started.elapsed() < Duration::from_secs(4));

    match RedisRegistry::connect(
        &format!("redis://127.0.0.1:{tls_port}/0"),
        options("plain-to-tls"),
    )
    .await
    {
        Err(RedisTrackerError::InvalidOption(message)) => {
            assert!(message.contains("speaks TLS"), "{message}");
            assert!(message.contains("rediss://"), "{message}");
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("expected a refusal, got a registry"),
    }

    // A port where nothing listens is neither: it stays a failure a retry may cure.
    drop(server);
    let refused = RedisRegistry::connect(
        &format!("rediss://127.0.0.1:{tls_port}/0"),
        options("nothing-there"),
    )
    .await;
    assert!(matches!(
        refused,
        Err(RedisTrackerError::Unavailable { .. })
    ));
}
