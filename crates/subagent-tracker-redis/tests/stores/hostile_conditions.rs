//! The Redis store under attack: one regression test per defect a hostile run found, each failing before its
//! fix, against a real `redis-server` (CONTRACT §§19-21). The Python suite (`tests/stores/test_redis_hostile_conditions.py`)
//! covers the same defects with real processes killed and stopped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{eventually, RedisServer};
use subagent_tracker::{SubagentStatus, TaskStart, TrackerConfig, TrackerError};
use subagent_tracker_redis::{
    RedisOptions, RedisRegistry, RedisSession, RedisTrackerError, SESSION_LOST_REASON,
    WORKER_LOST_ERROR,
};

fn config() -> TrackerConfig {
    TrackerConfig::default()
}

fn options(prefix: &str) -> RedisOptions {
    RedisOptions::default()
        .with_key_prefix(prefix)
        .with_reconcile_interval(Duration::from_millis(50))
        .with_timeout(Duration::from_millis(500))
}

async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A worker that sweeps sessions idle for `ttl`, with a round every third of `lease`.
async fn sweeping_worker(
    server: &RedisServer,
    prefix: &str,
    ttl: Duration,
    lease: Duration,
) -> RedisRegistry {
    let options = options(prefix).with_session_ttl(ttl).with_lease(lease);
    RedisRegistry::connect(&server.url(), options)
        .await
        .unwrap()
}

