//! Contract §22 on Redis, ends and coalescing: a batch of ends is one round trip with a result per end, and the
//! starts and ends that wait together in one process go to the server as one call, each keeping its own outcome.

use std::time::Duration;

use crate::common::{calls_of, cli, function_calls, log_every_call, RedisServer};
use futures_util::future::join_all;
use subagent_tracker::{
    EndTarget, SubagentStatus, TaskEnd, TaskFailure, TaskStart, TrackerConfig, TrackerError,
};
use subagent_tracker_redis::{RedisRegistry, RedisTrackerError, SharedTaskHandle};

async fn session(worker: &RedisRegistry) -> subagent_tracker_redis::RedisSession {
    worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ends_handles_and_ids_in_one_round_trip_with_a_result_each() {
    let server = RedisServer::start();
    let worker = server.worker("e1:", "runner").await;
    let session = session(&worker).await;
    let mut done = session
        .start(TaskStart::new().task_id("done"))
        .await
        .unwrap();
    let mut stopped = session
        .start(TaskStart::new().task_id("stopped"))
        .await
        .unwrap();
    let by_id = session
        .start(TaskStart::new().task_id("by-id"))
        .await
        .unwrap();
    assert!(session
        .cancel("stopped", Some("no longer needed"))
        .await
        .unwrap());
    let before = function_calls(&server);
    let moved = session
        .end_batch(vec![
            (
                EndTarget::Handle(&mut done),
                TaskEnd::Completed(Some("\"answer\"".to_owned())),
            ),
            (EndTarget::Handle(&mut stopped), TaskEnd::Completed(None)),
            (
                EndTarget::TaskId("by-id".into()),
                TaskEnd::Failed(TaskFailure::new("it broke").error_type("ValueError")),
            ),
            (
                EndTarget::TaskId("unknown".into()),
                TaskEnd::Completed(None),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(moved, [true, false, true, false]);
    assert_eq!(
        function_calls(&server) - before,
        1,
        "one server call for the whole batch"
    );
    let done_now = session.get("done").await.unwrap().unwrap();
    assert_eq!(
        (done_now.status, done_now.result.as_deref()),
        (SubagentStatus::Completed, Some("\"answer\""))
    );
    let stopped_now = session.get("stopped").await.unwrap().unwrap();
    assert_eq!(
        (stopped_now.status, stopped_now.finished),
        (SubagentStatus::Cancelled, true)
    );
    let failed = session.get("by-id").await.unwrap().unwrap();
    assert_eq!(
        (
            failed.status,
            failed.error.as_deref(),
            failed.error_type.as_deref()
        ),
        (SubagentStatus::Failed, Some("it broke"), Some("ValueError"))
    );
    // A handle a batch ended answers its own later end at once, as after its own end.
    assert!(done.has_reported_end());
    assert!(!done.complete(None).await.unwrap());
    // The runner of the task ended by id finds it finished.
    drop(by_id);
    assert_eq!(
        session.get("by-id").await.unwrap().unwrap().status,
        SubagentStatus::Failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_naming_a_handle_of_another_session_or_a_bad_id_changes_nothing() {
    let server = RedisServer::start();
    let worker = server.worker("e2:", "runner").await;
    let session = session(&worker).await;
    let other = worker
        .session(Some("other"), TrackerConfig::default())
        .await
        .unwrap();
    let mut mine = session
        .start(TaskStart::new().task_id("mine"))
        .await
        .unwrap();
    let mut theirs = other
        .start(TaskStart::new().task_id("theirs"))
        .await
        .unwrap();
    let refused = session
        .end_batch(vec![
            (EndTarget::Handle(&mut mine), TaskEnd::Completed(None)),
            (EndTarget::Handle(&mut theirs), TaskEnd::Completed(None)),
        ])
        .await;
    assert!(matches!(
        refused,
        Err(RedisTrackerError::Tracker(TrackerError::HandleOfAnotherSession { ref task_id, .. }))
            if &**task_id == "theirs"
    ));
    let refused = session
        .end_batch(vec![
            (EndTarget::Handle(&mut mine), TaskEnd::Completed(None)),
            (EndTarget::TaskId("".into()), TaskEnd::Completed(None)),
        ])
        .await;
    assert!(matches!(
        refused,
        Err(RedisTrackerError::Tracker(TrackerError::InvalidId { .. }))
    ));
    for (session, task_id) in [(&session, "mine"), (&other, "theirs")] {
        assert_eq!(
            session.get(task_id).await.unwrap().unwrap().status,
            SubagentStatus::Running,
            "a refused batch ends nothing"
        );
    }
    assert!(mine.complete(None).await.unwrap());
    assert!(theirs.complete(None).await.unwrap());
}

/// Batches over shared handles lock them in one order. Two batches name the same two handles in opposite
/// orders while this test holds the first handle, so that each batch takes what it can and waits: taken in the
/// order named, each would then hold one handle and wait for the other. A handle named twice is refused before
/// any is locked (it would wait for itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_over_shared_handles_never_wait_in_a_circle() {
    let server = RedisServer::start();
    let worker = server.worker("e4:", "runner").await;
    let session = session(&worker).await;
    let mut handles = Vec::new();
    for task_id in ["first", "second"] {
        let handle = session
            .start(TaskStart::new().task_id(task_id))
            .await
            .unwrap();
        handles.push(SharedTaskHandle::new(handle));
    }
    let twice = session.end_batch_shared(vec![
        (
            EndTarget::Handle(handles[0].clone()),
            TaskEnd::Completed(None),
        ),
        (
            EndTarget::Handle(handles[0].clone()),
            TaskEnd::Completed(None),
        ),
    ]);
    assert!(matches!(twice, Err(TrackerError::DuplicateInBatch { .. })));
    let batch = |order: [usize; 2]| {
        let (session, handles) = (session.clone(), handles.clone());
        tokio::spawn(async move {
            let ends = order.map(|index| {
                (
                    EndTarget::Handle(handles[index].clone()),
                    TaskEnd::Completed(None),
                )
            });
            session.end_batch_shared(ends.into()).unwrap().await
        })
    };
    let held = handles[0].lock().await;
    let forward = batch([0, 1]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let backward = batch([1, 0]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(held);
    let (forward, backward) = tokio::time::timeout(Duration::from_secs(10), async {
        (forward.await.unwrap(), backward.await.unwrap())
    })
    .await
    .expect("two batches over the same handles waited for each other");
    // Each task ended once, by whichever batch reached it first.
    let (forward, backward) = (forward.unwrap(), backward.unwrap());
    assert!(forward[0] != backward[1] && forward[1] != backward[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_starts_keep_their_own_refusals_and_none_is_left_half_done() {
    let server = RedisServer::start();
    let worker = server.worker("e3:", "runner").await;
    let session = session(&worker).await;
    let _live = session
        .start(TaskStart::new().task_id("taken"))
        .await
        .unwrap();
    log_every_call(&server);
    hold_writes_for_a_moment(&server);
    let starts = 60;
    let opened = join_all((0..starts).map(|index| {
        let session = session.clone();
        async move {
            let start = match index {
                20 => TaskStart::new().task_id("taken"),
                40 => TaskStart::new()
                    .task_id("orphan")
                    .parent_id("no-such-parent"),
                _ => TaskStart::new().task_id(format!("t{index}")),
            };
            session.start(start).await
        }
    }))
    .await;
    let calls = calls_of(&server, "open");
    assert!(
        (1..starts / 2).contains(&calls),
        "{starts} starts waiting together took {calls} server calls"
    );
    for (index, outcome) in opened.iter().enumerate() {
        match index {
            20 => assert!(matches!(
                outcome,
                Err(RedisTrackerError::Tracker(
                    TrackerError::DuplicateTask { .. }
                ))
            )),
            40 => assert!(matches!(
                outcome,
                Err(RedisTrackerError::Tracker(TrackerError::UnknownTask { .. }))
            )),
            _ => assert!(
                outcome.is_ok(),
                "start {index}: {:?}",
                outcome.as_ref().err()
            ),
        }
    }
    // Every start that went through is whole: listed, running, with its event; the refused ones left nothing.
    let tasks = session.tasks().await.unwrap();
    assert_eq!(tasks.len(), starts - 2 + 1);
    assert!(tasks
        .iter()
        .all(|task| task.status == SubagentStatus::Running));
    assert!(session.get("orphan").await.unwrap().is_none());
    let taken = session.get("taken").await.unwrap().unwrap();
    assert_eq!(taken.status, SubagentStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_ends_keep_their_own_results() {
    let server = RedisServer::start();
    let worker = server.worker("e4:", "runner").await;
    let session = session(&worker).await;
    let mut handles = Vec::new();
    for index in 0..40 {
        handles.push(
            session
                .start(TaskStart::new().task_id(format!("t{index}")))
                .await
                .unwrap(),
        );
    }
    assert!(session.cancel("t7", None).await.unwrap());
    log_every_call(&server);
    hold_writes_for_a_moment(&server);
    let ended = join_all(
        handles
            .iter_mut()
            .enumerate()
            .map(|(index, handle)| async move {
                if index % 2 == 0 {
                    handle.complete(None).await
                } else {
                    handle.fail("odd").await
                }
            }),
    )
    .await;
    let calls = calls_of(&server, "end");
    assert!(
        (1..20).contains(&calls),
        "40 ends waiting together took {calls} server calls"
    );
    for (index, ended) in ended.into_iter().enumerate() {
        assert_eq!(ended.unwrap(), index != 7, "end {index}");
    }
    for (index, task) in session.tasks().await.unwrap().iter().enumerate() {
        let expected = match index {
            7 => SubagentStatus::Cancelled,
            even if even % 2 == 0 => SubagentStatus::Completed,
            _ => SubagentStatus::Failed,
        };
        assert_eq!(
            (task.status, task.finished),
            (expected, true),
            "task {index}"
        );
    }
}

/// Contract §7 across a coalesced call: ends that go to the server together evict once, and the session keeps
/// exactly its bound of finished tasks, the latest to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_ends_keep_the_retention_bound_exact() {
    let server = RedisServer::start();
    let worker = server.worker("e5:", "runner").await;
    let session = worker
        .session(
            Some("s"),
            TrackerConfig::default().with_max_finished_tasks(5),
        )
        .await
        .unwrap();
    let mut handles = Vec::new();
    for index in 0..40 {
        handles.push(
            session
                .start(TaskStart::new().task_id(format!("t{index:02}")))
                .await
                .unwrap(),
        );
    }
    let ended = join_all(handles.iter_mut().map(|handle| handle.complete(None))).await;
    assert!(ended.into_iter().all(|ended| ended.unwrap()));
    let retained = session.tasks().await.unwrap();
    assert_eq!(retained.len(), 5, "exactly the bound");
    assert!(retained.iter().all(|task| task.finished));
    let finished: u64 = redis::cmd("LLEN")
        .arg("e5:v2:{s:s}:finished")
        .query(
            &mut redis::Client::open(server.url())
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(finished, 5, "eviction removed the rest, not only hid them");
}

/// The server holds writes for a moment (`CLIENT PAUSE ... WRITE`): the first call waits for it, and every call
/// made meanwhile waits to be sent, as under load, however busy the machine is (a quick first reply otherwise
/// lets the next calls go one by one).
fn hold_writes_for_a_moment(server: &RedisServer) {
    cli(server.port, &["CLIENT", "PAUSE", "100", "WRITE"]);
}
