//! Contract §§2, 3, 18 and 20 across workers: several registries (each a worker, as each process would be) on
//! one real Redis server.

use std::time::{Duration, Instant};

use crate::common::{eventually, RedisServer};
use subagent_tracker::{
    CancelCause, ClaimProblem, Resumption, SubagentStatus, TaskStart, TrackerConfig, TrackerError,
};
use subagent_tracker_redis::{RedisOptions, RedisRegistry, RedisTrackerError};

fn config() -> TrackerConfig {
    TrackerConfig::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_worker_fires_the_runner_s_token_promptly() {
    let server = RedisServer::start();
    let runner = server.worker("t1:", "runner").await;
    let stopper = server.worker("t1:", "stopper").await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let mut handle = session
        .start(TaskStart::new().task_id("job").agent("coder"))
        .await
        .unwrap();
    assert!(!handle.is_cancelled());
    let elsewhere = stopper.get_session("s").await.unwrap().unwrap();
    let sent = Instant::now();
    assert!(elsewhere
        .cancel("job", Some("user pressed stop"))
        .await
        .unwrap());
    assert!(!elsewhere.cancel("job", None).await.unwrap());
    assert!(eventually(|| handle.is_cancelled()).await);
    let latency = sent.elapsed();
    assert!(
        latency < Duration::from_millis(150),
        "the push, not the 200 ms reconcile, fired it: {latency:?}"
    );
    assert_eq!(
        handle.token().reason().as_deref(),
        Some("user pressed stop")
    );
    let snapshot = elsewhere.get("job").await.unwrap().unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(!snapshot.finished, "its runner still runs");
    assert_eq!(snapshot.agent.as_deref(), Some("coder"));
    assert!(
        !handle.complete(Some("late")).await.unwrap(),
        "a late end never downgrades"
    );
    let snapshot = elsewhere.get("job").await.unwrap().unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(snapshot.finished);
    assert_eq!(snapshot.result.as_deref(), Some("late"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_concurrent_cancels_from_several_workers_exactly_one_is_true() {
    let server = RedisServer::start();
    let workers = [
        server.worker("t2:", "a").await,
        server.worker("t2:", "b").await,
        server.worker("t2:", "c").await,
    ];
    let mut sessions = Vec::new();
    for worker in &workers {
        sessions.push(worker.session(Some("s"), config()).await.unwrap());
    }
    for round in 0..30 {
        let task_id = format!("job-{round}");
        let mut handle = sessions[0]
            .start(TaskStart::new().task_id(task_id.as_str()))
            .await
            .unwrap();
        let (first, second, third) = tokio::join!(
            sessions[0].cancel(&task_id, None),
            sessions[1].cancel(&task_id, None),
            sessions[2].cancel(&task_id, None),
        );
        let wins = [first.unwrap(), second.unwrap(), third.unwrap()]
            .into_iter()
            .filter(|won| *won)
            .count();
        assert_eq!(wins, 1, "round {round}");
        assert!(eventually(|| handle.is_cancelled()).await);
        handle.stopped(None).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_racing_a_cancel_from_another_worker_has_one_winner() {
    let server = RedisServer::start();
    let runner = server.worker("t3:", "runner").await;
    let stopper = server.worker("t3:", "stopper").await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let elsewhere = stopper.session(Some("s"), config()).await.unwrap();
    for round in 0..30 {
        let task_id = format!("job-{round}");
        let mut handle = session
            .start(TaskStart::new().task_id(task_id.as_str()))
            .await
            .unwrap();
        let (completed, cancelled) =
            tokio::join!(handle.complete(None), elsewhere.cancel(&task_id, None));
        let (completed, cancelled) = (completed.unwrap(), cancelled.unwrap());
        assert!(completed ^ cancelled, "round {round}");
        let status = elsewhere.get(&task_id).await.unwrap().unwrap().status;
        let expected = if completed {
            SubagentStatus::Completed
        } else {
            SubagentStatus::Cancelled
        };
        assert_eq!(status, expected, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_reaches_a_subtree_that_spans_three_workers() {
    let server = RedisServer::start();
    let a = server.worker("t4:", "a").await;
    let b = server.worker("t4:", "b").await;
    let c = server.worker("t4:", "c").await;
    let root = a
        .session(Some("s"), config())
        .await
        .unwrap()
        .start(TaskStart::new().task_id("root"))
        .await
        .unwrap();
    let mut child = b
        .session(Some("s"), config())
        .await
        .unwrap()
        .start(TaskStart::new().task_id("child").parent_id("root"))
        .await
        .unwrap();
    let session_c = c.session(Some("s"), config()).await.unwrap();
    let grandchild = session_c
        .start(TaskStart::new().task_id("grandchild").parent_id("child"))
        .await
        .unwrap();
    let sibling = session_c
        .start(TaskStart::new().task_id("sibling"))
        .await
        .unwrap();
    // The child finishes first: the cancel still reaches the grandchild through it.
    assert!(child.complete(None).await.unwrap());
    assert!(session_c.cancel("root", Some("stop all")).await.unwrap());
    assert!(eventually(|| root.is_cancelled() && grandchild.is_cancelled()).await);
    let snapshot = session_c.get("grandchild").await.unwrap().unwrap();
    assert_eq!(snapshot.cancel_origin.as_deref(), Some("root"));
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Parent));
    assert_eq!(snapshot.cancel_reason.as_deref(), Some("stop all"));
    assert!(
        !sibling.is_cancelled(),
        "a cancel never touches what is outside its subtree"
    );
    assert_eq!(
        session_c.get("child").await.unwrap().unwrap().status,
        SubagentStatus::Completed
    );
    drop((root, grandchild, sibling));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_started_under_a_parent_cancelled_elsewhere_starts_cancelled() {
    let server = RedisServer::start();
    let a = server.worker("t5:", "a").await;
    let b = server.worker("t5:", "b").await;
    let session_a = a.session(Some("s"), config()).await.unwrap();
    let mut parent = session_a
        .start(TaskStart::new().task_id("parent"))
        .await
        .unwrap();
    assert!(session_a.cancel("parent", Some("budget")).await.unwrap());
    let session_b = b.session(Some("s"), config()).await.unwrap();
    let child = session_b
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .await
        .unwrap();
    assert!(child.is_cancelled(), "cancelled before its start returned");
    assert_eq!(child.token().reason().as_deref(), Some("budget"));
    assert_eq!(child.token().origin().as_deref(), Some("parent"));
    assert!(parent.stopped(None).await.is_ok());
    assert!(matches!(
        session_b
            .start(TaskStart::new().task_id("late").parent_id("parent"))
            .await,
        Err(RedisTrackerError::Tracker(
            TrackerError::ParentFinished { .. }
        ))
    ));
    drop(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_before_a_claim_in_another_worker_is_never_lost() {
    let server = RedisServer::start();
    let api = server.worker("t6:", "api").await;
    let worker = server.worker("t6:", "worker").await;
    let queue = api.session(Some("s"), config()).await.unwrap();
    queue
        .reserve(TaskStart::new().task_id("kept"), None)
        .await
        .unwrap();
    queue
        .reserve(TaskStart::new().task_id("stopped"), None)
        .await
        .unwrap();
    assert_eq!(
        queue.get("kept").await.unwrap().unwrap().status,
        SubagentStatus::Queued
    );
    assert!(queue
        .cancel("stopped", Some("user pressed stop"))
        .await
        .unwrap());
    let stopped = queue.get("stopped").await.unwrap().unwrap();
    assert!(stopped.finished, "nothing runs, so nothing is waited for");
    let pickup = worker.get_session("s").await.unwrap().unwrap();
    let kept = pickup.claim("kept").await.unwrap();
    assert!(!kept.is_cancelled());
    assert!(queue
        .get("kept")
        .await
        .unwrap()
        .unwrap()
        .claimed_at
        .is_some());
    let handle = pickup.claim("stopped").await.unwrap();
    assert!(handle.is_cancelled());
    assert_eq!(
        handle.token().reason().as_deref(),
        Some("user pressed stop")
    );
    assert!(matches!(
        pickup.claim("stopped").await,
        Err(RedisTrackerError::Tracker(TrackerError::NotClaimable {
            problem: ClaimProblem::AlreadyClaimed,
            ..
        }))
    ));
    assert!(matches!(
        pickup.claim("nobody").await,
        Err(RedisTrackerError::Tracker(TrackerError::NotReserved { .. }))
    ));
    // The claimed run is this worker's: a cancel from the API server reaches it.
    assert!(queue.cancel("kept", None).await.unwrap());
    assert!(eventually(|| kept.is_cancelled()).await);
    drop(handle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_claims_from_several_workers_exactly_one_succeeds() {
    let server = RedisServer::start();
    let a = server.worker("t7:", "a").await;
    let b = server.worker("t7:", "b").await;
    let session_a = a.session(Some("s"), config()).await.unwrap();
    let session_b = b.session(Some("s"), config()).await.unwrap();
    for round in 0..30 {
        let task_id = format!("job-{round}");
        session_a
            .reserve(TaskStart::new().task_id(task_id.as_str()), None)
            .await
            .unwrap();
        let (first, second) = tokio::join!(session_a.claim(&task_id), session_b.claim(&task_id));
        assert!(first.is_ok() ^ second.is_ok(), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_starts_and_ends_keep_the_contract_across_workers() {
    let server = RedisServer::start();
    let a = server.worker("t8:", "a").await;
    let b = server.worker("t8:", "b").await;
    let session_a = a.session(Some("s"), config()).await.unwrap();
    let session_b = b.session(Some("s"), config()).await.unwrap();
    let mut handle = session_a
        .start(
            TaskStart::new()
                .task_id("job")
                .metadata("{\"k\": 1}".to_owned()),
        )
        .await
        .unwrap();
    assert!(matches!(
        session_b.start(TaskStart::new().task_id("job")).await,
        Err(RedisTrackerError::Tracker(
            TrackerError::DuplicateTask { .. }
        ))
    ));
    assert!(matches!(
        session_b
            .start(TaskStart::new().task_id("x").parent_id("nobody"))
            .await,
        Err(RedisTrackerError::Tracker(TrackerError::UnknownTask { .. }))
    ));
    let pending: Vec<_> = session_b
        .pending()
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.task_id)
        .collect();
    assert_eq!(pending, [std::sync::Arc::from("job")]);
    // An end recorded by id, elsewhere, wins; the runner's own end is then late.
    assert!(session_b
        .end("job", Err("the pod was evicted"))
        .await
        .unwrap());
    assert!(!handle.complete(None).await.unwrap());
    let snapshot = session_a.get("job").await.unwrap().unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Failed);
    assert_eq!(snapshot.error.as_deref(), Some("the pod was evicted"));
    assert_eq!(snapshot.metadata.as_deref(), Some("{\"k\": 1}"));
    // A finished id may be started again, by any worker.
    let mut again = session_b
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    assert_eq!(
        session_a.get("job").await.unwrap().unwrap().status,
        SubagentStatus::Running
    );
    assert!(again.complete(Some("done")).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_handle_fails_its_task() {
    let server = RedisServer::start();
    let worker = server.worker("t9:", "a").await;
    let session = worker.session(Some("s"), config()).await.unwrap();
    drop(
        session
            .start(TaskStart::new().task_id("job"))
            .await
            .unwrap(),
    );
    let mut status = None;
    for _ in 0..200 {
        let snapshot = session.get("job").await.unwrap().unwrap();
        if snapshot.finished {
            status = Some((snapshot.status, snapshot.error));
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        status,
        Some((
            SubagentStatus::Failed,
            Some(subagent_tracker::DROPPED_HANDLE_ERROR.into())
        ))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_notification_is_repaired_by_the_reconcile() {
    let server = RedisServer::start();
    let runner = server.worker("t10:", "runner").await;
    let stopper = server.worker("t10:", "stopper").await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    let elsewhere = stopper.get_session("s").await.unwrap().unwrap();
    // Drop every subscription on the server, then cancel at once: the notification goes nowhere.
    server.drop_subscriptions().await;
    assert!(elsewhere.cancel("job", None).await.unwrap());
    assert!(
        eventually(|| handle.is_cancelled()).await,
        "the reconcile (after resubscribing, or on its 200 ms timer) fired it"
    );
}

/// A cancel made through the registry that runs the tasks returns with their tokens fired, as in memory, even
/// when the push never comes: by id (with a cascade of more steps than one), by filter, of the session, and a close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_returns_with_the_tokens_of_this_process_s_runs_fired() {
    let server = RedisServer::start();
    let runner = server
        .worker_without_timed_reconcile("t10b:", "runner")
        .await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let start = |task_id: String, parent: Option<&'static str>, agent: &'static str| {
        let session = session.clone();
        async move {
            let mut start = TaskStart::new().task_id(task_id).agent(agent);
            if let Some(parent) = parent {
                start = start.parent_id(parent);
            }
            session.start(start).await.unwrap()
        }
    };
    let root = start("root".to_owned(), None, "lead").await;
    // More children than one step of a cascade reads (`WALK_STEP`, 32): the rest are the walk's later steps.
    let mut children = Vec::new();
    for index in 0..80 {
        children.push(start(format!("child-{index}"), Some("root"), "lead").await);
    }
    let matched = start("matched".to_owned(), None, "picked").await;
    let last = start("last".to_owned(), None, "other").await;
    server.refuse_subscriptions().await;
    assert!(session.cancel("root", None).await.unwrap());
    assert!(root.is_cancelled());
    let unfired = children
        .iter()
        .filter(|child| !child.is_cancelled())
        .count();
    assert_eq!(unfired, 0, "children whose token had not fired on return");
    assert!(!matched.is_cancelled() && !last.is_cancelled());
    let filter = subagent_tracker::TaskFilter::new().agent("picked");
    assert_eq!(
        session.cancel_matching(&filter, None).await.unwrap().len(),
        1
    );
    assert!(matched.is_cancelled() && !last.is_cancelled());
    assert_eq!(session.cancel_all(Some("all")).await.unwrap(), 1);
    assert!(last.is_cancelled());
    let closing = start("closing".to_owned(), None, "other").await;
    server.refuse_subscriptions().await;
    assert_eq!(session.close(Some("closed")).await.unwrap(), 1);
    assert!(closing.is_cancelled());
}

/// The same for a task group's rules, which an end sets off: the failing child's end returns with its group's
/// token fired, and the group's end with its pending children's, a cascade of several steps included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_returns_with_the_tokens_its_group_rules_cancelled_here_fired() {
    let server = RedisServer::start();
    let runner = server
        .worker_without_timed_reconcile("t10c:", "runner")
        .await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let group = |task_id: &str| TaskStart::new().task_id(task_id).structured(true);
    let failing_group = session.start(group("failing")).await.unwrap();
    let mut child = session
        .start(TaskStart::new().task_id("child").parent_id("failing"))
        .await
        .unwrap();
    let mut ending_group = session.start(group("ending")).await.unwrap();
    let mut members = Vec::new();
    for index in 0..40 {
        let start = TaskStart::new()
            .task_id(format!("member-{index}"))
            .parent_id("ending");
        members.push(session.start(start).await.unwrap());
    }
    server.refuse_subscriptions().await;
    assert!(child.fail("broke").await.unwrap());
    assert!(
        failing_group.is_cancelled(),
        "the child's failure cancelled its group"
    );
    assert!(ending_group.complete(None).await.unwrap());
    let unfired = members
        .iter()
        .filter(|member| !member.is_cancelled())
        .count();
    assert_eq!(unfired, 0, "members whose token had not fired on return");
}

/// The same for a resume and an end by id of a paused run: the runner in this process has its answer when the call
/// returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_or_an_end_by_id_returns_with_this_process_s_paused_runner_told() {
    let server = RedisServer::start();
    let runner = server
        .worker_without_timed_reconcile("t10d:", "runner")
        .await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let approved = session
        .start(TaskStart::new().task_id("approved"))
        .await
        .unwrap();
    let dropped = session
        .start(TaskStart::new().task_id("dropped"))
        .await
        .unwrap();
    assert!(approved.pause(Some("approval")).await.unwrap());
    assert!(dropped.pause(Some("approval")).await.unwrap());
    let (approved_watch, dropped_watch) = (
        approved.resume_watch().unwrap(),
        dropped.resume_watch().unwrap(),
    );
    server.refuse_subscriptions().await;
    assert!(session.resume("approved", Some("\"yes\"")).await.unwrap());
    assert_eq!(
        approved_watch.resumption(),
        Resumption::Resumed(Some("\"yes\"".to_owned()))
    );
    assert_eq!(dropped_watch.resumption(), Resumption::Paused);
    assert!(session.end("dropped", Ok(None)).await.unwrap());
    assert_eq!(dropped_watch.resumption(), Resumption::Ended);
}

/// A cancel made through this registry while its own start of the task is still under way (the run is in Redis,
/// its handle not yet made here) is kept for that start: when both calls have returned and the cancel moved the
/// task, the handle's token has fired, with no push and no timed reconcile to stand in for the cancel's reply.
/// Which of the two replies this process takes first is up to the scheduler, so the race runs many times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_this_process_s_own_start_of_the_task_reaches_its_handle() {
    let server = RedisServer::start();
    let runner = server
        .worker_without_timed_reconcile("t10e:", "runner")
        .await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    server.refuse_subscriptions().await;
    let until = Instant::now() + Duration::from_secs(10);
    let mut races = 0;
    while races < 400 && Instant::now() < until {
        races += 1;
        let task_id = format!("task-{races}");
        let starting = {
            let (session, start) = (session.clone(), TaskStart::new().task_id(task_id.clone()));
            tokio::spawn(async move { session.start(start).await.unwrap() })
        };
        // Sent while the start may still be under way: the first that finds the task moves it.
        let mut moved = false;
        for _ in 0..1_000 {
            let start_returned = starting.is_finished();
            if session.cancel(&task_id, None).await.unwrap() {
                moved = true;
                break;
            }
            if start_returned {
                // A start that returned before a cancel that found nothing failed: its panic shows below.
                break;
            }
        }
        let handle = starting.await.unwrap();
        assert!(moved, "no cancel found {task_id}");
        assert!(
            handle.is_cancelled(),
            "the start of {task_id} returned with its token unfired"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_is_bounded_and_a_cascade_crosses_evicted_tasks() {
    let server = RedisServer::start();
    let worker = server.worker("t11:", "a").await;
    let session = worker
        .session(
            Some("s"),
            TrackerConfig::default().with_max_finished_tasks(2),
        )
        .await
        .unwrap();
    let root = session
        .start(TaskStart::new().task_id("root"))
        .await
        .unwrap();
    let mut middle = session
        .start(TaskStart::new().task_id("middle").parent_id("root"))
        .await
        .unwrap();
    let leaf = session
        .start(TaskStart::new().task_id("leaf").parent_id("middle"))
        .await
        .unwrap();
    assert!(middle.complete(None).await.unwrap());
    for index in 0..3 {
        let task_id = format!("filler-{index}");
        session
            .start(TaskStart::new().task_id(task_id.as_str()))
            .await
            .unwrap()
            .complete(None)
            .await
            .unwrap();
    }
    assert!(session.get("middle").await.unwrap().is_none(), "evicted");
    let retained = session.tasks().await.unwrap();
    let finished = retained.iter().filter(|task| task.finished).count();
    assert_eq!(finished, 2);
    assert!(session.cancel("root", None).await.unwrap());
    assert!(
        eventually(|| leaf.is_cancelled()).await,
        "root adopted the leaf"
    );
    drop((root, leaf));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_looked_up_by_id_and_a_closed_one_leaves_once_finished() {
    let server = RedisServer::start();
    let a = server.worker("t12:", "a").await;
    let b = server.worker("t12:", "b").await;
    assert!(b.get_session("s").await.unwrap().is_none());
    let session = a.session(Some("s"), config()).await.unwrap();
    a.session(Some("other"), config()).await.unwrap();
    assert_eq!(b.sessions().await.unwrap(), ["other", "s"]);
    let mut handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    let elsewhere = b.get_session("s").await.unwrap().unwrap();
    assert_eq!(elsewhere.close(Some("shutting down")).await.unwrap(), 1);
    assert!(matches!(
        session.start(TaskStart::new()).await,
        Err(RedisTrackerError::Tracker(
            TrackerError::SessionClosed { .. }
        ))
    ));
    assert!(
        b.get_session("s").await.unwrap().is_some(),
        "its runner still runs"
    );
    assert!(eventually(|| handle.is_cancelled()).await);
    handle.stopped(None).await.unwrap();
    assert!(b.get_session("s").await.unwrap().is_none());
    assert_eq!(b.sessions().await.unwrap(), ["other"]);
}

#[tokio::test]
async fn an_unreachable_server_fails_within_the_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let outcome = RedisRegistry::connect(
        &format!("redis://127.0.0.1:{port}/0"),
        RedisOptions::default().with_timeout(Duration::from_millis(300)),
    )
    .await;
    assert!(matches!(
        outcome,
        Err(RedisTrackerError::Unavailable { .. })
    ));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_in_one_worker_returns_once_the_runner_in_another_has_stopped() {
    let server = RedisServer::start();
    let runner = server.worker("t13:", "runner").await;
    let watcher = server.worker("t13:", "watcher").await;
    let mut handle = runner
        .session(Some("s"), config())
        .await
        .unwrap()
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    let session = watcher.session(Some("s"), config()).await.unwrap();
    let waiting = {
        let session = session.clone();
        tokio::spawn(async move { session.wait_finished("job").await })
    };
    assert!(session.cancel("job", None).await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiting.is_finished(),
        "cancelled is not finished: the runner still runs"
    );
    assert!(eventually(|| handle.is_cancelled()).await);
    handle.stopped(None).await.unwrap();
    let finished = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the wait returned")
        .unwrap()
        .unwrap();
    assert_eq!(finished.status, SubagentStatus::Cancelled);
    assert!(finished.finished);
    assert!(matches!(
        session.wait_finished("nobody").await,
        Err(RedisTrackerError::Tracker(TrackerError::UnknownTask { .. }))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_every_worker_arrive_in_the_order_they_took_effect() {
    use subagent_tracker::SubagentEventKind::{Cancelled, Claimed, Ended, Progress, Started};
    let server = RedisServer::start();
    let a = server.worker("t14:", "a").await;
    let b = server.worker("t14:", "b").await;
    let session_a = a.session(Some("s"), config()).await.unwrap();
    let session_b = b.session(Some("s"), config()).await.unwrap();
    let mut events = session_b.subscribe().await.unwrap();
    let mut handle = session_a
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    assert!(handle.progress("half way").await.unwrap());
    session_a
        .reserve(TaskStart::new().task_id("queued"), None)
        .await
        .unwrap();
    let claimed = session_b.claim("queued").await.unwrap();
    assert!(session_b.cancel("job", Some("stop")).await.unwrap());
    handle.stopped(None).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..6 {
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .unwrap()
            .unwrap();
        seen.push((event.task_id.to_string(), event.kind, event.status));
    }
    let expected = [
        ("job", Started, SubagentStatus::Running),
        ("job", Progress, SubagentStatus::Running),
        ("queued", Started, SubagentStatus::Queued),
        ("queued", Claimed, SubagentStatus::Running),
        ("job", Cancelled, SubagentStatus::Cancelled),
        ("job", Ended, SubagentStatus::Cancelled),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(task, kind, status)| (task.to_string(), *kind, *status))
        .collect();
    assert_eq!(seen[..6], expected[..]);
    drop(claimed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_overtaken_by_trimming_learns_exactly_how_many_events_it_missed() {
    let server = RedisServer::start();
    let worker = server.worker("t15:", "a").await;
    let session = worker.session(Some("s"), config()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();
    let handle = session
        .start(TaskStart::new().task_id("chatty"))
        .await
        .unwrap();
    let progress_events = 12_000u64;
    for index in 0..progress_events {
        handle.progress(&index.to_string()).await.unwrap();
    }
    let (mut missed, mut received) = (0, 0);
    while missed + received < progress_events + 1 {
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("every event is accounted for")
            .unwrap();
        if event.kind == subagent_tracker::SubagentEventKind::Lagged {
            missed += event.missed;
        } else {
            received += 1;
        }
    }
    assert!(
        missed > 0,
        "the stream is trimmed to about ten thousand events"
    );
    assert_eq!(missed + received, progress_events + 1);
    drop(handle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_cancel_subtrees_in_every_worker_and_children_inherit_them() {
    let server = RedisServer::start();
    let a = server.worker("t16:", "a").await;
    let b = server.worker("t16:", "b").await;
    let session_a = a.session(Some("s"), config()).await.unwrap();
    let session_b = b.session(Some("s"), config()).await.unwrap();
    let parent = session_a
        .start(
            TaskStart::new()
                .task_id("parent")
                .timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let child = session_b
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .await
        .unwrap();
    let detached = session_b
        .start(
            TaskStart::new()
                .task_id("detached")
                .parent_id("parent")
                .detached(true),
        )
        .await
        .unwrap();
    let snapshot = session_b.get("child").await.unwrap().unwrap();
    assert_eq!(
        snapshot
            .deadline
            .map(|deadline| deadline > std::time::SystemTime::now()),
        Some(true),
        "the child is bounded by its parent's deadline"
    );
    assert!(!parent.is_cancelled());
    assert!(eventually(|| parent.is_cancelled() && child.is_cancelled()).await);
    let snapshot = session_a.get("child").await.unwrap().unwrap();
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Parent));
    assert_eq!(
        session_a.get("parent").await.unwrap().unwrap().cancel_cause,
        Some(CancelCause::Deadline)
    );
    assert!(!detached.is_cancelled());
    // A deadline already past cancels at the start; a queued task is reached too.
    let late = session_b
        .start(
            TaskStart::new()
                .task_id("late")
                .deadline_at(std::time::SystemTime::now() - Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert!(late.is_cancelled());
    session_a
        .reserve(
            TaskStart::new()
                .task_id("queued")
                .timeout(Duration::from_millis(100)),
            None,
        )
        .await
        .unwrap();
    let mut finished = false;
    for _ in 0..100 {
        finished = session_b.get("queued").await.unwrap().unwrap().finished;
        if finished {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(finished, "the deadline reached the queued task");
    drop((parent, child, detached, late));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclaimed_reservation_fails_after_its_claim_timeout_and_a_claim_disarms_it() {
    let server = RedisServer::start();
    let worker = server.worker("t17:", "a").await;
    let session = worker.session(Some("s"), config()).await.unwrap();
    session
        .reserve(
            TaskStart::new().task_id("forgotten"),
            Some(Duration::from_millis(150)),
        )
        .await
        .unwrap();
    session
        .reserve(
            TaskStart::new().task_id("taken"),
            Some(Duration::from_millis(150)),
        )
        .await
        .unwrap();
    let mut taken = session.claim("taken").await.unwrap();
    let forgotten =
        tokio::time::timeout(Duration::from_secs(5), session.wait_finished("forgotten"))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(forgotten.status, SubagentStatus::Failed);
    assert_eq!(
        forgotten.error.as_deref(),
        Some(subagent_tracker::claim_timeout_error(Duration::from_millis(150)).as_str())
    );
    assert!(matches!(
        session.claim("forgotten").await,
        Err(RedisTrackerError::Tracker(TrackerError::NotClaimable {
            problem: ClaimProblem::Ended(SubagentStatus::Failed),
            ..
        }))
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        session.get("taken").await.unwrap().unwrap().status,
        SubagentStatus::Running
    );
    assert!(taken.complete(None).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_redis_restart_every_worker_reconciles_and_no_cancel_is_lost() {
    let directory =
        std::env::temp_dir().join(format!("subagent-tracker-aof-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let mut server = RedisServer::start_with_aof(&directory);
    let runner = server.worker("t18:", "runner").await;
    let stopper = server.worker("t18:", "stopper").await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let first = session
        .start(TaskStart::new().task_id("first"))
        .await
        .unwrap();
    let second = session
        .start(TaskStart::new().task_id("second"))
        .await
        .unwrap();
    server.restart();
    // The sessions survived; a cancel made right after the restart, while the runner's subscription may still
    // be down, reaches it by the reconcile that follows its resubscription.
    let elsewhere = stopper.get_session("s").await.ok().flatten();
    let elsewhere = match elsewhere {
        Some(elsewhere) => elsewhere,
        // The first call after a restart may find the old connection dead; the next one reconnects.
        None => stopper.get_session("s").await.unwrap().unwrap(),
    };
    let mut cancelled = elsewhere.cancel("first", Some("after restart")).await;
    if cancelled.is_err() {
        cancelled = elsewhere.cancel("first", Some("after restart")).await;
    }
    assert!(cancelled.unwrap());
    assert!(eventually(|| first.is_cancelled()).await);
    assert_eq!(first.token().reason().as_deref(), Some("after restart"));
    // And a push after the listener is back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(elsewhere.cancel("second", None).await.unwrap());
    assert!(eventually(|| second.is_cancelled()).await);
    drop((first, second, server));
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_linked_to_a_local_token_is_cancelled_in_every_worker_when_it_fires() {
    let server = RedisServer::start();
    let api = server.worker("t19:", "api").await;
    let runner = server.worker("t19:", "runner").await;
    // The API server's request, in memory; the job it starts, in Redis, run by another worker.
    let requests: subagent_tracker::InMemorySubagentTaskTracker =
        subagent_tracker::InMemorySubagentTaskTracker::new();
    let request = requests.start(TaskStart::new().task_id("request")).unwrap();
    let queue = api.session(Some("s"), config()).await.unwrap();
    queue
        .reserve(
            TaskStart::new().task_id("job").linked(request.token()),
            None,
        )
        .await
        .unwrap();
    let job = runner
        .session(Some("s"), config())
        .await
        .unwrap()
        .claim("job")
        .await
        .unwrap();
    assert!(requests.cancel("request", Some("client went away")));
    assert!(eventually(|| job.is_cancelled()).await);
    let snapshot = queue.get("job").await.unwrap().unwrap();
    assert_eq!(snapshot.cancel_cause, Some(CancelCause::Linked));
    assert_eq!(snapshot.cancel_reason.as_deref(), Some("client went away"));
    // A token that has already fired cancels at the start.
    let late = queue
        .start(TaskStart::new().task_id("late").linked(request.token()))
        .await
        .unwrap();
    assert!(late.is_cancelled());
    drop((request, job, late));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_removed_once_its_tasks_are_finished() {
    let server = RedisServer::start();
    let options = RedisOptions::default()
        .with_key_prefix("t20:")
        .with_lease(Duration::from_millis(150))
        .with_session_ttl(Duration::from_millis(200));
    let worker = RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap();
    let idle = worker.session(Some("idle"), config()).await.unwrap();
    let busy = worker.session(Some("busy"), config()).await.unwrap();
    let mut done = idle
        .start(TaskStart::new().task_id("done").metadata("{}".to_owned()))
        .await
        .unwrap();
    assert!(done.progress("working").await.unwrap());
    assert!(done.complete(Some("\"result\"")).await.unwrap());
    let running = busy
        .start(TaskStart::new().task_id("running"))
        .await
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let mut removed = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("t20:v2:{s:idle}*")
            .query_async(&mut admin)
            .await
            .unwrap();
        if keys.is_empty() {
            removed = true;
            break;
        }
    }
    assert!(removed, "every key of the idle session is gone");
    assert!(worker.get_session("idle").await.unwrap().is_none());
    assert_eq!(
        worker.sessions().await.unwrap(),
        ["busy"],
        "a session with a running task stays"
    );
    assert!(!running.is_cancelled());
    // The swept incarnation has ended for whoever still holds it; the id opens a new one.
    assert!(matches!(
        idle.start(TaskStart::new().task_id("again")).await,
        Err(RedisTrackerError::Tracker(
            TrackerError::SessionClosed { .. }
        ))
    ));
    let idle = worker.session(Some("idle"), config()).await.unwrap();
    let again = idle.start(TaskStart::new().task_id("again")).await.unwrap();
    assert_eq!(worker.sessions().await.unwrap(), ["busy", "idle"]);
    drop((again, running));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_and_reasons_with_separators_reach_the_runner_by_the_push() {
    let server = RedisServer::start();
    let runner = server.worker("t21:", "runner").await;
    let stopper = server.worker("t21:", "stopper").await;
    let session = runner.session(Some("s\t1:2"), config()).await.unwrap();
    let handle = session
        .start(TaskStart::new().task_id("job\t3:4{x}"))
        .await
        .unwrap();
    let elsewhere = stopper.get_session("s\t1:2").await.unwrap().unwrap();
    let sent = Instant::now();
    assert!(elsewhere
        .cancel("job\t3:4{x}", Some("reason\twith:colons"))
        .await
        .unwrap());
    assert!(eventually(|| handle.is_cancelled()).await);
    assert!(sent.elapsed() < Duration::from_millis(150), "by the push");
    assert_eq!(
        handle.token().reason().as_deref(),
        Some("reason\twith:colons")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_is_recorded_for_the_current_run_only() {
    let server = RedisServer::start();
    let worker = server.worker("t30:", "a").await;
    let session = worker.session(Some("s"), config()).await.unwrap();
    let mut first = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    assert!(session.cancel("job", None).await.unwrap());
    assert!(first.record_escalation().await.unwrap());
    first.stopped(None).await.unwrap();
    let snapshot = session.get("job").await.unwrap().unwrap();
    assert!(snapshot.escalated && snapshot.status == SubagentStatus::Cancelled);
    // A restarted id is a new run: the old handle's escalation no longer touches it.
    let mut second = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    assert!(!first.record_escalation().await.unwrap());
    assert!(!session.get("job").await.unwrap().unwrap().escalated);
    assert!(second.complete(None).await.unwrap());
}

/// A pushed cancel carries each task's own reason and origin: a cascade names its root, a session cancel names
/// each task itself (the message's fields are framed once per root and cause, never shared across those).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_cancels_carry_each_task_s_reason_and_origin() {
    let server = RedisServer::start();
    let a = server.worker("t31:", "a").await;
    let b = server.worker("t31:", "b").await;
    let session_a = a.session(Some("s"), config()).await.unwrap();
    let session_b = b.session(Some("s"), config()).await.unwrap();
    let mut roots = Vec::new();
    let mut children = Vec::new();
    for root in ["r1", "r2"] {
        roots.push(
            session_a
                .start(TaskStart::new().task_id(root))
                .await
                .unwrap(),
        );
        for index in 0..3 {
            let child = TaskStart::new()
                .task_id(format!("{root}-{index}"))
                .parent_id(root);
            children.push(session_b.start(child).await.unwrap());
        }
    }
    let loose = [
        session_b
            .start(TaskStart::new().task_id("loose-1"))
            .await
            .unwrap(),
        session_b
            .start(TaskStart::new().task_id("loose-2"))
            .await
            .unwrap(),
    ];
    assert!(session_a.cancel("r1", Some("r1 reason")).await.unwrap());
    assert!(session_a.cancel("r2", Some("r2 reason")).await.unwrap());
    assert_eq!(session_a.cancel_all(Some("everything")).await.unwrap(), 2);
    assert!(
        eventually(|| children
            .iter()
            .chain(&loose)
            .all(subagent_tracker_redis::RedisTaskHandle::is_cancelled))
        .await
    );
    for child in &children {
        let root = &child.task_id()[..2];
        let token = child.token();
        assert_eq!(token.origin().as_deref(), Some(root));
        assert_eq!(
            token.reason().as_deref(),
            Some(format!("{root} reason").as_str())
        );
    }
    for handle in &loose {
        assert_eq!(handle.token().origin().as_deref(), Some(handle.task_id()));
        assert_eq!(handle.token().reason().as_deref(), Some("everything"));
    }
    drop((roots, children, loose));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_merge_unfinished_and_finished_runs_in_start_order() {
    // The store lists retained tasks from two indexes (the live runs, the finished list); a restart leaves a stale
    // finished entry behind, and a cancelled task whose runner still runs is in neither pending nor finished.
    let server = RedisServer::start();
    let worker = server.worker("t20:", "w").await;
    let session = worker.session(Some("s"), config()).await.unwrap();
    let mut a = session.start(TaskStart::new().task_id("a")).await.unwrap();
    let mut b = session.start(TaskStart::new().task_id("b")).await.unwrap();
    let c = session.start(TaskStart::new().task_id("c")).await.unwrap();
    assert!(b.complete(None).await.unwrap());
    assert!(session.cancel("c", None).await.unwrap());
    let b_again = session.start(TaskStart::new().task_id("b")).await.unwrap();
    assert!(a.complete(None).await.unwrap());
    let d = session.start(TaskStart::new().task_id("d")).await.unwrap();
    let listed: Vec<(String, SubagentStatus, bool)> = session
        .tasks()
        .await
        .unwrap()
        .into_iter()
        .map(|task| (task.task_id.to_string(), task.status, task.finished))
        .collect();
    assert_eq!(
        listed,
        [
            ("a".to_owned(), SubagentStatus::Completed, true),
            ("c".to_owned(), SubagentStatus::Cancelled, false),
            ("b".to_owned(), SubagentStatus::Running, false),
            ("d".to_owned(), SubagentStatus::Running, false),
        ]
    );
    let pending: Vec<String> = session
        .pending()
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.task_id.to_string())
        .collect();
    assert_eq!(pending, ["b", "d"]);
    assert_eq!(
        session.cancel_all(None).await.unwrap(),
        2,
        "c was cancelled already"
    );
    assert!(session.pending().await.unwrap().is_empty());
    drop((c, b_again, d));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_too_short_to_act_on_are_refused_before_connecting() {
    // Port 1 has no server: a refusal that came after trying to connect would be `Unavailable`.
    let refused = RedisRegistry::connect(
        "redis://127.0.0.1:1/0",
        RedisOptions::default().with_lease(Duration::ZERO),
    )
    .await;
    assert!(
        matches!(&refused, Err(RedisTrackerError::InvalidOption(message)) if message.starts_with("lease must be at least")),
        "{:?}",
        refused.err()
    );
}

/// CONTRACT §4 (a token by id), across processes: a watcher's token of a task another worker runs fires by the
/// session's event stream, promptly, and never for a task that completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_by_id_in_another_worker_fires_promptly_and_never_for_an_end() {
    let server = RedisServer::start();
    let runner = server.worker("t-token:", "runner").await;
    let watcher = server.worker("t-token:", "watcher").await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    let mut handles = [
        session.start(TaskStart::new().task_id("a")).await.unwrap(),
        session.start(TaskStart::new().task_id("b")).await.unwrap(),
        session.start(TaskStart::new().task_id("c")).await.unwrap(),
    ];
    let elsewhere = watcher.get_session("s").await.unwrap().unwrap();
    let tokens = [
        elsewhere.token("a").await.unwrap(),
        elsewhere.token("b").await.unwrap(),
        elsewhere.token("c").await.unwrap(),
    ];
    let sent = Instant::now();
    assert!(session
        .cancel("a", Some("user pressed stop"))
        .await
        .unwrap());
    assert!(eventually(|| tokens[0].is_cancelled()).await);
    let latency = sent.elapsed();
    assert!(
        latency < Duration::from_secs(1),
        "the event stream fired it: {latency:?}"
    );
    assert_eq!(tokens[0].reason().as_deref(), Some("user pressed stop"));
    assert_eq!(tokens[0].origin().as_deref(), Some("a"));
    assert!(handles[1].complete(Some("\"ok\"")).await.unwrap());
    assert!(session.cancel("c", None).await.unwrap());
    assert!(eventually(|| tokens[2].is_cancelled()).await);
    assert!(
        !tokens[1].is_cancelled(),
        "a completed task's token never fires"
    );
    // The same task asked again gives a token of the same run, already fired.
    assert!(elsewhere.token("c").await.unwrap().is_cancelled());
    drop(handles);
}

/// A cascade that reaches several runs of one process arrives in one message, and its cancels apply together:
/// when the parent's cancel callback runs, its child's token has fired too (an orchestrator torn down by its own
/// cancel finds its subagents cancelled with the same reason, never stopped by the teardown alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_fires_every_token_of_a_process_before_any_callback_runs() {
    let server = RedisServer::start();
    let runner = server.worker("t40:", "runner").await;
    let stopper = server.worker("t40:", "stopper").await;
    let session = runner.session(Some("s"), config()).await.unwrap();
    for round in 0..20 {
        let (parent_id, child_id) = (format!("parent-{round}"), format!("child-{round}"));
        let parent = session
            .start(TaskStart::new().task_id(&*parent_id))
            .await
            .unwrap();
        let child = session
            .start(TaskStart::new().task_id(&*child_id).parent_id(&*parent_id))
            .await
            .unwrap();
        let child_token = child.token();
        let (seen, saw) = std::sync::mpsc::channel();
        let _registration = parent.token().on_cancel(move || {
            let _ = seen.send((child_token.is_cancelled(), child_token.reason()));
        });
        let elsewhere = stopper.get_session("s").await.unwrap().unwrap();
        assert!(elsewhere
            .cancel(&parent_id, Some("stop the tree"))
            .await
            .unwrap());
        let (child_fired, reason) = saw.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(child_fired, "round {round}: the child's token fired first");
        assert_eq!(reason.as_deref(), Some("stop the tree"));
    }
}
