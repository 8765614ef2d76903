//! Contract §22 on Redis: a batch is one round trip that opens every one of its tasks or none, and a cancel of
//! a parent reaches every child the batch opens under it.

use crate::common::{eventually, RedisServer};
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

/// A batch larger than one call (32 tasks) is checked whole and then opened a part at a time. A start of one
/// of its ids that lands between the two refuses it part way, as a concurrent change does in memory: what it had
/// opened is cancelled with `BATCH_REFUSED_REASON` and finished, never left pending; and whichever wins, the id is
/// held once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_raced_by_a_start_of_one_of_its_ids_leaves_nothing_pending() {
    let server = RedisServer::start();
    let worker = server.worker("b3:", "runner").await;
    let session = worker
        .session(
            Some("s"),
            TrackerConfig::default().with_max_finished_tasks(100_000),
        )
        .await
        .unwrap();
    let mut part_way = 0;
    for round in 0..30 {
        let starts = (0..100)
            .map(|index| TaskStart::new().task_id(format!("r{round}-{index}")))
            .collect();
        let racer = {
            let session = session.clone();
            // Later in each round, so that some land between the batch's check and its last part.
            let delay = std::time::Duration::from_micros(60 * round);
            tokio::spawn(async move {
                tokio::task::spawn_blocking(move || std::thread::sleep(delay))
                    .await
                    .unwrap();
                session
                    .start(TaskStart::new().task_id(format!("r{round}-90")))
                    .await
            })
        };
        let batch = session.start_batch(starts).await;
        let raced = racer.await.unwrap();
        let tasks: Vec<_> = session
            .tasks()
            .await
            .unwrap()
            .into_iter()
            .filter(|task| task.task_id.starts_with(&format!("r{round}-")))
            .collect();
        match (&batch, &raced) {
            (Ok(handles), Err(RedisTrackerError::Tracker(TrackerError::DuplicateTask { .. }))) => {
                assert_eq!(handles.len(), 100);
                assert!(tasks
                    .iter()
                    .all(|task| task.status == SubagentStatus::Running));
            }
            (Err(RedisTrackerError::Tracker(TrackerError::DuplicateTask { .. })), Ok(_)) => {
                let refused: Vec<_> = tasks
                    .iter()
                    .filter(|task| *task.task_id != format!("r{round}-90"))
                    .collect();
                if !refused.is_empty() {
                    part_way += 1;
                }
                for task in refused {
                    assert_eq!(
                        (task.status, task.finished, task.cancel_reason.as_deref()),
                        (
                            SubagentStatus::Cancelled,
                            true,
                            Some(subagent_tracker::BATCH_REFUSED_REASON)
                        ),
                        "{task:?}"
                    );
                }
            }
            (batch, raced) => panic!(
                "one of the two holds the id, the other is refused: {:?}, {:?}",
                batch.as_ref().err(),
                raced.as_ref().err()
            ),
        }
        drop((batch, raced));
    }
    eprintln!("{part_way} of 30 rounds refused the batch part way");
}

/// As above, but the server also begins refusing writes (out of memory, briefly) just after the racing start:
/// the ends of what a refused batch had opened may fail. Such a task is left to the orphan check, which ends
/// it; none stays running with no runner. Each round has a session of its own, so that no other failed call
/// sends the orphan check to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_part_way_whose_abandoned_tasks_fail_to_end_leaves_them_to_the_orphan_check(
) {
    let server = RedisServer::start();
    let worker = server.worker("b4:", "runner").await;
    let config = TrackerConfig::default().with_max_finished_tasks(100_000);
    let admin = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let set_max_memory = |mut admin: redis::aio::MultiplexedConnection, bytes: u64| async move {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .query_async(&mut admin)
            .await
            .unwrap();
    };
    let batch_of = |round: usize| -> Vec<TaskStart<String>> {
        (0..100)
            .map(|index| TaskStart::new().task_id(format!("r{round}-{index}")))
            .collect()
    };
    // The racing start lands at points spread over one batch's time, so that some land between its check and
    // its last part.
    let warm_up = worker
        .session(Some("warm-up"), config.clone())
        .await
        .unwrap();
    let began = std::time::Instant::now();
    let warmed_up = warm_up.start_batch(batch_of(0)).await.unwrap();
    let one_batch = began.elapsed();
    drop(warmed_up);
    let mut rounds = Vec::new();
    for round in 0..30 {
        let session = worker
            .session(Some(&format!("s{round}")), config.clone())
            .await
            .unwrap();
        let racer = {
            let (session, admin) = (session.clone(), admin.clone());
            let delay = one_batch * u32::try_from(round).unwrap() / 30;
            tokio::spawn(async move {
                tokio::task::spawn_blocking(move || std::thread::sleep(delay))
                    .await
                    .unwrap();
                let raced = session
                    .start(TaskStart::new().task_id(format!("r{round}-90")))
                    .await;
                set_max_memory(admin.clone(), 1).await;
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                set_max_memory(admin, 0).await;
                raced
            })
        };
        let batch = session.start_batch(batch_of(round)).await;
        let raced = racer.await.unwrap();
        rounds.push((session, batch, raced));
    }
    set_max_memory(admin.clone(), 0).await;
    // Every task still running is held by a handle here; every other one has ended.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for (session, batch, raced) in &rounds {
        let held: std::collections::HashSet<&str> = batch
            .iter()
            .flatten()
            .chain(raced)
            .map(subagent_tracker_redis::RedisTaskHandle::task_id)
            .collect();
        loop {
            let running: Vec<String> = session
                .pending()
                .await
                .unwrap()
                .into_iter()
                .map(|task| task.task_id.to_string())
                .filter(|task_id| !held.contains(task_id.as_str()))
                .collect();
            if running.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "tasks running with no runner: {running:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    drop(admin);
}
