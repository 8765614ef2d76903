//! The registry of sessions kept in Redis, and the worker that keeps the tokens of its own runners in step with
//! Redis.
//!
//! Redis holds the truth. Each process mirrors the runs it executes in an in-memory tracker, so that a token's
//! `is_cancelled` stays a local read. A cancel reaches the mirror two ways, which both end in one local cancel:
//! a push on the worker's channel (prompt), and a reconcile of every run the worker holds, after each
//! (re)subscription and on a timer (nothing lost).
//!
//! Each worker process holds a lease that it renews on the server's clock, and announces (in a set that lives as
//! long as the lease, in the registry's slot) the sessions it runs tasks in. One worker at a time (holding a lock
//! that expires) reaps the processes whose lease has passed: their running tasks fail and their cancelled tasks
//! finish, and their lease and announcements go together. A worker that could not renew for a whole lease, by
//! its own monotonic clock, fires the tokens of its runs (cause `lease`): by then the others may have failed
//! them.
//!
//! A worker keeps, per session, only what it still has to do there (`SessionUse`): runs it holds, starts and
//! claims under way, calls whose reply never came (their runs may be orphans), timers to put back in the index.
//! An entry with nothing left goes, and its announcement is withdrawn, so an idle worker's memory and calls do
//! not grow with the sessions it once used.
//!
//! # Invariants
//!
//! - An entry with a run held or a call under way is never dropped, so while a run may exist in Redis the
//!   session stays announced (or is announced again after a reaper forgot this process).
//! - A call is settled (its entry no longer suspects an orphan) only once its run is held, or it was refused.
//!
//! # Lock order
//!
//! The worker's `runs` lock is a leaf: no await, no other lock, and no tracker call happens under it. The
//! mirrors' table lock is a leaf too.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::connection::{Client, Connection};
use futures_util::StreamExt;
use subagent_tracker::{
    generate_id, validate_task_id, CancelCause, TrackerConfig, DEFAULT_EVENT_BUFFER,
};
use tokio::task::JoinHandle;

use crate::mirrors::Mirrors;
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

/// How many sessions one round trip of the sweep or the reaper handles.
const BATCH: usize = 500;

/// Sessions kept in Redis, shared by every process that connects to the same server with the same prefix.
///
/// Each registry is a worker: a process with an id (shown in snapshots, and shared by several processes if they
/// are given one) and a lease of its own. The tasks it starts or claims are its runs, and the cancels of those
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
    /// The worker id users gave (or a generated one): what snapshots show.
    pub(crate) id: Arc<str>,
    /// This process's own name in Redis: the id, a slash and a nonce. It names the lease, the runs (their `worker`
    /// field) and the notification channel, so processes that share an id never take each other's runs for their
    /// own.
    pub(crate) process: Arc<str>,
    /// For the connections of their own that event subscriptions need (a blocking read holds its connection).
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) connection: Connection,
    /// A connection for reaping and sweeping, whose long pipelines must not hold up the calls of runners.
    housekeeping: Connection,
    /// With `wait_for_replicas`, the connection cancels go through with their `WAIT`, which holds it while the
    /// replicas catch up: only other such cancels wait behind it.
    pub(crate) replication: Option<Connection>,
    pub(crate) options: RedisOptions,
    /// The in-memory mirrors of the sessions this worker runs tasks in.
    pub(crate) mirrors: Mirrors,
    runs: Mutex<Runs>,
    /// The runtime the worker's background tasks (and the ends of dropped handles) run on.
    pub(crate) runtime: tokio::runtime::Handle,
    background: Mutex<Vec<JoinHandle<()>>>,
    /// When the lease was last renewed, by this process's monotonic clock.
    renewed_at: Mutex<Instant>,
}

#[derive(Default)]
struct Runs {
    held: HashSet<RunKey>,
    /// Notifications that arrived before their run was registered, oldest first.
    unmatched: VecDeque<RunKey>,
    /// What this process has to do with each session it uses; an entry leaves once nothing is left to do, so
    /// the worker's memory and its periodic work follow what it runs now, not every session it ever touched.
    sessions: HashMap<Arc<str>, SessionUse>,
}

/// This process's business with one session.
#[derive(Default)]
struct SessionUse {
    /// Runs of the session this process holds.
    held: usize,
    /// The tasks of the calls under way (starts, reservations, claims, and the ends of dropped handles): their
    /// runs may exist in Redis with no handle yet, or no more, and are no orphans.
    in_flight: Vec<Arc<str>>,
    /// When this process last recorded in Redis (`announced`) that it runs tasks in the session, for the
    /// reaper; `None` when Redis may not know it (never announced, or a reaper forgot this process).
    announced_at: Option<Instant>,
    /// Since when a call of this process may have taken effect without its outcome arriving here: a run may
    /// be recorded in Redis with no handle here, an orphan for the reconcile to end.
    unsettled_since: Option<Instant>,
    /// A start or reservation with a timer took effect, or may have, without its timer reaching the registry's
    /// index of timers: the reconcile puts it back.
    unscheduled: bool,
}

