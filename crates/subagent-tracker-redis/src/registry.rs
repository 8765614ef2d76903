//! The registry of sessions kept in Redis, and the worker that keeps the tokens of its own runners in step with
//! Redis.
//!
//! Redis holds the truth. Each process mirrors the runs it executes in an in-memory tracker, so that a token's
//! `is_cancelled` stays a local read. A cancel reaches the mirror two ways, which both end in one local cancel:
//! a push on the worker's channel (prompt), and a reconcile of every run the worker holds, after each
//! (re)subscription and on a timer (nothing lost).
//!
//! Each worker holds a lease that it renews on the server's clock. One worker at a time (holding a lock that
//! expires) reaps the workers whose lease has passed: their running tasks fail and their cancelled tasks
//! finish. A worker that could not renew for a whole lease, by its own monotonic clock, fires the tokens of its
//! runs (cause `lease`): by then the others may have failed them.
//!
//! # Lock order
//!
//! The worker's `runs` lock is a leaf: no await, no other lock, and no tracker call happens under it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use subagent_tracker::{
    generate_id, validate_task_id, CancelCause, InMemoryRegistry, TrackerConfig,
};
use tokio::task::JoinHandle;

use crate::store::{self, Keys};
use crate::{RedisOptions, RedisSession, RedisTrackerError};

/// How many notifications for runs this worker does not know (yet) it keeps, for a start whose reply races
/// the cancel's notification.
const UNMATCHED_NOTIFICATIONS: usize = 1024;

/// The error of a task whose worker stopped renewing its lease.
pub const WORKER_LOST_ERROR: &str = "the worker running the task was lost (its lease expired)";

/// The error of a task whose start or claim took effect in Redis but whose runner never got its handle (the
/// reply was lost).
pub const ORPHANED_RUN_ERROR: &str =
    "the task's start took effect but its runner never got the handle (the reply was lost)";

/// The cancel reason of a run whose own worker could not renew its lease.
pub const LEASE_LOST_REASON: &str = "this worker lost its lease on the registry";

/// How often a worker looks for due timers (deadlines and claim timeouts) of any session: the precision with
/// which they fire.
const TIMER_TICK: Duration = Duration::from_millis(50);

/// How long the listener waits before it reconnects to a server that dropped it.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// Sessions kept in Redis, shared by every process that connects to the same server with the same prefix.
///
/// Each registry is a worker with an id: the tasks it starts or claims are its runs, and the cancels of those
/// runs reach its tokens wherever the cancel was made. Cheap to clone; the worker stops when the last clone is
/// dropped.
#[derive(Clone)]
pub struct RedisRegistry {
    worker: Arc<Worker>,
}

/// A run this worker executes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct RunKey {
    pub(crate) session_id: Arc<str>,
    pub(crate) task_id: Arc<str>,
    pub(crate) run: String,
}

pub(crate) struct Worker {
    pub(crate) id: Arc<str>,
    /// For the connections of their own that event subscriptions need (a blocking read holds its connection).
    pub(crate) client: redis::Client,
    pub(crate) keys: Keys,
    pub(crate) connection: ConnectionManager,
    pub(crate) options: RedisOptions,
    /// The in-memory mirrors of the sessions this worker runs tasks in.
    pub(crate) mirrors: InMemoryRegistry<String>,
    runs: Mutex<Runs>,
    /// The runtime the worker's background tasks (and the ends of dropped handles) run on.
    pub(crate) runtime: tokio::runtime::Handle,
    background: Mutex<Vec<JoinHandle<()>>>,
    /// The sessions this worker has announced it runs tasks in (so a reaper finds them).
    announced: Mutex<HashSet<Arc<str>>>,
    /// When the lease was last renewed, by this process's monotonic clock.
    renewed_at: Mutex<Instant>,
}

#[derive(Default)]
struct Runs {
    held: HashSet<RunKey>,
    /// Notifications that arrived before their run was registered, oldest first.
    unmatched: VecDeque<RunKey>,
}

