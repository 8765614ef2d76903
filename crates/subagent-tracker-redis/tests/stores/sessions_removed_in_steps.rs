//! Contract §20 on Redis: a session is removed (by the sweep, or before its id names a new incarnation) in calls
//! of a bounded number of its tasks each. It leaves at the first: every call of its handles is refused, and no
//! process finds it; a new incarnation of its id begins once the old one's keys are gone, whoever takes the
//! removal's last steps.

use std::time::Duration;

use crate::common::{calls_of, cli, log_every_call, RedisServer};
use subagent_tracker::{TaskStart, TrackerConfig, TrackerError};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisSession, RedisTrackerError};

/// The most tasks one call deletes of a session being removed (`REMOVAL_STEP` in
/// `lua/includes/session_state.lua`).
const REMOVAL_STEP: usize = 64;

/// A session's retained tasks: `count` tasks started and completed.
async fn finished_tasks(session: &RedisSession, count: usize) {
    let mut handles = Vec::new();
    for first in (0..count).step_by(50) {
        let starts = (first..count.min(first + 50))
            .map(|index| TaskStart::new().task_id(format!("t{index}")))
            .collect();
        handles.extend(session.start_batch(starts).await.unwrap());
    }
    for mut handle in handles {
        assert!(handle.complete(Some("\"done\"")).await.unwrap());
    }
}

fn keys_of(server: &RedisServer, pattern: &str) -> Vec<String> {
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("KEYS").arg(pattern).query(&mut admin).unwrap()
}

/// One call of the sweep on session `session_id`, as a worker makes it (`ttl_ms`: how long idle is too long).
fn sweep_once(server: &RedisServer, session_id: &str, ttl_ms: u64) -> i64 {
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("FCALL")
        .arg("stv2_sweep")
        .arg(1)
        .arg(format!("steps:v2:{{s:{session_id}}}:session"))
        .arg(ttl_ms)
        .query(&mut admin)
        .unwrap()
}

fn config() -> TrackerConfig {
    TrackerConfig::default().with_max_finished_tasks(10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_idle_session_is_swept_in_bounded_calls() {
    let server = RedisServer::start();
    let options = RedisOptions::default()
        .with_key_prefix("steps:")
        .with_lease(Duration::from_millis(150))
        .with_session_ttl(Duration::from_millis(300));
    let registry = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let tasks = 5 * REMOVAL_STEP + 10;
    let session = registry.session(Some("big"), config()).await.unwrap();
    finished_tasks(&session, tasks).await;
    log_every_call(&server);
    let mut removed = false;
    for _ in 0..250 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if keys_of(&server, "steps:v2:{s:big}*").is_empty() {
            removed = true;
            break;
        }
    }
    assert!(removed, "every key of the idle session is gone");
    assert!(
        calls_of(&server, "sweep") > tasks / REMOVAL_STEP,
        "one call per step of at most {REMOVAL_STEP} tasks"
    );
    assert!(registry.get_session("big").await.unwrap().is_none());
    assert!(registry.sessions().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_being_removed_has_left_and_its_id_opens_a_new_incarnation_once_it_is_gone() {
    let server = RedisServer::start();
    let options = RedisOptions::default().with_key_prefix("steps:");
    let registry = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let tasks = 3 * REMOVAL_STEP;
    let session = registry.session(Some("s"), config()).await.unwrap();
    finished_tasks(&session, tasks).await;
    // One call of the sweep, as a worker that stopped after it would have made: the removal is under way.
    let reply = sweep_once(&server, "s", 0);
    assert_eq!(
        reply, -3,
        "a session of {tasks} tasks takes more than one call"
    );
    assert!(
        keys_of(&server, "steps:v2:{s:s}:t:*").len() >= tasks - REMOVAL_STEP,
        "one step deleted at most {REMOVAL_STEP} tasks"
    );
    // It has left: no process finds it, and its handles' calls are refused.
    assert!(registry.get_session("s").await.unwrap().is_none());
    assert!(matches!(
        session.start(TaskStart::new().task_id("late")).await,
        Err(RedisTrackerError::Tracker(
            TrackerError::SessionClosed { .. }
        ))
    ));
    assert!(matches!(
        session.get("t0").await,
        Err(RedisTrackerError::Tracker(
            TrackerError::SessionClosed { .. }
        ))
    ));
    // Opening the id again finishes the removal first: the new incarnation holds none of the old tasks.
    let again = registry.session(Some("s"), config()).await.unwrap();
    assert!(again.tasks().await.unwrap().is_empty());
    let mut fresh = again.start(TaskStart::new().task_id("t0")).await.unwrap();
    assert!(fresh.complete(None).await.unwrap());
    assert_eq!(
        keys_of(&server, "steps:v2:{s:s}:t:*"),
        ["steps:v2:{s:s}:t:t0"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_reopened_is_removed_in_bounded_calls_first() {
    let server = RedisServer::start();
    let options = RedisOptions::default().with_key_prefix("steps:");
    let registry = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let tasks = 3 * REMOVAL_STEP + 1;
    let session = registry.session(Some("closed"), config()).await.unwrap();
    finished_tasks(&session, tasks).await;
    session.close(None).await.unwrap();
    log_every_call(&server);
    let again = registry.session(Some("closed"), config()).await.unwrap();
    assert!(
        calls_of(&server, "touch") > tasks / REMOVAL_STEP,
        "the old incarnation is removed in calls of at most {REMOVAL_STEP} tasks"
    );
    assert!(again.tasks().await.unwrap().is_empty());
    assert!(keys_of(&server, "steps:v2:{s:closed}:t:*").is_empty());
    assert!(!session.get("t0").await.is_ok_and(|task| task.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_being_swept_is_removed_before_its_id_opens_a_new_incarnation() {
    let server = RedisServer::start();
    let options = RedisOptions::default().with_key_prefix("steps:");
    let registry = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let tasks = 3 * REMOVAL_STEP;
    let session = registry.session(Some("lost"), config()).await.unwrap();
    finished_tasks(&session, tasks).await;
    // The session's hash is lost (evicted, or an older state restored), and one call of the sweep takes up what
    // is left of it: no hash is left to say that a removal is under way.
    cli(server.port, &["DEL", "steps:v2:{s:lost}:session"]);
    let reply = sweep_once(&server, "lost", 0);
    assert_eq!(
        reply, -3,
        "the leftovers of {tasks} tasks take more than one call"
    );
    // Opening the id again removes the leftovers first: none of them shows in the new incarnation, and none
    // stays behind to be counted against its bound or found by its listing.
    let again = registry.session(Some("lost"), config()).await.unwrap();
    assert!(again.tasks().await.unwrap().is_empty());
    assert!(again.get("t1").await.unwrap().is_none());
    let mut fresh = again.start(TaskStart::new().task_id("t0")).await.unwrap();
    assert!(fresh.complete(None).await.unwrap());
    assert_eq!(
        keys_of(&server, "steps:v2:{s:lost}:t:*"),
        ["steps:v2:{s:lost}:t:t0"]
    );
    let swept = sweep_once(&server, "lost", 60_000);
    assert!(
        swept >= 0,
        "the new incarnation is not taken for the lost one"
    );
}