/// Waits until no key matches `pattern`, for at most `within`.
async fn wait_until_no_key_matches(
    admin: &mut redis::aio::MultiplexedConnection,
    pattern: &str,
    within: Duration,
) {
    let began = Instant::now();
    loop {
        let left: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(admin)
            .await
            .unwrap();
        if left.is_empty() {
            return;
        }
        assert!(
            began.elapsed() < within,
            "{} keys match {pattern}",
            left.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is_closed<T>(outcome: &Result<T, RedisTrackerError>) -> bool {
    matches!(
        outcome,
        Err(RedisTrackerError::Tracker(
            TrackerError::SessionClosed { .. }
        ))
    )
}

/// Defect 1: keys were `prefix{session}:t:<task>`, so in session `s` the task `x}:t:victim` was task `victim` of
/// session `s}:t:x`. Every cancel here names its own target as its reason: one that reached another task
/// would show there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_ids_in_either_position_never_reach_another_session() {
    let server = RedisServer::start();
    let worker = RedisRegistry::connect(&server.url(), options("a1:"))
        .await
        .unwrap();
    let ids = [
        "s",
        "s}:t:x",
        "x}:t:victim",
        "victim",
        "x}:session",
        "{",
        "}",
        "%7D",
        "%",
    ];
    let mut handles = Vec::new();
    let mut sessions = Vec::new();
    for session_id in ids {
        let session = worker.session(Some(session_id), config()).await.unwrap();
        for task_id in ids {
            let handle = session
                .start(TaskStart::new().task_id(task_id))
                .await
                .unwrap();
            handles.push((session_id, task_id, handle));
        }
        sessions.push(session);
    }
    for (session, session_id) in sessions.iter().zip(ids) {
        for task_id in ids {
            let reason = format!("{session_id}|{task_id}");
            assert!(session.cancel(task_id, Some(&reason)).await.unwrap());
        }
        let mut listed: Vec<String> = session
            .tasks()
            .await
            .unwrap()
            .iter()
            .map(|task| task.task_id.to_string())
            .collect();
        listed.sort();
        let mut expected: Vec<&str> = ids.to_vec();
        expected.sort_unstable();
        assert_eq!(listed, expected);
    }
    for (session_id, task_id, handle) in &handles {
        assert!(eventually(|| handle.is_cancelled()).await);
        assert_eq!(
            handle.token().reason().as_deref(),
            Some(format!("{session_id}|{task_id}").as_str())
        );
    }
}

/// Defect 6: run numbers restarted with a session's keys, so an old runner ended the new run of a reopened id,
/// and an object of the closed session started tasks in the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_never_matches_a_run_or_an_object_of_the_old_one() {
    let server = RedisServer::start();
    let first = RedisRegistry::connect(&server.url(), options("a2:"))
        .await
        .unwrap();
    let second = RedisRegistry::connect(&server.url(), options("a2:"))
        .await
        .unwrap();
    let old = first.session(Some("s"), config()).await.unwrap();
    let mut old_runner = old.start(TaskStart::new().task_id("t")).await.unwrap();
    assert_eq!(old.close(Some("done")).await.unwrap(), 1);
    assert!(!old.end("t", Err("ended by id")).await.unwrap());
    // Until the id is opened again, the closed incarnation's keys exist, and its queries answer.
    assert!(old.get("t").await.unwrap().unwrap().finished);
    let new = second.session(Some("s"), config()).await.unwrap();
    let mut new_runner = new.start(TaskStart::new().task_id("t")).await.unwrap();
    assert!(
        new_runner.run().parse::<u64>().unwrap() > old_runner.run().parse::<u64>().unwrap(),
        "a new incarnation counts on from past the old one"
    );
    assert!(!old_runner.complete(Some("\"stale\"")).await.unwrap());
    assert!(new_runner.complete(Some("\"fresh\"")).await.unwrap());
    assert!(is_closed(
        &old.start(TaskStart::new().task_id("late")).await
    ));
    assert!(is_closed(&old.cancel("t", None).await));
    assert!(is_closed(&old.tasks().await));
    assert!(is_closed(&old.get("t").await));
    let old_again = first.session(Some("s"), config()).await.unwrap();
    assert!(
        !old_again.same_session(&old),
        "the registry hands out the new incarnation"
    );
    assert_eq!(
        old_again.get("t").await.unwrap().unwrap().result.as_deref(),
        Some("\"fresh\"")
    );
}

/// Defect 6, after a server that restarted empty: the old runner's run number is never reused, so a cancel of
/// the new run does not fire it, and an event reader of the old incarnation learns that it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_never_fires_an_old_runner_s_token() {
    let mut server = RedisServer::start();
    let old_worker = RedisRegistry::connect(&server.url(), options("a3:"))
        .await
        .unwrap();
    let old = old_worker.session(Some("s"), config()).await.unwrap();
    let old_runner = old.start(TaskStart::new().task_id("t")).await.unwrap();
    let mut old_events = old.subscribe().await.unwrap();
    server.restart();
    let new_worker = RedisRegistry::connect(&server.url(), options("a3:"))
        .await
        .unwrap();
    let new = new_worker.session(Some("s"), config()).await.unwrap();
    let new_runner = new.start(TaskStart::new().task_id("t")).await.unwrap();
    assert!(new.cancel("t", Some("the new run")).await.unwrap());
    assert!(eventually(|| new_runner.is_cancelled()).await);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The old runner may stop, but only because its own session was lost with the restart.
    assert!(
        [None, Some(SESSION_LOST_REASON)].contains(&old_runner.token().reason().as_deref()),
        "the new run's cancel never reaches the old runner"
    );
    let mut ended = false;
    for _ in 0..10 {
        match tokio::time::timeout(Duration::from_secs(5), old_events.next()).await {
            Ok(Err(RedisTrackerError::Tracker(TrackerError::SessionClosed { .. }))) => {
                ended = true;
                break;
            }
            Ok(Err(RedisTrackerError::Unavailable { .. })) => continue,
            other => panic!("the old reader read {other:?}"),
        }
    }
    assert!(ended, "the old incarnation's reader learns that it ended");
}

