//! Contract §3 and §20 on Redis: a cascade larger than one step proceeds in bounded steps, with the root cancelled
//! first, so that no child started meanwhile is left running; the cancel returns once every step is done, and a
//! walk whose canceller stops taking its steps is finished by a worker's timer loop.

use crate::common;
use std::time::{Duration, Instant};

use crate::common::{function_calls, RedisServer};
use subagent_tracker::{SubagentStatus, TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisSession, RedisTaskHandle};

/// The most tasks one step of a cascade reads (`WALK_STEP` in `lua/includes/cascade.lua`).
const WALK_STEP: usize = 32;

/// A tree under "root": `children` children, each with `grandchildren` of its own; their handles, kept (a handle
/// let go of fails its task).
async fn tree(
    session: &RedisSession,
    children: usize,
    grandchildren: usize,
) -> Vec<RedisTaskHandle> {
    let mut handles = vec![session
        .start(TaskStart::new().task_id("root"))
        .await
        .unwrap()];
    let mut starts: Vec<TaskStart<String>> = Vec::new();
    for child in 0..children {
        starts.push(
            TaskStart::new()
                .task_id(format!("c{child}"))
                .parent_id("root"),
        );
        for grandchild in 0..grandchildren {
            starts.push(
                TaskStart::new()
                    .task_id(format!("c{child}-{grandchild}"))
                    .parent_id(format!("c{child}")),
            );
        }
    }
    // In batches small enough for one call each; a batch may name a parent of an earlier batch.
    let mut batch = Vec::new();
    for start in starts {
        batch.push(start);
        if batch.len() == 50 {
            handles.extend(
                session
                    .start_batch(std::mem::take(&mut batch))
                    .await
                    .unwrap(),
            );
        }
    }
    if !batch.is_empty() {
        handles.extend(session.start_batch(batch).await.unwrap());
    }
    handles
}