impl RedisRegistry {
    /// Connects to the Redis at `url` (`redis://127.0.0.1:6379/0`), loads the server-side functions, and starts
    /// the worker: its notification listener and its reconcile timer, on the current tokio runtime.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`] when the server cannot be reached within the timeout;
    /// [`RedisTrackerError::InvalidOption`] for a key prefix with braces.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, RedisTrackerError> {
        if options.key_prefix.contains(['{', '}']) {
            // A session's hash tag is the first `{...}` of its keys: the prefix must not hold one.
            return Err(RedisTrackerError::InvalidOption(
                "key_prefix must not contain '{' or '}': the session's id is the keys' hash tag",
            ));
        }
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout))
            .set_number_of_retries(1);
        let mut connection = tokio::time::timeout(
            options.timeout,
            client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| timeout_error())??;
        store::load(&mut connection).await?;
        check_prefix_is_ours(&mut connection, &Keys::new(&options.key_prefix)).await?;
        let id: Arc<str> = Arc::from(options.worker_id.clone().unwrap_or_else(generate_id));
        validate_task_id("worker_id", &id)?;
        let worker = Arc::new(Worker {
            client: client.clone(),
            keys: Keys::new(&options.key_prefix),
            id,
            connection,
            options,
            mirrors: InMemoryRegistry::new(),
            runs: Mutex::new(Runs::default()),
            runtime: tokio::runtime::Handle::current(),
            background: Mutex::new(Vec::new()),
            announced: Mutex::new(HashSet::new()),
            renewed_at: Mutex::new(Instant::now()),
        });
        worker.renew_lease().await?;
        let listener = tokio::spawn(listen(Arc::downgrade(&worker), client));
        let reconciler = tokio::spawn(reconcile_periodically(Arc::downgrade(&worker)));
        let lease = tokio::spawn(keep_lease(Arc::downgrade(&worker)));
        let timers = tokio::spawn(fire_timers(Arc::downgrade(&worker)));
        lock(&worker.background).extend([listener, reconciler, lease, timers]);
        Ok(RedisRegistry { worker })
    }

    /// This process's worker id.
    #[must_use]
    pub fn worker_id(&self) -> &str {
        &self.worker.id
    }

    /// The session `session_id`, created with `config` if no process has made it (an existing session keeps
    /// its own bound). `None` creates one with a generated id.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid id; [`RedisTrackerError::Unavailable`].
    pub async fn session(
        &self,
        session_id: Option<&str>,
        config: TrackerConfig,
    ) -> Result<RedisSession, RedisTrackerError> {
        let session_id: Arc<str> = match session_id {
            Some(session_id) => {
                validate_task_id("session_id", session_id)?;
                Arc::from(session_id)
            }
            None => Arc::from(generate_id()),
        };
        let key = self.worker.keys.session(&session_id);
        let max = config.max_finished_tasks.to_string();
        let _: Vec<i64> = store::call(
            &mut self.worker.connection.clone(),
            "st_touch",
            &key,
            &[&max],
        )
        .await?;
        self.worker.index_session(&session_id).await?;
        Ok(RedisSession::new(self.worker.clone(), session_id, key))
    }

    /// The session `session_id` if some process made it and it has not left (a closed session leaves once
    /// its tasks are finished); never creates one.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid id; [`RedisTrackerError::Unavailable`].
    pub async fn get_session(
        &self,
        session_id: &str,
    ) -> Result<Option<RedisSession>, RedisTrackerError> {
        validate_task_id("session_id", session_id)?;
        let key = self.worker.keys.session(session_id);
        let state: Vec<i64> =
            store::call(&mut self.worker.connection.clone(), "st_session", &key, &[]).await?;
        Ok(match state.as_slice() {
            [closed, unfinished] if *closed == 0 || *unfinished > 0 => Some(RedisSession::new(
                self.worker.clone(),
                Arc::from(session_id),
                key,
            )),
            _ => None,
        })
    }

    /// The ids of the live sessions, from the registry's index of sessions.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn sessions(&self) -> Result<Vec<String>, RedisTrackerError> {
        let mut connection = self.worker.connection.clone();
        let indexed: Vec<String> = connection
            .zrange(self.worker.keys.sessions(), 0, -1)
            .await?;
        let mut live = Vec::new();
        for session_id in indexed {
            let key = self.worker.keys.session(&session_id);
            let state: Vec<i64> = store::call(&mut connection, "st_session", &key, &[]).await?;
            if matches!(state.as_slice(), [closed, unfinished] if *closed == 0 || *unfinished > 0) {
                live.push(session_id);
            }
        }
        live.sort_unstable();
        Ok(live)
    }
}

impl Worker {
    /// Records in Redis that this worker runs tasks in `session_id`, once per session.
    pub(crate) async fn announce(&self, session_id: &Arc<str>) -> Result<(), RedisTrackerError> {
        if lock(&self.announced).contains(session_id) {
            return Ok(());
        }
        let _: i64 = self
            .connection
            .clone()
            .sadd(self.keys.worker_sessions(&self.id), &**session_id)
            .await?;
        lock(&self.announced).insert(session_id.clone());
        Ok(())
    }