impl SessionUse {
    /// True while a run of this process may exist in the session: the session must stay announced.
    fn busy(&self) -> bool {
        self.held > 0 || !self.in_flight.is_empty() || self.unsettled_since.is_some()
    }

    fn idle(&self, unannounce_after: Duration) -> bool {
        !self.busy()
            && !self.unscheduled
            && self
                .announced_at
                .is_none_or(|at| at.elapsed() >= unannounce_after)
    }
}

/// A call under way in a session (a start, a reservation, a claim, the end of a dropped handle). It marks its
/// task as no orphan while it lasts and, if it never learns its outcome (an error, or the caller stopped
/// waiting), leaves the session for the orphan check, and for the timer repair when it carried a timer.
pub(crate) struct SessionCall {
    worker: Arc<Worker>,
    session_id: Arc<str>,
    task_id: Arc<str>,
    timed: bool,
    settled: bool,
}

impl SessionCall {
    /// The call's outcome is known here: it took effect and its run is held (or ended), or it was refused.
    pub(crate) fn settle(mut self) {
        self.settled = true;
    }
}

impl Drop for SessionCall {
    fn drop(&mut self) {
        let mut runs = lock(&self.worker.runs);
        // An entry with a call under way is never let go of, so this one has the call's task.
        let session = runs.sessions.entry(self.session_id.clone()).or_default();
        if let Some(index) = session
            .in_flight
            .iter()
            .position(|task_id| *task_id == self.task_id)
        {
            session.in_flight.swap_remove(index);
        }
        if !self.settled {
            session.unsettled_since = Some(Instant::now());
            session.unscheduled |= self.timed;
        }
    }
}