fn admin(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Calls the server function `stv2_<name>` of session "s" under `prefix` directly, as a canceller that stops
/// after its first call would have.
fn session_function(
    admin: &mut redis::Connection,
    prefix: &str,
    name: &str,
    args: &[&str],
) -> Vec<String> {
    redis::cmd("FCALL")
        .arg(format!("stv2_{name}"))
        .arg(2)
        .arg(format!("{prefix}v2:{{s:s}}:session"))
        .arg(format!("{prefix}v2:{{s:s}}:guard"))
        .arg(args)
        .query::<Vec<redis::Value>>(admin)
        .unwrap()
        .into_iter()
        .map(|value| match value {
            redis::Value::Int(number) => number.to_string(),
            redis::Value::BulkString(bytes) => String::from_utf8(bytes).unwrap(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

async fn statuses(session: &RedisSession) -> Vec<(String, SubagentStatus)> {
    session
        .tasks()
        .await
        .unwrap()
        .into_iter()
        .map(|task| (task.task_id.to_string(), task.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_cascade_proceeds_in_steps_and_the_cancel_returns_once_it_is_done() {
    let server = RedisServer::start();
    let worker = server.worker("w1:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let handles = tree(&session, 40, 15).await;
    let size = handles.len();
    let mut admin = admin(&server);
    let before = function_calls(&server);
    assert!(session.cancel("root", Some("stop")).await.unwrap());
    let calls = function_calls(&server) - before;
    assert!(
        calls as usize >= size / WALK_STEP,
        "a cascade over {size} tasks took {calls} calls, of at most {WALK_STEP} tasks each"
    );
    // Done when the cancel returned: every task cancelled, each with one event.
    let now = statuses(&session).await;
    assert_eq!(now.len(), size);
    assert!(now
        .iter()
        .all(|(_, status)| *status == SubagentStatus::Cancelled));
    let events: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg("w1:v2:{s:s}:events")
        .arg("-")
        .arg("+")
        .query(&mut admin)
        .unwrap();
    let cancelled = events
        .iter()
        .filter(|(_, fields)| fields.windows(2).any(|pair| pair == ["kind", "cancelled"]))
        .count();
    assert_eq!(cancelled, size, "one cancelled event per task");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !handles.iter().all(RedisTaskHandle::is_cancelled) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        handles.iter().all(RedisTaskHandle::is_cancelled),
        "every runner's token fired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_started_while_a_cascade_is_under_way_is_never_left_running() {
    let server = RedisServer::start();
    let worker = server.worker("w2:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let _handles = tree(&session, 150, 1).await;
    let mut admin = admin(&server);
    // The canceller's first call only: the root and a step's worth are cancelled, the rest is a walk under way.
    let reply = session_function(
        &mut admin,
        "w2:",
        "cancel",
        &["", "root", "stop", "requested", "0", ""],
    );
    assert_eq!(reply[0], "1");
    let walk = reply[1].clone();
    assert!(!walk.is_empty(), "300 tasks take more than one step");
    let under_root = session
        .start(
            TaskStart::new()
                .task_id("late-under-root")
                .parent_id("root"),
        )
        .await
        .unwrap();
    assert!(
        under_root.is_cancelled(),
        "a child of a cancelled task starts cancelled"
    );
    let running = statuses(&session)
        .await
        .into_iter()
        .find(|(task_id, status)| task_id.starts_with('c') && *status == SubagentStatus::Running)
        .map(|(task_id, _)| task_id)
        .expect("a task the walk has yet to reach");
    let late = session
        .start(TaskStart::new().task_id("late").parent_id(running.as_str()))
        .await
        .unwrap();
    while session_function(&mut admin, "w2:", "walk", &["", &walk])[0] != "1" {}
    assert_eq!(
        session.get("late").await.unwrap().unwrap().status,
        SubagentStatus::Cancelled,
        "the walk reached the child started under {running} before the walk did"
    );
    assert!(statuses(&session)
        .await
        .iter()
        .all(|(_, status)| *status == SubagentStatus::Cancelled));
    drop(late);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_whose_canceller_stopped_is_finished_by_a_worker() {
    let server = RedisServer::start();
    let worker = server.worker("w3:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let _handles = tree(&session, 100, 2).await;
    let mut admin = admin(&server);
    let reply = session_function(
        &mut admin,
        "w3:",
        "cancel",
        &["", "root", "stop", "requested", "0", ""],
    );
    assert!(!reply[1].is_empty());
    // What the canceller registers before its next step, as `finish_walk` does.
    let _: i64 = redis::cmd("FCALL")
        .arg("stv2_schedule")
        .arg(3)
        .arg("w3:v2:{registry}:timers")
        .arg("w3:v2:{registry}:timer-changes")
        .arg("w3:v2:{registry}:guard")
        .arg("s")
        .arg(&reply[2])
        .query(&mut admin)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = statuses(&session).await;
        if now
            .iter()
            .all(|(_, status)| *status == SubagentStatus::Cancelled)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the walk was not finished: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let walks: usize = redis::cmd("SCARD")
        .arg("w3:v2:{s:s}:walks")
        .query(&mut admin)
        .unwrap();
    assert_eq!(walks, 0, "a finished walk leaves nothing behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_cancel_and_a_cancel_by_filter_go_through_many_tasks_in_steps() {
    let server = RedisServer::start();
    let worker = server.worker("w4:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    let mut handles = Vec::new();
    for first in (0..500).step_by(50) {
        let batch = (first..first + 50)
            .map(|index| {
                TaskStart::new()
                    .task_id(format!("t{index:03}"))
                    .agent(if index % 2 == 0 { "even" } else { "odd" })
            })
            .collect();
        handles.extend(session.start_batch(batch).await.unwrap());
    }
    let before = function_calls(&server);
    let moved = session
        .cancel_matching(&subagent_tracker::TaskFilter::new().agent("even"), None)
        .await
        .unwrap();
    assert!(
        function_calls(&server) - before >= 5,
        "500 tasks read in steps"
    );
    let expected: Vec<String> = (0..500)
        .step_by(2)
        .map(|index| format!("t{index:03}"))
        .collect();
    assert_eq!(
        moved.iter().map(ToString::to_string).collect::<Vec<_>>(),
        expected,
        "every match, in start order"
    );
    let before = function_calls(&server);
    assert_eq!(session.cancel_all(Some("all")).await.unwrap(), 250);
    assert!(
        function_calls(&server) - before >= 5,
        "500 tasks read in steps"
    );
    assert!(statuses(&session)
        .await
        .iter()
        .all(|(_, status)| *status == SubagentStatus::Cancelled));
}

/// Contract §7 while a cascade is under way: the finished runs it keeps past the bound (a step may have to pass
/// through them) are evicted once the cascade is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_in_steps_keeps_the_retention_bound_once_it_is_done() {
    let server = RedisServer::start();
    let worker = server.worker("w5:", "runner").await;
    let session = worker
        .session(
            Some("s"),
            TrackerConfig::default().with_max_finished_tasks(10),
        )
        .await
        .unwrap();
    let _root = session
        .start(TaskStart::new().task_id("root"))
        .await
        .unwrap();
    // Reservations under the root: each finishes as the cascade cancels it, far beyond the bound.
    for first in (0..200).step_by(50) {
        let batch = (first..first + 50)
            .map(|index| {
                (
                    TaskStart::new()
                        .task_id(format!("q{index}"))
                        .parent_id("root"),
                    None,
                )
            })
            .collect();
        session.reserve_batch(batch).await.unwrap();
    }
    assert!(session.cancel("root", Some("stop")).await.unwrap());
    let tasks = session.tasks().await.unwrap();
    let finished = tasks.iter().filter(|task| task.finished).count();
    assert_eq!(finished, 10, "the bound, once the cascade is done");
    let mut admin = admin(&server);
    let walks: usize = redis::cmd("SCARD")
        .arg("w5:v2:{s:s}:walks")
        .query(&mut admin)
        .unwrap();
    assert_eq!(walks, 0);
}

/// A cancel handler that holds its task "at work" until it is let go.
struct HeldCleanup(std::sync::mpsc::Receiver<()>);

impl subagent_tracker::OnCancel for HeldCleanup {
    fn on_cancel(self: Box<Self>) {
        self.on_cancel_with(subagent_tracker::HandlerDone::untracked());
    }

    fn on_cancel_with(self: Box<Self>, done: subagent_tracker::HandlerDone) {
        std::thread::spawn(move || {
            let _ = self.0.recv();
            done.finish();
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_wait_walks_a_large_tree_in_bounded_calls_and_waits_for_the_deepest_handler() {
    let server = RedisServer::start();
    let worker = server.worker("w2:", "runner").await;
    let session = worker
        .session(Some("s"), TrackerConfig::default())
        .await
        .unwrap();
    // More children than one scan of a children set reads, and more tasks than a step visits.
    let handles = tree(&session, 70, 3).await;
    let size = handles.len();
    let (release, held) = std::sync::mpsc::channel();
    let deepest = handles
        .iter()
        .find(|handle| handle.task_id() == "c69-2")
        .unwrap();
    deepest.token().on_cancel(HeldCleanup(held));
    let waited = {
        let session = session.clone();
        tokio::spawn(async move { session.cancel_and_wait("root", Some("stop")).await })
    };
    // Every runner ends as its token fires; the deepest task's handler holds on.
    for handle in handles {
        tokio::spawn(async move {
            handle.token().cancelled().await;
            drop(handle);
        });
    }
    // The other handlers are reported done as each finishes (one held handler holds up no other run's report),
    // and the walk reaches the deepest task, past several scans of the root's children set.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut at_work = None;
    while Instant::now() < deadline {
        at_work = session.cancel_work("root").await.unwrap();
        if matches!(&at_work, Some((true, ids)) if ids.len() == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (finished, at_work) = at_work.unwrap();
    assert!(finished, "the root's runner has ended");
    assert_eq!(
        at_work.iter().map(|id| &**id).collect::<Vec<_>>(),
        ["c69-2"]
    );
    assert!(
        !waited.is_finished(),
        "the wait goes on while a handler of the tree is at work"
    );
    common::log_every_call(&server);
    assert!(session.cancel_work("root").await.unwrap().is_some());
    assert!(
        common::calls_of(&server, "handling") >= size / 32,
        "a walk over {size} tasks takes calls of at most 32 items each"
    );
    release.send(()).unwrap();
    let snapshot = tokio::time::timeout(Duration::from_secs(5), waited)
        .await
        .expect("the wait ends once the handler is done")
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert_eq!(
        session
            .cancel_work("root")
            .await
            .unwrap()
            .map(|(_, ids)| ids),
        Some(Vec::new())
    );
}