    /// Lists session `session_id` in the registry's index, unless it is there (a score of 0 asks the sweeper to
    /// read the session's own time of last change).
    pub(crate) async fn index_session(&self, session_id: &str) -> Result<(), RedisTrackerError> {
        let _: i64 = redis::cmd("ZADD")
            .arg(self.keys.sessions())
            .arg("NX")
            .arg(0)
            .arg(session_id)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(())
    }

    /// Removes the sessions that nothing changed for a whole `session_ttl` and that have no unfinished task.
    async fn sweep_idle_sessions(
        &self,
        connection: &mut ConnectionManager,
    ) -> Result<(), RedisTrackerError> {
        let index = self.keys.sessions();
        let ttl = self.options.session_ttl.as_millis().to_string();
        let idle: Vec<String> = store::call(connection, "st_idle", &index, &[&ttl]).await?;
        for session_id in idle {
            let touched: i64 = store::call(
                connection,
                "st_sweep",
                &self.keys.session(&session_id),
                &[&ttl],
            )
            .await?;
            if touched > 0 {
                let _: i64 = redis::cmd("ZADD")
                    .arg(&index)
                    .arg("XX")
                    .arg(touched)
                    .arg(&session_id)
                    .query_async(connection)
                    .await?;
            } else {
                let _: i64 = connection.zrem(&index, &session_id).await?;
            }
        }
        Ok(())
    }

    /// Records that session `session_id` has a timer due at `due_ms` (unless one is due earlier).
    pub(crate) async fn schedule(
        &self,
        session_id: &str,
        due_ms: u64,
    ) -> Result<(), RedisTrackerError> {
        let _: i64 = redis::cmd("ZADD")
            .arg(self.keys.timers())
            .arg("LT")
            .arg(due_ms)
            .arg(session_id)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(())
    }

    /// Fires the due timers of every session; any worker may, and firing twice changes nothing.
    async fn fire_due_timers(&self) -> Result<(), RedisTrackerError> {
        let mut connection = self.connection.clone();
        let timers = self.keys.timers();
        let due: Vec<String> = store::call(&mut connection, "st_due", &timers, &[]).await?;
        for session_id in due {
            let next: i64 = store::call(
                &mut connection,
                "st_fire",
                &self.keys.session(&session_id),
                &[subagent_tracker::DEADLINE_REASON],
            )
            .await?;
            let _: i64 = store::call(
                &mut connection,
                "st_retime",
                &timers,
                &[&session_id, &next.to_string()],
            )
            .await?;
        }
        Ok(())
    }

    async fn renew_lease(&self) -> Result<(), RedisTrackerError> {
        let lease = self.options.lease.as_millis().to_string();
        let _: i64 = store::call(
            &mut self.connection.clone(),
            "st_lease",
            &self.keys.workers(),
            &[&self.id, &lease],
        )
        .await?;
        *lock(&self.renewed_at) = Instant::now();
        // What the worker announced outlives it by ten leases, long enough for any reaper to read it.
        let _: i64 = self
            .connection
            .clone()
            .pexpire(
                self.keys.worker_sessions(&self.id),
                i64::try_from(self.options.lease.as_millis() * 10).unwrap_or(i64::MAX),
            )
            .await?;
        Ok(())
    }

    /// Past a whole lease without renewal, the others may have failed this worker's runs: their runners stop.
    fn fence_if_lease_lost(&self) {
        if lock(&self.renewed_at).elapsed() < self.options.lease {
            return;
        }
        // A reaper may have cleared what this worker announced: announce its sessions again on their next use,
        // so that a later death of this worker is found in them too.
        lock(&self.announced).clear();
        for run in self.held_runs() {
            if let Some(mirror) = self.mirrors.get_session(&run.session_id) {
                mirror.apply_remote_cancel(
                    &run.task_id,
                    LEASE_LOST_REASON,
                    CancelCause::Lease,
                    &run.task_id,
                );
            }
        }
    }

    /// Fails the tasks of the workers whose lease has passed, unless another worker is reaping now.
    async fn reap(&self) -> Result<(), RedisTrackerError> {
        let mut connection = self.connection.clone();
        // Held for one round of reaping (it expires by itself should this worker die meanwhile), so that every
        // worker reaps on its own ticks: the dead are found at the pace of the shortest lease.
        let lock_held: Option<String> = redis::cmd("SET")
            .arg(self.keys.reaper())
            .arg(&*self.id)
            .arg("NX")
            .arg("PX")
            .arg((self.options.lease / 3).as_millis().max(1).to_string())
            .query_async(&mut connection)
            .await?;
        if lock_held.is_none() {
            return Ok(());
        }
        let reaped = match self.reap_expired(&mut connection).await {
            Ok(()) => self.sweep_idle_sessions(&mut connection).await,
            failed => failed,
        };
        let _: i64 = store::call(
            &mut connection,
            "st_unlock",
            &self.keys.reaper(),
            &[&self.id],
        )
        .await?;
        reaped
    }