/// Defect 3: the reaper read a field `HMGET` never returned, so it failed a run that a worker that came back
/// began after its lease had expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_judges_a_run_by_when_it_began() {
    let server = RedisServer::start();
    let worker = RedisRegistry::connect(&server.url(), options("a4:"))
        .await
        .unwrap();
    let session = worker.session(Some("s"), config()).await.unwrap();
    let mut handle = session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap();
    let mut admin = admin(&server).await;
    let fields: Vec<Option<String>> = redis::cmd("HMGET")
        .arg("a4:v2:{s:s}:t:job")
        .arg(&["worker", "started_at"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let process = fields[0].clone().unwrap();
    let started_ms = (fields[1].as_ref().unwrap().parse::<f64>().unwrap() * 1000.0) as i64;
    let reap = |expired_at: i64| {
        let mut command = redis::cmd("FCALL");
        command
            .arg("stv2_reap")
            .arg(1)
            .arg("a4:v2:{s:s}:session")
            .arg(&process)
            .arg(WORKER_LOST_ERROR)
            .arg(expired_at);
        command
    };
    let (reaped, _, _): (i64, String, String) = reap(started_ms - 1000)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        reaped, 0,
        "a run begun after the expiry is not the lost one's"
    );
    assert!(handle.complete(None).await.unwrap());
    let mut late = session
        .start(TaskStart::new().task_id("late"))
        .await
        .unwrap();
    let (reaped, _, _): (i64, String, String) = reap(started_ms + 60_000)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(reaped, 1);
    let snapshot = session.get("late").await.unwrap().unwrap();
    assert_eq!(snapshot.error.as_deref(), Some(WORKER_LOST_ERROR));
    assert!(!late.complete(None).await.unwrap());
}

/// The reaper goes through a session of many runs in bounded calls: at most 32 runs ended per call, from a
/// cursor, until every run of the lost process is ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_goes_through_many_runs_in_bounded_calls() {
    let server = RedisServer::start();
    let worker = RedisRegistry::connect(&server.url(), options("a9:"))
        .await
        .unwrap();
    let session = worker.session(Some("s"), config()).await.unwrap();
    let mut handles = Vec::new();
    for first in (0..300).step_by(50) {
        let batch = (first..first + 50)
            .map(|index| TaskStart::new().task_id(format!("t{index}")))
            .collect();
        handles.extend(session.start_batch(batch).await.unwrap());
    }
    let mut admin = admin(&server).await;
    let process: String = redis::cmd("HGET")
        .arg("a9:v2:{s:s}:t:t0")
        .arg("worker")
        .query_async(&mut admin)
        .await
        .unwrap();
    let far_future = i64::MAX / 4;
    let (mut cursor, mut ended, mut calls) = (String::new(), 0, 0);
    loop {
        let (reaped, next, _): (i64, String, String) = redis::cmd("FCALL")
            .arg("stv2_reap")
            .arg(1)
            .arg("a9:v2:{s:s}:session")
            .arg(&process)
            .arg(WORKER_LOST_ERROR)
            .arg(far_future)
            .arg(&cursor)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(reaped <= 32, "{reaped} runs ended in one call");
        ended += reaped;
        calls += 1;
        if next.is_empty() {
            break;
        }
        cursor = next;
    }
    assert_eq!(ended, 300);
    assert!(calls >= 300 / 32, "{calls} calls");
    assert!(session
        .tasks()
        .await
        .unwrap()
        .iter()
        .all(|task| task.error.as_deref() == Some(WORKER_LOST_ERROR)));
    drop(handles);
}

