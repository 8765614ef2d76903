//! What a Redis session shows of itself without a transition: its retention bound (fixed per incarnation,
//! never a network call), whether it is closed (a round trip), the settings it refuses, and a handle's
//! snapshot of its own run alone.

use crate::common::RedisServer;
use subagent_tracker::{SubagentStatus, TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisTrackerError, EVENT_BUFFER_REFUSED};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_the_bound_it_was_made_with_and_reads_it_without_redis() {
    let server = RedisServer::start();
    let maker = server.worker("shape:", "maker").await;
    let joiner = server.worker("shape:", "joiner").await;
    let made = maker
        .session(
            Some("s"),
            TrackerConfig::default().with_max_finished_tasks(5),
        )
        .await
        .unwrap();
    let joined = joiner
        .session(
            Some("s"),
            TrackerConfig::default().with_max_finished_tasks(7),
        )
        .await
        .unwrap();
    let looked_up = joiner.get_session("s").await.unwrap().unwrap();
    assert_eq!(made.max_finished_tasks(), 5);
    assert_eq!(
        joined.max_finished_tasks(),
        5,
        "an existing session keeps its own bound"
    );
    assert_eq!(looked_up.max_finished_tasks(), 5);
    drop(server);
    assert_eq!(made.max_finished_tasks(), 5, "no network call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_closed_sees_a_close_by_another_worker_and_an_ended_incarnation() {
    let server = RedisServer::start();
    let here = server.worker("shape:", "here").await;
    let there = server.worker("shape:", "there").await;
    let session = here
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    assert!(!session.is_closed().await.unwrap());
    let handle = session.start(TaskStart::new().task_id("a")).await.unwrap();
    let elsewhere = there.get_session("s").await.unwrap().unwrap();
    assert_eq!(elsewhere.close(None).await.unwrap(), 1);
    assert!(
        session.is_closed().await.unwrap(),
        "closed by another worker"
    );
    drop(handle);
    // Drained and opened again: a new incarnation, open, while the old object's has ended.
    let drained = async {
        while here.get_session("s").await.unwrap().is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), drained)
        .await
        .expect("the dropped handle's end drains the session");
    let reopened = there
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    assert!(!reopened.is_closed().await.unwrap());
    assert!(
        session.is_closed().await.unwrap(),
        "its incarnation has ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_buffer_is_refused_by_name_and_the_default_is_accepted() {
    let server = RedisServer::start();
    let registry = server.worker("shape:", "w").await;
    let refused = registry
        .session(Some("s"), TrackerConfig::default().with_event_buffer(16))
        .await;
    match refused {
        Err(RedisTrackerError::InvalidOption(message)) => {
            assert_eq!(message, EVENT_BUFFER_REFUSED);
            assert!(message.contains("event_buffer"));
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("expected a refusal, got a session"),
    }
    assert!(
        registry.get_session("s").await.unwrap().is_none(),
        "a refused call made no session"
    );
    registry
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_reads_its_own_run_never_the_run_that_replaced_it() {
    let server = RedisServer::start();
    let registry = server.worker("shape:", "w").await;
    let session = registry
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let mut first = session.start(TaskStart::new().task_id("a")).await.unwrap();
    assert!(first.complete(Some("1")).await.unwrap());
    let own = session.get_run("a", first.run()).await.unwrap().unwrap();
    assert_eq!(own.status, SubagentStatus::Completed);
    let second = session.start(TaskStart::new().task_id("a")).await.unwrap();
    assert!(session.get_run("a", first.run()).await.unwrap().is_none());
    let current = session.get_run("a", second.run()).await.unwrap().unwrap();
    assert_eq!(current.status, SubagentStatus::Running);
}

/// A handle that has reported its run's end answers every later end (as `async with` ends its block after the
/// runner completed) as the server would, false, without a round trip: it does so with the server gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_that_reported_its_end_answers_a_second_end_without_a_round_trip() {
    let server = RedisServer::start();
    let worker = server.worker("shape:", "ender").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let mut handle = session.start(TaskStart::new().task_id("a")).await.unwrap();
    assert!(handle.complete(Some("done")).await.unwrap());
    let task = session.get("a").await.unwrap().unwrap();
    assert_eq!(task.status, SubagentStatus::Completed);
    drop(server);
    assert!(!handle.complete(Some("again")).await.unwrap());
    assert!(!handle.stopped(Some("late")).await.unwrap());
    assert!(!handle.fail("late").await.unwrap());
}
