//! Contract §22 on Redis: a batch is one round trip that opens every one of its tasks or none, and a cancel of
//! a parent reaches every child the batch opens under it.

mod common;

use common::{eventually, RedisServer};
use subagent_tracker::{SubagentStatus, TaskStart, TrackerConfig, TrackerError};
use subagent_tracker_redis::RedisTrackerError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_opens_every_task_in_order_and_a_child_may_name_an_earlier_one() {
    let server = RedisServer::start();
    let worker = server.worker("b1:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let handles = session
        .start_batch(vec![
            TaskStart::new().task_id("plan"),
            TaskStart::new().task_id("step").parent_id("plan"),
            TaskStart::new().parent_id("plan"),
        ])
        .await
        .unwrap();
    assert_eq!(handles.len(), 3);
    assert_eq!(handles[1].task_id(), "step");
    let reserved = session
        .reserve_batch(vec![
            (TaskStart::new().task_id("queued").parent_id("plan"), None),
            (
                TaskStart::new().task_id("queued-child").parent_id("queued"),
                None,
            ),
        ])
        .await
        .unwrap();
    assert_eq!(
        reserved.iter().map(|id| &**id).collect::<Vec<_>>(),
        ["queued", "queued-child"]
    );
    assert_eq!(
        session.get("queued").await.unwrap().unwrap().status,
        SubagentStatus::Queued
    );
    assert!(session.cancel("plan", Some("stop")).await.unwrap());
    assert!(
        eventually(|| handles
            .iter()
            .all(subagent_tracker_redis::RedisTaskHandle::is_cancelled))
        .await
    );
    let child = session.get("queued-child").await.unwrap().unwrap();
    assert_eq!(
        (child.status, child.finished),
        (SubagentStatus::Cancelled, true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_changes_nothing_in_redis() {
    let server = RedisServer::start();
    let worker = server.worker("b2:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let _live = session
        .start(TaskStart::new().task_id("live"))
        .await
        .unwrap();
    let refused = [
        (
            vec![TaskStart::new().task_id("a"), TaskStart::new().task_id("a")],
            "a",
        ),
        (
            vec![
                TaskStart::new().task_id("a"),
                TaskStart::new().task_id("live"),
            ],
            "live",
        ),
        (
            vec![
                TaskStart::new().task_id("a"),
                TaskStart::new().task_id("b").parent_id("missing"),
            ],
            "missing",
        ),
        (
            vec![
                TaskStart::new().task_id("child").parent_id("later"),
                TaskStart::new().task_id("later"),
            ],
            "later",
        ),
    ];
    for (batch, named) in refused {
        let Err(error) = session.start_batch(batch).await else {
            panic!("a batch naming {named:?} was accepted");
        };
        let RedisTrackerError::Tracker(error) = error else {
            panic!("not a refusal: {error:?}");
        };
        let names = match &error {
            TrackerError::DuplicateInBatch { task_id }
            | TrackerError::DuplicateTask { task_id, .. }
            | TrackerError::UnknownTask { task_id, .. } => task_id.clone(),
            other => panic!("unexpected refusal {other:?}"),
        };
        assert_eq!(&*names, named, "{error}");
    }
    let tasks: Vec<_> = session
        .tasks()
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.task_id.to_string())
        .collect();
    assert_eq!(tasks, ["live"]);
}