impl RedisRegistry {
    /// Connects to the Redis at `url` (`redis://127.0.0.1:6379/0`), loads the server-side functions, and starts
    /// the worker: its notification listener and its reconcile timer, on the current tokio runtime.
    ///
    /// # Errors
    /// [`RedisTrackerError::InvalidOption`] for what retrying cannot fix: settings that [`RedisOptions::check`]
    /// refuses (before anything connects), a URL that does not parse, a database the server does not have, a
    /// password it refuses or wants, a key prefix used by other data, another build of the server functions; [`RedisTrackerError::Unavailable`] when the server cannot
    /// be reached within the timeout.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, RedisTrackerError> {
        options.check()?;
        let id: Arc<str> = Arc::from(options.worker_id.clone().unwrap_or_else(generate_id));
        validate_task_id("worker_id", &id)?;
        let probed = tokio::time::timeout(options.timeout, Client::probe(url, options.timeout))
            .await
            .map_err(|_| timeout_error())?
            .map_err(|error| configuration_error(url, &error))?;
        // A user who may not run INFO says which it is, or is taken to use one server.
        let cluster = options.cluster.or(probed).unwrap_or(false);
        let client = Client::open(url, cluster, options.timeout)
            .map_err(|error| configuration_error(url, &error))?;
        let connect = || async {
            tokio::time::timeout(options.timeout, client.connect(options.timeout))
                .await
                .map_err(|_| timeout_error())?
                .map_err(|error| configuration_error(url, &error))
        };
        let mut connection = connect().await?;
        // A small command first: a server that wants a password refuses a large unauthenticated one with a
        // protocol error that names no password.
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map_err(|error| configuration_error(url, &error))?;
        store::load(&mut connection).await?;
        let keys = Keys::new(&options.key_prefix);
        check_prefix_is_ours(&mut connection, &keys).await?;
        // Sixteen hex digits: no two processes of one worker id meet the same nonce in practice.
        let housekeeping = connect().await?;
        let replication = if options.wait_for_replicas > 0 {
            Some(connect().await?)
        } else {
            None
        };
        let process: Arc<str> = Arc::from(format!("{id}/{}", &generate_id()[..16]));
        let worker = Arc::new(Worker {
            client: client.clone(),
            keys,
            id,
            process,
            connection,
            housekeeping,
            replication,
            options,
            mirrors: Mirrors::default(),
            runs: Mutex::new(Runs::default()),
            runtime: tokio::runtime::Handle::current(),
            background: Mutex::new(Vec::new()),
            renewed_at: Mutex::new(Instant::now()),
        });
        worker.renew_lease().await?;
        let weak = || Arc::downgrade(&worker);
        let (lease, reconcile_interval) = (worker.options.lease, worker.options.reconcile_interval);
        let background = [
            tokio::spawn(listen(weak(), client)),
            tokio::spawn(every(weak(), reconcile_interval, reconcile)),
            // Reaping and sweeping on ticks of their own: a long round never delays a renewal.
            tokio::spawn(every(weak(), lease / 3, keep_lease)),
            tokio::spawn(every(weak(), lease / 3, |worker| async move {
                let _ = worker.reap().await;
            })),
            tokio::spawn(every(weak(), TIMER_TICK, |worker| async move {
                let _ = worker.fire_due_timers().await;
            })),
        ];
        lock(&worker.background).extend(background);
        Ok(RedisRegistry { worker })
    }

    /// This process's worker id.
    #[must_use]
    pub fn worker_id(&self) -> &str {
        &self.worker.id
    }

    /// How many sessions this process keeps anything for now (mirrors of its runs' tokens, or business with
    /// Redis): follows what it runs, not every session it ever touched.
    #[must_use]
    pub fn sessions_in_use(&self) -> usize {
        self.worker
            .mirrors
            .len()
            .max(lock(&self.worker.runs).sessions.len())
    }

    /// The session `session_id`, created with `config` if no process has made it (an existing session keeps
    /// its own bound). `None` creates one with a generated id. A closed session whose tasks are all finished
    /// has left: its id names a new one.
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
        if config.event_buffer != DEFAULT_EVENT_BUFFER {
            return Err(RedisTrackerError::InvalidOption(
                EVENT_BUFFER_REFUSED.into(),
            ));
        }
        let key = self.worker.keys.session(&session_id);
        let max = config.max_finished_tasks.to_string();
        let state: Vec<String> = store::call(
            &mut self.worker.connection.clone(),
            "touch",
            &[&key],
            &[&max],
        )
        .await?;
        let state = session_state(state)?
            .ok_or_else(|| RedisTrackerError::Protocol(Arc::from("stv2_touch")))?;
        self.worker.index_session(&session_id).await?;
        Ok(RedisSession::new(
            self.worker.clone(),
            session_id,
            key,
            &state,
        ))
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
        let state: Vec<String> =
            store::call(&mut self.worker.connection.clone(), "session", &[&key], &[]).await?;
        Ok(match session_state(state)? {
            Some(state) if state.is_live() => Some(RedisSession::new(
                self.worker.clone(),
                Arc::from(session_id),
                key,
                &state,
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
        let indexed: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.worker.keys.sessions())
            .arg(0)
            .arg(-1)
            .query_async(&mut connection)
            .await?;
        let mut live = Vec::new();
        for chunk in indexed.chunks(BATCH) {
            let keys: Vec<String> = chunk
                .iter()
                .map(|session_id| self.worker.keys.session(session_id))
                .collect();
            let calls: Vec<_> = keys.iter().map(|key| (vec![&**key], vec![])).collect();
            let states: Vec<Result<Vec<String>, _>> =
                store::call_each(&mut connection, "session", &calls).await?;
            for (session_id, state) in chunk.iter().zip(states) {
                if session_state(state?)?.is_some_and(|state| state.is_live()) {
                    live.push(session_id.clone());
                }
            }
        }
        live.sort_unstable();
        Ok(live)
    }
}

/// Why `RedisRegistry::session` refuses an `event_buffer` other than the default.
pub const EVENT_BUFFER_REFUSED: &str = "event_buffer does not apply to a Redis session: its events wait in \
     the session's stream in Redis (about the last 10,000), not in a buffer per subscriber; leave it unset";

/// A session's state as `stv2_session` and `stv2_touch` give it.
pub(crate) struct SessionState {
    /// The incarnation: the session's first run number.
    pub(crate) incarnation: String,
    pub(crate) closed: bool,
    pub(crate) unfinished: u64,
    /// The retention bound the incarnation was made with.
    pub(crate) max_finished_tasks: usize,
}

impl SessionState {
    /// A session is live until it is closed with every task finished: then it has left.
    pub(crate) fn is_live(&self) -> bool {
        !self.closed || self.unfinished != 0
    }
}

/// A session's state from the functions' `{incarnation, closed, unfinished, max_finished}`; `None` for no
/// session.
pub(crate) fn session_state(state: Vec<String>) -> Result<Option<SessionState>, RedisTrackerError> {
    let malformed = || RedisTrackerError::Protocol(Arc::from("a session's state"));
    if state.is_empty() {
        return Ok(None);
    }
    let [incarnation, closed, unfinished, max]: [String; 4] =
        state.try_into().map_err(|_| malformed())?;
    Ok(Some(SessionState {
        incarnation,
        closed: closed == "1",
        unfinished: unfinished.parse().map_err(|_| malformed())?,
        max_finished_tasks: max.parse().map_err(|_| malformed())?,
    }))
}

impl Worker {
    /// Marks a call about `task_id` in `session_id` as under way, until it settles (see [`SessionCall`]).
    /// `timed`: the call sets a deadline or a claim timeout.
    pub(crate) fn track_call(
        self: &Arc<Self>,
        session_id: &Arc<str>,
        task_id: &Arc<str>,
        timed: bool,
    ) -> SessionCall {
        self.track_call_and_announcement(session_id, task_id, timed)
            .0
    }

    /// [`track_call`](Self::track_call), and whether Redis knows this process runs tasks in the session: one
    /// look at the worker's state per call.
    fn track_call_and_announcement(
        self: &Arc<Self>,
        session_id: &Arc<str>,
        task_id: &Arc<str>,
        timed: bool,
    ) -> (SessionCall, bool) {
        let announced = {
            let mut runs = lock(&self.runs);
            let session = runs.sessions.entry(session_id.clone()).or_default();
            session.in_flight.push(task_id.clone());
            session.announced_at.is_some()
        };
        let call = SessionCall {
            worker: self.clone(),
            session_id: session_id.clone(),
            task_id: task_id.clone(),
            timed,
            settled: false,
        };
        (call, announced)
    }

    /// Begins a start or claim of `task_id` in `session_id`: marks it under way, and announces to Redis, unless
    /// it knows of it, that this process runs tasks there (so that a reaper finds them should it die).
    pub(crate) async fn begin_call(
        self: &Arc<Self>,
        session_id: &Arc<str>,
        task_id: &Arc<str>,
        timed: bool,
    ) -> Result<SessionCall, RedisTrackerError> {
        // Under way before the announcement is sent, so a lease renewal that finds this process forgotten
        // announces the session again.
        let (call, announced) = self.track_call_and_announcement(session_id, task_id, timed);
        if !announced {
            self.announce(std::slice::from_ref(session_id)).await?;
        }
        Ok(call)
    }

    /// Records in Redis that this process runs tasks in `sessions`, with its lease (which a reaper may have
    /// forgotten: then every session with business here is announced again on the next lease tick).
    async fn announce(&self, sessions: &[Arc<str>]) -> Result<(), RedisTrackerError> {
        let (workers, announced) = (self.keys.workers(), self.keys.announced(&self.process));
        let lease = self.options.lease.as_millis().to_string();
        for chunk in sessions.chunks(BATCH) {
            let mut args: Vec<&str> = vec![&self.process, &lease];
            args.extend(chunk.iter().map(|session_id| &**session_id));
            let lease_held: i64 = store::call(
                &mut self.connection.clone(),
                "announce",
                &[&workers, &announced],
                &args,
            )
            .await?;
            let now = Instant::now();
            let mut runs = lock(&self.runs);
            if lease_held == 0 {
                forget_announcements(&mut runs);
            }
            for session_id in chunk {
                runs.sessions
                    .entry(session_id.clone())
                    .or_default()
                    .announced_at = Some(now);
            }
        }
        Ok(())
    }

    /// Announces the sessions with business here that Redis may not know of.
    async fn announce_busy_sessions(&self) -> Result<(), RedisTrackerError> {
        let unannounced: Vec<Arc<str>> = lock(&self.runs)
            .sessions
            .iter()
            .filter(|(_, session)| session.busy() && session.announced_at.is_none())
            .map(|(session_id, _)| session_id.clone())
            .collect();
        self.announce(&unannounced).await
    }

    /// Lists session `session_id` in the registry's index, as changed now.
    pub(crate) async fn index_session(&self, session_id: &str) -> Result<(), RedisTrackerError> {
        let _: i64 = store::call(
            &mut self.connection.clone(),
            "index",
            &[&self.keys.sessions()],
            &[session_id],
        )
        .await?;
        Ok(())
    }

    /// Removes the sessions that nothing changed for a whole `session_ttl` and that have no unfinished task, in
    /// batches of one round trip each, for at most `budget`.
    async fn sweep_idle_sessions(
        &self,
        connection: &mut Connection,
        budget: Duration,
    ) -> Result<usize, RedisTrackerError> {
        let began = Instant::now();
        let index = self.keys.sessions();
        let ttl = self.options.session_ttl.as_millis().to_string();
        let batch = BATCH.to_string();
        let mut removed = 0;
        loop {
            let idle: Vec<String> =
                store::call(connection, "idle", &[&index], &[&ttl, &batch]).await?;
            let keys: Vec<String> = idle
                .iter()
                .map(|session_id| self.keys.session(session_id))
                .collect();
            let calls: Vec<_> = keys.iter().map(|key| (vec![&**key], vec![&*ttl])).collect();
            let next_looks: Vec<Result<i64, _>> =
                store::call_each(connection, "sweep", &calls).await?;
            let mut swept: Vec<&str> = vec![&ttl];
            let mut kept = redis::pipe();
            for (session_id, next_look) in idle.iter().zip(next_looks) {
                match next_look {
                    Ok(-1) => swept.push(session_id),
                    // Never moves an entry earlier: `session()` may have listed the id again meanwhile.
                    Ok(next_look) => {
                        kept.cmd("ZADD")
                            .arg(&index)
                            .arg("XX")
                            .arg("GT")
                            .arg(next_look)
                            .arg(session_id)
                            .ignore();
                    }
                    // A session whose sweep fails (its keys hold other data, say) is looked at again after
                    // another `session_ttl`, behind the others.
                    Err(_) => {
                        kept.cmd("ZADD")
                            .arg(&index)
                            .arg("XX")
                            .arg("GT")
                            .arg(crate::session::epoch_millis(std::time::SystemTime::now()))
                            .arg(session_id)
                            .ignore();
                    }
                }
            }
            removed += swept.len() - 1;
            if swept.len() < idle.len() + 1 {
                let () = kept.query_async(connection).await?;
            }
            if swept.len() > 1 {
                let _: i64 = store::call(connection, "drop_stale", &[&index], &swept).await?;
            }
            if idle.len() < BATCH || began.elapsed() >= budget {
                return Ok(removed);
            }
        }
    }

    /// Records that session `session_id` has a timer due at `due_ms` (unless one is due earlier).
    pub(crate) async fn schedule(
        &self,
        session_id: &str,
        due_ms: u64,
    ) -> Result<(), RedisTrackerError> {
        let _: i64 = store::call(
            &mut self.connection.clone(),
            "schedule",
            &[&self.keys.timers(), &self.keys.timer_changes()],
            &[session_id, &due_ms.to_string()],
        )
        .await?;
        Ok(())
    }

    /// Fires the due timers of every session; any worker may, and firing twice changes nothing.
    async fn fire_due_timers(&self) -> Result<(), RedisTrackerError> {
        let mut connection = self.connection.clone();
        let (timers, changes) = (self.keys.timers(), self.keys.timer_changes());
        let due: Vec<(String, String)> =
            store::call(&mut connection, "due", &[&timers, &changes], &[]).await?;
        for (session_id, seen_changes) in due {
            let next = self.fire(&mut connection, &session_id).await?;
            let _: i64 = store::call(
                &mut connection,
                "retime",
                &[&timers, &changes],
                &[&session_id, &next.to_string(), &seen_changes],
            )
            .await?;
        }
        Ok(())
    }

    /// Fires the session's due timers; returns when its next one falls due (-1: none).
    async fn fire(
        &self,
        connection: &mut Connection,
        session_id: &str,
    ) -> Result<i64, RedisTrackerError> {
        store::call(
            connection,
            "fire",
            &[&self.keys.session(session_id)],
            &[subagent_tracker::DEADLINE_REASON],
        )
        .await
    }

    async fn renew_lease(&self) -> Result<(), RedisTrackerError> {
        let lease = self.options.lease.as_millis().to_string();
        let [_server_time, existed]: [i64; 2] = store::call(
            &mut self.connection.clone(),
            "lease",
            &[&self.keys.workers()],
            &[&self.process, &lease],
        )
        .await?;
        *lock(&self.renewed_at) = Instant::now();
        if existed == 0 {
            // A new lease, or a reaper took this process for dead and forgot its lease and announcements.
            forget_announcements(&mut lock(&self.runs));
        }
        Ok(())
    }

    /// Past a whole lease without renewal, the others may have failed this worker's runs: their runners stop.
    fn fence_if_lease_lost(&self) {
        if lock(&self.renewed_at).elapsed() < self.options.lease {
            return;
        }
        for run in self.held_runs() {
            if let Some(mirror) = self.mirrors.get(&run.session_id) {
                mirror.tracker.apply_remote_cancel(
                    &run.task_id,
                    LEASE_LOST_REASON,
                    CancelCause::Lease,
                    &run.task_id,
                );
            }
        }
    }

    /// Fails the tasks of the workers whose lease has passed and sweeps idle sessions, unless another worker is
    /// doing so now.
    async fn reap(&self) -> Result<(), RedisTrackerError> {
        let mut connection = self.housekeeping.clone();
        // Held for one round (it expires by itself should this worker die meanwhile), so that every worker
        // reaps on its own ticks: the dead are found at the pace of the shortest lease.
        let round = self.options.lease / 3;
        let lock_held: Option<String> = redis::cmd("SET")
            .arg(self.keys.reaper())
            .arg(&*self.process)
            .arg("NX")
            .arg("PX")
            .arg(round.as_millis().to_string())
            .query_async(&mut connection)
            .await?;
        if lock_held.is_none() {
            return Ok(());
        }
        // Half a round for the sweep, so that the round ends before the lock expires.
        let reaped = match self.reap_expired(&mut connection).await {
            Ok(()) => self
                .sweep_idle_sessions(&mut connection, round / 2)
                .await
                .map(drop),
            failed => failed,
        };
        let _: i64 = store::call(
            &mut connection,
            "unlock",
            &[&self.keys.reaper()],
            &[&self.process],
        )
        .await?;
        reaped
    }

    async fn reap_expired(&self, connection: &mut Connection) -> Result<(), RedisTrackerError> {
        let expired: Vec<(String, String)> =
            store::call(connection, "expired", &[&self.keys.workers()], &[]).await?;
        for (process, expired_at) in expired
            .iter()
            .filter(|(process, _)| **process != *self.process)
        {
            let announced = self.keys.announced(process);
            let sessions: Vec<String> = redis::cmd("ZRANGE")
                .arg(&announced)
                .arg(0)
                .arg(-1)
                .query_async(connection)
                .await?;
            let mut all_reaped = true;
            for chunk in sessions.chunks(BATCH) {
                let keys: Vec<String> = chunk
                    .iter()
                    .map(|session_id| self.keys.session(session_id))
                    .collect();
                let calls: Vec<_> = keys
                    .iter()
                    .map(|key| {
                        (
                            vec![&**key],
                            vec![&**process, WORKER_LOST_ERROR, &**expired_at],
                        )
                    })
                    .collect();
                let reaped: Vec<Result<i64, _>> =
                    store::call_each(connection, "reap", &calls).await?;
                all_reaped &= reaped.iter().all(Result::is_ok);
            }
            // Dropped together with its announcements once every session was reaped, unless it renewed
            // meanwhile (it came back, and keeps both). What it announced stays as long as its lease does,
            // however long no worker is alive.
            if all_reaped {
                let _: i64 = store::call(
                    connection,
                    "forget",
                    &[&self.keys.workers(), &announced],
                    &[process],
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Starts mirroring `run`; returns true if its cancel was announced before (the caller then reconciles it).
    pub(crate) fn hold(&self, run: RunKey) -> bool {
        let mut runs = lock(&self.runs);
        let announced = runs.unmatched.contains(&run);
        runs.unmatched.retain(|unmatched| *unmatched != run);
        runs.sessions
            .entry(run.session_id.clone())
            .or_default()
            .held += 1;
        runs.held.insert(run);
        announced
    }

    pub(crate) fn release(&self, run: &RunKey) {
        let mut runs = lock(&self.runs);
        if runs.held.remove(run) {
            if let Some(session) = runs.sessions.get_mut(&run.session_id) {
                session.held = session.held.saturating_sub(1);
            }
        }
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
                store::call(&mut connection, "status", &[&key], &args).await?;
            let Some(mirror) = self.mirrors.get(&session_id) else {
                continue;
            };
            for (run, status) in runs.iter().zip(statuses) {
                if let [status, reason, origin, cause] = status.as_slice() {
                    if status == "cancelled" && lock(&self.runs).held.contains(run) {
                        let cause = CancelCause::from_name(cause).unwrap_or(CancelCause::Requested);
                        mirror
                            .tracker
                            .apply_remote_cancel(&run.task_id, reason, cause, origin);
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends the runs Redis records as this process's that it neither holds nor has a call under way for: their
    /// start or claim took effect, but the reply was lost, so no runner will ever end them. Only sessions where
    /// a call went unanswered are looked at; runs younger than twice the call timeout may still have their
    /// reply on the way, and are left for a later look.
    async fn end_orphans(&self) -> Result<(), RedisTrackerError> {
        let grace = self.options.timeout * 2;
        let unsettled: Vec<(Arc<str>, Vec<Arc<str>>)> = {
            let runs = lock(&self.runs);
            let mut held: HashMap<&Arc<str>, Vec<Arc<str>>> = HashMap::new();
            for run in &runs.held {
                held.entry(&run.session_id)
                    .or_default()
                    .push(run.task_id.clone());
            }
            runs.sessions
                .iter()
                .filter(|(_, session)| session.unsettled_since.is_some())
                .map(|(session_id, session)| {
                    let mut kept = held.remove(session_id).unwrap_or_default();
                    kept.extend(session.in_flight.iter().cloned());
                    (session_id.clone(), kept)
                })
                .collect()
        };
        let grace_ms = grace.as_millis().to_string();
        let mut connection = self.connection.clone();
        for (session_id, kept) in unsettled {
            let looked_at = Instant::now();
            let mut args: Vec<&str> = vec![&self.process, &grace_ms, ORPHANED_RUN_ERROR];
            args.extend(kept.iter().map(|task_id| &**task_id));
            let [_ended, young]: [i64; 2] = store::call(
                &mut connection,
                "orphans",
                &[&self.keys.session(&session_id)],
                &args,
            )
            .await?;
            let mut runs = lock(&self.runs);
            if let Some(session) = runs.sessions.get_mut(&session_id) {
                // Settled once no unheld run is left and no unanswered call is younger than the grace: a call
                // that took effect later than that would have been refused by its own timeout.
                let settled = young == 0
                    && session
                        .unsettled_since
                        .is_some_and(|since| looked_at.duration_since(since) > grace);
                if settled {
                    session.unsettled_since = None;
                }
            }
        }
        Ok(())
    }

    /// Puts back the registry's index entries of timers that a lost reply may have left out.
    async fn reschedule_timers(&self) -> Result<(), RedisTrackerError> {
        let unscheduled: Vec<Arc<str>> = lock(&self.runs)
            .sessions
            .iter()
            .filter(|(_, session)| session.unscheduled)
            .map(|(session_id, _)| session_id.clone())
            .collect();
        let mut connection = self.connection.clone();
        for session_id in unscheduled {
            // Cleared first: a call that leaves it unscheduled meanwhile marks it again.
            if let Some(session) = lock(&self.runs).sessions.get_mut(&session_id) {
                session.unscheduled = false;
            }
            let repaired = match self.fire(&mut connection, &session_id).await {
                Ok(next) => match u64::try_from(next) {
                    Ok(next) => self.schedule(&session_id, next).await,
                    Err(_) => Ok(()),
                },
                Err(error) => Err(error),
            };
            if let Err(error) = repaired {
                lock(&self.runs)
                    .sessions
                    .entry(session_id)
                    .or_default()
                    .unscheduled = true;
                return Err(error);
            }
        }
        Ok(())
    }

    /// Lets go of the sessions this process has no business with any more, and withdraws their announcements.
    async fn forget_idle_sessions(&self) -> Result<(), RedisTrackerError> {
        // An announcement stays for two call timeouts at least, so that a withdrawal never overtakes a newer
        // announcement on its way.
        let grace = self.options.timeout * 2;
        let withdrawn: Vec<Arc<str>> = {
            let mut runs = lock(&self.runs);
            let mut withdrawn = Vec::new();
            runs.sessions.retain(|session_id, session| {
                if !session.idle(grace * 2) {
                    return true;
                }
                if session.announced_at.is_some() {
                    withdrawn.push(session_id.clone());
                }
                false
            });
            shrink_if_mostly_empty(&mut runs.sessions);
            withdrawn
        };
        let grace_ms = grace.as_millis().to_string();
        let key = self.keys.announced(&self.process);
        for chunk in withdrawn.chunks(BATCH) {
            let mut args: Vec<&str> = vec![&grace_ms];
            args.extend(chunk.iter().map(|session_id| &**session_id));
            let _: i64 =
                store::call(&mut self.connection.clone(), "drop_stale", &[&key], &args).await?;
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
        if let Some(mirror) = self.mirrors.get(&run.session_id) {
            let cause =
                CancelCause::from_name(&notification.cause).unwrap_or(CancelCause::Requested);
            mirror.tracker.apply_remote_cancel(
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
async fn listen(worker: Weak<Worker>, client: Client) {
    loop {
        let channel = match worker.upgrade() {
            Some(worker) => worker.keys.worker_channel(&worker.process),
            None => return,
        };
        if let Ok(mut messages) = client.subscribe(&channel).await {
            if let Some(worker) = worker.upgrade() {
                let _ = worker.reconcile(worker.held_runs()).await;
            }
            while let Some(message) = messages.next().await {
                let Some(worker) = worker.upgrade() else {
                    return;
                };
                for notification in parse_notifications(&message) {
                    worker.notified(notification);
                }
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// The runs a notification names: six fields each, every field written `<byte length>:<bytes>` (`fields_message`
/// in `lua/includes/cascade.lua`), the session as its keys encode it. A malformed message yields what came before the fault.
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
                    session_id: Arc::from(store::decode_session_id(&session_id)?),
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

/// Runs `step` on the worker every `period`, for as long as the worker lives; a late tick is delayed, never
/// doubled. Failures of a step are retried on its next tick.
async fn every<Step, Steps>(worker: Weak<Worker>, period: Duration, step: Steps)
where
    Steps: Fn(Arc<Worker>) -> Step,
    Step: std::future::Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(worker) = worker.upgrade() else {
            return;
        };
        step(worker).await;
    }
}

/// One lease tick: fences this worker if it could not renew for a whole lease, renews, and announces again the
/// sessions Redis may not know this process runs tasks in.
async fn keep_lease(worker: Arc<Worker>) {
    // Fenced before renewing: a worker that was frozen past its lease (a stopped process, a long pause) may
    // already have been reaped, even if it can renew now.
    worker.fence_if_lease_lost();
    // The fence covers a lease that runs out while renewals fail.
    if worker.renew_lease().await.is_ok() {
        let _ = worker.announce_busy_sessions().await;
    }
}

/// One reconcile: the held runs' statuses, orphans, lost timers, and the sessions this worker is done with.
async fn reconcile(worker: Arc<Worker>) {
    let _ = worker.reconcile(worker.held_runs()).await;
    let _ = worker.end_orphans().await;
    let _ = worker.reschedule_timers().await;
    let _ = worker.forget_idle_sessions().await;
}

/// Refuses a key prefix whose registry-wide keys hold other data: calls would fail with a type error, or, for
/// the reaper's lock, reaping and sweeping would silently never happen.
async fn check_prefix_is_ours(
    connection: &mut Connection,
    keys: &Keys,
) -> Result<(), RedisTrackerError> {
    for (key, ours) in keys.registry_keys() {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(connection).await?;
        // The reaper's lock is a string that always expires; one that never does is someone else's.
        let foreign = match kind.as_str() {
            "none" => false,
            "string" if ours == "string" => {
                let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(connection).await?;
                ttl == -1
            }
            kind => kind != ours,
        };
        if foreign {
            return Err(RedisTrackerError::InvalidOption(
                format!(
                    "key_prefix is used by other data in this Redis (key {key:?} holds a {kind}): choose a \
                     prefix of its own"
                )
                .into(),
            ));
        }
    }
    Ok(())
}

/// The error for a URL or server that cannot work as configured, naming the URL; otherwise the error's own class
/// (see [`RedisTrackerError`]).
fn configuration_error(url: &str, error: &redis::RedisError) -> RedisTrackerError {
    // The URL as the user wrote it, but never its password.
    let shown = redis::parse_redis_url(url).map_or_else(
        || {
            if url.contains('@') {
                "the URL".to_owned()
            } else {
                format!("{url:?}")
            }
        },
        |mut parsed| {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            format!("{parsed}")
        },
    );
    let problem = if error.kind() == redis::ErrorKind::InvalidClientConfig {
        format!(
            "{shown} is not a Redis URL ({error}): expected redis://[[user]:password@]host[:port][/db], \
             rediss://... or unix:///path/to/socket"
        )
    } else if error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
        || error.detail().is_some_and(|detail| {
            detail.contains("invalid password") || detail.contains("invalid username-password")
        })
    {
        format!(
            "the Redis server at {shown} refused to authenticate ({error}): give the password in the URL, \
             as redis://:password@host:port/db or redis://user:password@host:port/db"
        )
    } else if is_untrusted_certificate(error) {
        format!(
            "the Redis server at {shown} presented a TLS certificate that did not verify ({error}): trust the \
             authority that signed it (set SSL_CERT_FILE to a bundle that holds it), and name the server as \
             its certificate does"
        )
    } else if error.kind() == redis::ErrorKind::Parse {
        format!(
            "the server at {shown} does not speak Redis's protocol ({error}): check the host and the port"
        )
    } else if error
        .detail()
        .is_some_and(|detail| detail.contains("DB index is out of range"))
    {
        format!(
            "the Redis server at {shown} has no such database ({error}): choose a database it has"
        )
    } else {
        return RedisTrackerError::from(error.clone());
    };
    RedisTrackerError::InvalidOption(problem.into())
}

/// Whether the TLS handshake failed on the server's certificate.
fn is_untrusted_certificate(error: &redis::RedisError) -> bool {
    matches!(
        tls_error(error),
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

/// The rustls error behind `cause`: redis-rs keeps it in a shared I/O error.
fn tls_error<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    if let Some(shared) = cause.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
        return tls_error(&**shared);
    }
    if let Some(inner) = cause
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        return tls_error(inner);
    }
    cause.source().and_then(tls_error)
}

pub(crate) fn timeout_error() -> RedisTrackerError {
    RedisTrackerError::Unavailable {
        source: redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "Redis did not answer within the registry's timeout",
        )),
    }
}

/// Takes every announcement of this process for unknown to Redis: a reaper forgot them with its lease. The
/// sessions with business here are announced again on the next lease tick.
fn forget_announcements(runs: &mut Runs) {
    for session in runs.sessions.values_mut() {
        session.announced_at = None;
    }
}

/// Gives back the room of a map that is mostly empty (a quarter used, or less): a worker that once used many
/// sessions keeps no memory for them.
pub(crate) fn shrink_if_mostly_empty<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to_fit();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded state stays consistent across a panic (each change is one insert or remove).
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