    async fn reap_expired(
        &self,
        connection: &mut ConnectionManager,
    ) -> Result<(), RedisTrackerError> {
        let expired: Vec<(String, String)> =
            store::call(connection, "st_expired", &self.keys.workers(), &[]).await?;
        for (worker_id, expired_at) in expired
            .iter()
            .filter(|(worker_id, _)| **worker_id != *self.id)
        {
            let sessions_key = self.keys.worker_sessions(worker_id);
            let sessions: Vec<String> = connection.smembers(&sessions_key).await?;
            for session_id in sessions {
                let _: i64 = store::call(
                    connection,
                    "st_reap",
                    &self.keys.session(&session_id),
                    &[worker_id, WORKER_LOST_ERROR, expired_at],
                )
                .await?;
            }
            // The sessions set stays (it expires ten leases after the worker's last renewal): a worker that
            // comes back keeps what it announced, and its lease is dropped only if it has not renewed.
            let _: i64 =
                store::call(connection, "st_forget", &self.keys.workers(), &[worker_id]).await?;
        }
        Ok(())
    }

    /// Starts mirroring `run`; returns true if its cancel was announced before (the caller then reconciles it).
    pub(crate) fn hold(&self, run: RunKey) -> bool {
        let mut runs = lock(&self.runs);
        let announced = runs.unmatched.contains(&run);
        runs.unmatched.retain(|unmatched| *unmatched != run);
        runs.held.insert(run);
        announced
    }

    pub(crate) fn release(&self, run: &RunKey) {
        lock(&self.runs).held.remove(run);
    }