/// Defect 4: two processes given one worker id shared a lease and a running set, and each failed the other's
/// runs as orphans (or never reaped them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_registries_with_one_worker_id_keep_their_own_runs() {
    let server = RedisServer::start();
    let with_id = || {
        options("a5:")
            .with_worker_id("host")
            .with_timeout(Duration::from_millis(50))
            .with_lease(Duration::from_millis(300))
    };
    let first = RedisRegistry::connect(&server.url(), with_id())
        .await
        .unwrap();
    let second = RedisRegistry::connect(&server.url(), with_id())
        .await
        .unwrap();
    let first_session = first.session(Some("s"), config()).await.unwrap();
    let second_session = second.session(Some("s"), config()).await.unwrap();
    let first_job = first_session
        .start(TaskStart::new().task_id("first-job"))
        .await
        .unwrap();
    let mut second_job = second_session
        .start(TaskStart::new().task_id("second-job"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    for task_id in ["first-job", "second-job"] {
        let snapshot = second_session.get(task_id).await.unwrap().unwrap();
        assert_eq!(snapshot.status, SubagentStatus::Running, "{task_id}");
        assert_eq!(snapshot.worker.as_deref(), Some("host"));
    }
    assert!(second_session
        .cancel("first-job", Some("this one"))
        .await
        .unwrap());
    assert!(eventually(|| first_job.is_cancelled()).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!second_job.is_cancelled());
    assert!(second_job.complete(None).await.unwrap());
}

/// Connects a worker under `options` and starts task `job` in session `s`: the handle keeps the worker alive.
async fn start_job(url: &str, options: RedisOptions) -> subagent_tracker_redis::RedisTaskHandle {
    let worker = RedisRegistry::connect(url, options).await.unwrap();
    let session = worker.session(Some("s"), config()).await.unwrap();
    session
        .start(TaskStart::new().task_id("job"))
        .await
        .unwrap()
}

/// Runs `work` as a worker process that then dies: on a runtime of its own, which stops for good, so nothing of
/// the worker ever runs again (its lease is never renewed) and what it left is never dropped.
fn run_then_die<T>(work: impl std::future::Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(work);
    runtime.shutdown_background();
    outcome
}

/// Starts a worker under `options` and waits for task `job` of session `s`, whose worker died, to fail as lost:
/// within `within` of this worker being alive.
fn assert_reaped_within(url: &str, options: RedisOptions, within: Duration) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let survivor = RedisRegistry::connect(url, options).await.unwrap();
        let session = survivor.get_session("s").await.unwrap().unwrap();
        let began = Instant::now();
        loop {
            let snapshot = session.get("job").await.unwrap().unwrap();
            if snapshot.finished {
                assert_eq!(snapshot.status, SubagentStatus::Failed);
                assert_eq!(snapshot.error.as_deref(), Some(WORKER_LOST_ERROR));
                return;
            }
            assert!(
                began.elapsed() < within,
                "the dead worker's task ended in time"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// Defect 2: what a dead worker announced expired after ten leases, so after a longer gap with no live worker
/// its tasks stayed running for good.
#[test]
fn a_dead_worker_s_tasks_end_after_a_gap_of_more_than_ten_leases() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(150);
    let url = server.url();
    run_then_die(async {
        let handle = start_job(&url, options("a6:").with_lease(lease)).await;
        // It works for a while (renewing its lease, and what it announced with it), then dies: never
        // ended, never dropped.
        tokio::time::sleep(lease * 2).await;
        std::mem::forget(handle);
    });
    std::thread::sleep(lease * 12);
    // Within about a lease of a worker being alive again (the defect was: never), with room for a loaded CI.
    assert_reaped_within(&url, options("a6:").with_lease(lease), lease * 6);
}

/// Defect 7: the sweep took 100 sessions a round, and sessions kept by an unfinished task kept their old score,
/// came first in every round, and starved the idle ones behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_sessions_never_starve_the_sweep_of_idle_ones() {
    let server = RedisServer::start();
    let worker = sweeping_worker(
        &server,
        "a7:",
        Duration::from_millis(1000),
        Duration::from_millis(600),
    )
    .await;
    let mut busy = Vec::new();
    for index in 0..600 {
        let session = worker
            .session(Some(&format!("busy-{index}")), config())
            .await
            .unwrap();
        busy.push(session.start(TaskStart::new()).await.unwrap());
    }
    // Every busy session has been looked at: it cannot go, and waits for the next look.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for index in 0..50 {
        let session = worker
            .session(Some(&format!("idle-{index}")), config())
            .await
            .unwrap();
        session.close(None).await.unwrap();
    }
    let mut admin = admin(&server).await;
    wait_until_no_key_matches(&mut admin, "a7:*idle-*", Duration::from_secs(4)).await;
    assert_eq!(worker.sessions().await.unwrap().len(), 600);
    drop(busy);
}