    /// Compares `runs` with Redis and cancels the mirror of each one cancelled there.
    pub(crate) async fn reconcile(&self, runs: Vec<RunKey>) -> Result<(), RedisTrackerError> {
        let mut by_session: HashMap<Arc<str>, Vec<RunKey>> = HashMap::new();
        for run in runs {
            by_session
                .entry(run.session_id.clone())
                .or_default()
                .push(run);
        }
        let mut connection = self.connection.clone();
        for (session_id, runs) in by_session {
            let args: Vec<&str> = runs
                .iter()
                .flat_map(|run| [&*run.task_id, run.run.as_str()])
                .collect();
            let key = self.keys.session(&session_id);
            let statuses: Vec<Vec<String>> =
                store::call(&mut connection, "st_status", &key, &args).await?;
            let Some(mirror) = self.mirrors.get_session(&session_id) else {
                continue;
            };
            for (run, status) in runs.iter().zip(statuses) {
                if let [status, reason, origin, cause] = status.as_slice() {
                    if status == "cancelled" && lock(&self.runs).held.contains(run) {
                        let cause = CancelCause::from_name(cause).unwrap_or(CancelCause::Requested);
                        mirror.apply_remote_cancel(&run.task_id, reason, cause, origin);
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends the runs Redis records as this worker's that it does not hold: their start or claim took effect,
    /// but the reply was lost, so no runner will ever end them. Runs younger than twice the call timeout may
    /// still have their reply on the way, and are left alone.
    async fn end_orphans(&self) -> Result<(), RedisTrackerError> {
        let sessions: Vec<Arc<str>> = lock(&self.announced).iter().cloned().collect();
        let grace = (self.options.timeout * 2).as_millis().to_string();
        let mut connection = self.connection.clone();
        for session_id in sessions {
            let held: Vec<Arc<str>> = lock(&self.runs)
                .held
                .iter()
                .filter(|run| run.session_id == session_id)
                .map(|run| run.task_id.clone())
                .collect();
            let mut args: Vec<&str> = vec![&self.id, &grace, ORPHANED_RUN_ERROR];
            args.extend(held.iter().map(|task_id| &**task_id));
            let _: i64 = store::call(
                &mut connection,
                "st_orphans",
                &self.keys.session(&session_id),
                &args,
            )
            .await?;
        }
        Ok(())
    }

    fn held_runs(&self) -> Vec<RunKey> {
        lock(&self.runs).held.iter().cloned().collect()
    }

    /// A notification that run `run` was cancelled in Redis, with the cancel's details.
    fn notified(&self, notification: Notification) {
        let run = notification.run;
        {
            let mut runs = lock(&self.runs);
            if !runs.held.contains(&run) {
                if runs.unmatched.len() == UNMATCHED_NOTIFICATIONS {
                    runs.unmatched.pop_front();
                }
                runs.unmatched.push_back(run);
                return;
            }
        }
        if let Some(mirror) = self.mirrors.get_session(&run.session_id) {
            let cause =
                CancelCause::from_name(&notification.cause).unwrap_or(CancelCause::Requested);
            mirror.apply_remote_cancel(
                &run.task_id,
                &notification.reason,
                cause,
                &notification.origin,
            );
        }
    }
}

/// A cancel of a run this worker executes, as the functions publish it.
struct Notification {
    run: RunKey,
    reason: String,
    origin: String,
    cause: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        for task in lock(&self.background).drain(..) {
            task.abort();
        }
    }
}

/// Receives the worker's notifications, resubscribing (and reconciling what it may have missed) whenever the
/// server drops the subscription.
async fn listen(worker: Weak<Worker>, client: redis::Client) {
    loop {
        let channel = match worker.upgrade() {
            Some(worker) => worker.keys.worker_channel(&worker.id),
            None => return,
        };
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            if pubsub.subscribe(&channel).await.is_ok() {
                if let Some(worker) = worker.upgrade() {
                    let _ = worker.reconcile(worker.held_runs()).await;
                }
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let Some(worker) = worker.upgrade() else {
                        return;
                    };
                    for notification in parse_notifications(&message) {
                        worker.notified(notification);
                    }
                }
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// The runs a notification names: six fields each, every field written `<byte length>:<bytes>` (`fields_message`
/// in `functions.lua`). A malformed message yields what came before the fault.
fn parse_notifications(message: &redis::Msg) -> Vec<Notification> {
    let Ok(payload) = message.get_payload::<Vec<u8>>() else {
        return Vec::new();
    };
    let mut rest = payload.as_slice();
    let mut field = || -> Option<String> {
        let colon = rest.iter().position(|byte| *byte == b':')?;
        let length: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        let value = rest.get(colon + 1..colon + 1 + length)?;
        rest = &rest[colon + 1 + length..];
        String::from_utf8(value.to_vec()).ok()
    };
    let mut notifications = Vec::new();
    while let Some(session_id) = field() {
        let mut next = || -> Option<Notification> {
            Some(Notification {
                run: RunKey {
                    session_id: Arc::from(session_id.as_str()),
                    task_id: Arc::from(field()?),
                    run: field()?,
                },
                reason: field()?,
                origin: field()?,
                cause: field()?,
            })
        };
        match next() {
            Some(notification) => notifications.push(notification),
            None => break,
        }
    }
    notifications
}

/// Renews the lease three times per lease, fences this worker when it could not, and reaps expired workers.
async fn keep_lease(worker: Weak<Worker>) {
    let lease = match worker.upgrade() {
        Some(worker) => worker.options.lease,
        None => return,
    };
    let mut ticks = tokio::time::interval(lease / 3);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(worker) = worker.upgrade() else {
            return;
        };
        // Fenced before renewing: a worker that was frozen past its lease (a stopped process, a long pause) may
        // already have been reaped, even if it can renew now.
        worker.fence_if_lease_lost();
        // Failures are retried on the next tick; the fence covers a lease that runs out meanwhile.
        let _ = worker.renew_lease().await;
        let _ = worker.reap().await;
    }
}

async fn fire_timers(worker: Weak<Worker>) {
    let mut ticks = tokio::time::interval(TIMER_TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(worker) = worker.upgrade() else {
            return;
        };
        let _ = worker.fire_due_timers().await;
    }
}

async fn reconcile_periodically(worker: Weak<Worker>) {
    let interval = match worker.upgrade() {
        Some(worker) => worker.options.reconcile_interval,
        None => return,
    };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(worker) = worker.upgrade() else {
            return;
        };
        let _ = worker.reconcile(worker.held_runs()).await;
        let _ = worker.end_orphans().await;
    }
}

/// Refuses a key prefix whose registry keys hold other data (they would fail every call with a type error).
async fn check_prefix_is_ours(
    connection: &mut ConnectionManager,
    keys: &Keys,
) -> Result<(), RedisTrackerError> {
    for key in [keys.workers(), keys.timers(), keys.sessions()] {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(connection).await?;
        if kind != "none" && kind != "zset" {
            return Err(RedisTrackerError::InvalidOption(
                "key_prefix is used by other data in this Redis: choose a prefix of its own",
            ));
        }
    }
    Ok(())
}

pub(crate) fn timeout_error() -> RedisTrackerError {
    RedisTrackerError::Unavailable {
        source: redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "Redis did not answer within the registry's timeout",
        )),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded state stays consistent across a panic (each change is one insert or remove).
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