/// Defect 8: an idle worker kept a mirror and an announcement of every session it ever touched, and called the
/// server once per such session on every reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_lets_go_of_every_session_it_touched() {
    let server = RedisServer::start();
    let worker = RedisRegistry::connect(&server.url(), options("a8:"))
        .await
        .unwrap();
    for index in 0..300 {
        let session: RedisSession = worker
            .session(Some(&format!("touched-{index}")), config())
            .await
            .unwrap();
        let mut handle = session.start(TaskStart::new()).await.unwrap();
        handle.complete(None).await.unwrap();
    }
    assert!(worker.sessions_in_use() >= 300);
    let began = Instant::now();
    while worker.sessions_in_use() > 0 {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{} sessions still kept",
            worker.sessions_in_use()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And every announcement is withdrawn.
    let mut admin = admin(&server).await;
    let workers: Vec<String> = redis::cmd("ZRANGE")
        .arg("a8:v2:{registry}:workers")
        .arg(0)
        .arg(-1)
        .query_async(&mut admin)
        .await
        .unwrap();
    let announced: i64 = redis::cmd("ZCARD")
        .arg(format!("a8:v2:{{registry}}:w:{}", workers[0]))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(announced, 0);
}

/// Defect 10: configuration mistakes were `Unavailable` (retried forever) or a protocol error naming no
/// password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_mistakes_are_invalid_options_that_say_what_to_do() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let port = server.port;
    let cases = [
        (format!("redis://127.0.0.1:{port}/0"), "password"),
        (format!("redis://:wrong@127.0.0.1:{port}/0"), "password"),
        (
            format!("redis://:s3cret@127.0.0.1:{port}/99"),
            "no such database",
        ),
        ("http://127.0.0.1:6379/0".to_owned(), "not a Redis URL"),
        ("/tmp/redis.sock".to_owned(), "not a Redis URL"),
    ];
    for (url, expected) in cases {
        match RedisRegistry::connect(&url, options("a9:")).await {
            Err(RedisTrackerError::InvalidOption(message)) => {
                assert!(message.contains(expected), "{url}: {message}");
                assert!(!message.contains("wrong"), "never the password: {message}");
            }
            Err(other) => panic!("{url}: {other}"),
            Ok(_) => panic!("{url}: connected"),
        }
    }
    let url = format!("redis://:s3cret@127.0.0.1:{port}/0");
    assert!(RedisRegistry::connect(&url, options("a9:")).await.is_ok());
}

/// A server that answers in another protocol (HTTP here) is one sentence, not the parser's dump of the bytes
/// it met, over several lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_speak_redis_is_one_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten().take(4) {
            let mut stream = stream;
            let _ = std::io::Write::write_all(
                &mut stream,
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n<html></html>\n",
            );
        }
    });
    match RedisRegistry::connect(&format!("redis://127.0.0.1:{port}/0"), options("http")).await {
        Err(RedisTrackerError::InvalidOption(message)) => {
            assert!(
                message.contains("does not speak Redis's protocol"),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("connected to an HTTP server"),
    }
}

/// Defects 11 and 12: every registry-wide key is checked before a prefix is taken, and a library of this
/// version's name with other code is never replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_reaper_key_and_another_build_of_the_functions_are_refused() {
    let server = RedisServer::start();
    let mut admin = admin(&server).await;
    let _: () = redis::cmd("SET")
        .arg("app:v2:{registry}:reaper")
        .arg("application data")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(matches!(
        RedisRegistry::connect(&server.url(), options("app:")).await,
        Err(RedisTrackerError::InvalidOption(message)) if message.contains("used by other data")
    ));
    // Our build, as a registry loads it, and another build of the same version made from it.
    RedisRegistry::connect(&server.url(), options("ours:"))
        .await
        .unwrap();
    let listed: Vec<Vec<redis::Value>> = redis::cmd("FUNCTION")
        .arg(&["LIST", "LIBRARYNAME", "subagent_tracker_v2", "WITHCODE"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let ours = listed[0]
        .windows(2)
        .find_map(|pair| match (&pair[0], &pair[1]) {
            (redis::Value::BulkString(name), code) if name == b"library_code" => {
                redis::from_redis_value_ref::<String>(code).ok()
            }
            _ => None,
        })
        .expect("the library's code");
    let other_build = format!("{ours}\n-- another build\n");
    // Loaded over ours, as another deployment of this version would have done.
    let _: String = redis::cmd("FUNCTION")
        .arg(&["LOAD", "REPLACE"])
        .arg(&other_build)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(matches!(
        RedisRegistry::connect(&server.url(), options("b:")).await,
        Err(RedisTrackerError::InvalidOption(message)) if message.contains("another build")
    ));
    let code: Arc<str> = {
        let listed: redis::Value = redis::cmd("FUNCTION")
            .arg(&["LIST", "WITHCODE"])
            .query_async(&mut admin)
            .await
            .unwrap();
        Arc::from(format!("{listed:?}"))
    };
    assert!(code.contains("another build"), "left as it was");
}

// --- Found by a review of the fixes above.

/// A worker that a reaper forgot (its lease and announcements deleted) while it still runs a task announces the
/// session again on its next lease tick, so that its later death is still found.
#[test]
fn a_worker_forgotten_by_a_reaper_announces_its_sessions_again() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let url = server.url();
    run_then_die(async {
        let handle = start_job(&url, options("b1:").with_lease(lease)).await;
        let mut admin = admin(&server).await;
        let workers: Vec<String> = redis::cmd("ZRANGE")
            .arg("b1:v2:{registry}:workers")
            .arg(0)
            .arg(-1)
            .query_async(&mut admin)
            .await
            .unwrap();
        let announced_key = format!("b1:v2:{{registry}}:w:{}", workers[0]);
        // What a reaper's `stv2_forget` does.
        let _: () = redis::cmd("DEL")
            .arg(&announced_key)
            .query_async(&mut admin)
            .await
            .unwrap();
        let _: () = redis::cmd("ZREM")
            .arg("b1:v2:{registry}:workers")
            .arg(&workers[0])
            .query_async(&mut admin)
            .await
            .unwrap();
        let began = Instant::now();
        loop {
            let announced: Vec<String> = redis::cmd("ZRANGE")
                .arg(&announced_key)
                .arg(0)
                .arg(-1)
                .query_async(&mut admin)
                .await
                .unwrap();
            if announced == ["s"] {
                break;
            }
            assert!(
                began.elapsed() < lease * 3,
                "announced again within a lease"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::mem::forget(handle);
    });
    assert_reaped_within(&url, options("b1:").with_lease(lease), lease * 10);
}

/// A reservation whose caller stopped waiting while Redis held the write still fails on its claim timeout: the
/// dropped call leaves its timer for the reconcile to put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_whose_caller_stopped_waiting_keeps_its_claim_timeout() {
    let server = RedisServer::start();
    let worker = RedisRegistry::connect(&server.url(), options("b2:"))
        .await
        .unwrap();
    let session = worker.session(Some("s"), config()).await.unwrap();
    let mut admin = admin(&server).await;
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "400", "WRITE"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let abandoned = tokio::time::timeout(
        Duration::from_millis(100),
        session.reserve(
            TaskStart::new().task_id("queued"),
            Some(Duration::from_millis(300)),
        ),
    )
    .await;
    assert!(abandoned.is_err(), "the caller stopped waiting");
    let began = Instant::now();
    loop {
        if let Some(snapshot) = session.get("queued").await.unwrap() {
            if snapshot.finished {
                assert_eq!(snapshot.status, SubagentStatus::Failed);
                break;
            }
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the claim timeout fired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A retime that read a session before a timer was scheduled in it leaves the session's entry in the index of
/// timers, so that the new timer is fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retime_never_drops_a_timer_scheduled_after_its_look() {
    let server = RedisServer::start();
    // Connected once, to load the functions, then gone: no worker fires timers behind the test's back.
    drop(
        RedisRegistry::connect(&server.url(), options("b3:"))
            .await
            .unwrap(),
    );
    let mut admin = admin(&server).await;
    let keys = ["b3:v2:{registry}:timers", "b3:v2:{registry}:timer-changes"];
    let call = |name: &str, args: &[&str]| {
        let mut command = redis::cmd("FCALL");
        command.arg(name).arg(2).arg(&keys).arg(args);
        command
    };
    let _: i64 = call("stv2_schedule", &["s", "1"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let due: Vec<String> = call("stv2_due", &[]).query_async(&mut admin).await.unwrap();
    assert_eq!(due, ["s", "1"]);
    // Between the fire (which found no timer left) and the retime, a start schedules one.
    let _: i64 = call("stv2_schedule", &["s", "99999999999999"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let retimed: i64 = call("stv2_retime", &["s", "-1", "1"])
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(retimed, 0);
    let entry: Option<f64> = redis::cmd("ZSCORE")
        .arg(keys[0])
        .arg("s")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        entry.is_some(),
        "the entry stays, due: the next look fires it"
    );
}

/// A sweep never takes out of the index a session listed again since its look (its id names a new session),
/// and one session whose sweep fails stops none of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_leaves_a_relisted_session_indexed_and_survives_a_broken_one() {
    let server = RedisServer::start();
    let worker = sweeping_worker(
        &server,
        "b4:",
        Duration::from_millis(200),
        Duration::from_millis(300),
    )
    .await;
    let mut admin = admin(&server).await;
    let dropped: i64 = redis::cmd("FCALL")
        .arg("stv2_drop_stale")
        .arg(1)
        .arg("b4:v2:{registry}:sessions")
        .arg(&["60000", "fresh"])
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(dropped, 0);
    let fresh = worker.session(Some("fresh"), config()).await.unwrap();
    let dropped: i64 = redis::cmd("FCALL")
        .arg("stv2_drop_stale")
        .arg(1)
        .arg("b4:v2:{registry}:sessions")
        .arg(&["60000", "fresh"])
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(dropped, 0, "listed since the look: it stays");
    drop(fresh);
    for index in 0..20 {
        let session = worker
            .session(Some(&format!("closed-{index}")), config())
            .await
            .unwrap();
        session.close(None).await.unwrap();
    }
    let broken = worker.session(Some("broken"), config()).await.unwrap();
    broken.close(None).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("b4:v2:{s:broken}:live")
        .arg("other data")
        .query_async(&mut admin)
        .await
        .unwrap();
    wait_until_no_key_matches(&mut admin, "b4:*closed-*", Duration::from_secs(4)).await;
}

/// A task group's rule set off by the reaper (a child of a structured parent lost with its worker fails, and
/// its siblings are cancelled) is a cascade like any other: over more tasks than one step, its remaining steps
/// are taken by a worker's timer loop, since no caller takes them. They used to be left in the session's keys
/// with nothing to look at them: the siblings past the first step ran on.
#[test]
fn a_group_rule_the_reaper_sets_off_reaches_every_sibling() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(150);
    let url = server.url();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (survivor, session, held) = runtime.block_on(async {
        let survivor = RedisRegistry::connect(&url, options("a10:").with_lease(lease))
            .await
            .unwrap();
        let session = survivor.session(Some("s"), config()).await.unwrap();
        let group = session
            .start(TaskStart::new().task_id("group").structured(true))
            .await
            .unwrap();
        let siblings = session
            .start_batch(
                (0..100)
                    .map(|index| {
                        TaskStart::new()
                            .task_id(format!("c{index}"))
                            .parent_id("group")
                    })
                    .collect(),
            )
            .await
            .unwrap();
        (survivor, session, (group, siblings))
    });
    run_then_die(async {
        let worker = RedisRegistry::connect(&url, options("a10:").with_lease(lease))
            .await
            .unwrap();
        let session = worker.session(Some("s"), config()).await.unwrap();
        let lost = session
            .start(TaskStart::new().task_id("lost").parent_id("group"))
            .await
            .unwrap();
        tokio::time::sleep(lease * 2).await;
        std::mem::forget(lost);
    });
    runtime.block_on(async {
        let siblings = &held.1;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !siblings
            .iter()
            .all(subagent_tracker_redis::RedisTaskHandle::is_cancelled)
        {
            assert!(
                Instant::now() < deadline,
                "every sibling's token fired: {} of {}",
                siblings
                    .iter()
                    .filter(|sibling| sibling.is_cancelled())
                    .count(),
                siblings.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lost = session.get("lost").await.unwrap().unwrap();
        assert_eq!(lost.error.as_deref(), Some(WORKER_LOST_ERROR));
        for index in [0, 99] {
            let sibling = session.get(&format!("c{index}")).await.unwrap().unwrap();
            assert_eq!(sibling.status, SubagentStatus::Cancelled);
        }
    });
    drop((held, session, survivor));
}
