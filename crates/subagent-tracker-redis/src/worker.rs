//! The worker: what each process that connects to a registry runs, to keep the tokens of its own runners in
//! step with Redis.
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
//! Its parts: [`startup`] (connecting, and the background tasks), [`announcements`] (the sessions this process runs tasks in, for the reaper), [`lease`] (the
//! lease, the fence, and the reaper), [`listener`] (cancels pushed on the worker's channel, and the reconcile
//! that catches what pushes miss), [`timers`] (deadlines and claim timeouts, in the registry's index).
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
//! mirrors' table lock is a leaf too. Neither is ever held while the core's locks are taken.

mod announcements;
pub(crate) mod lease;
pub(crate) mod listener;
mod startup;
mod timers;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::connection::{Client, Connection};
use crate::mirrors::Mirrors;
use crate::store::Keys;
use crate::{RedisOptions, RedisTrackerError};

pub(crate) use listener::RemoteCancel;

/// How many sessions one round trip of the sweep or the reaper handles.
pub(crate) const BATCH: usize = 500;

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
    /// The expiry this process last wrote to its lease (on the server's clock), to find out that Redis lost it.
    lease_expiry: Mutex<Option<i64>>,
}

#[derive(Default)]
struct Runs {
    held: HashSet<RunKey>,
    /// Notifications that arrived before their run was registered, oldest first.
    unmatched: VecDeque<RunKey>,
    /// The number of the latest pause of each held run that paused, counted as Redis counts them (its
    /// `pauses` field), so that a resume applies to the pause it ended and never to a later one.
    pauses: HashMap<RunKey, u64>,
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

impl Worker {
    /// How many sessions this process has business with (see `SessionUse`).
    pub(crate) fn sessions_with_business(&self) -> usize {
        lock(&self.runs).sessions.len()
    }

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
        runs.pauses.remove(run);
        if runs.held.remove(run) {
            if let Some(session) = runs.sessions.get_mut(&run.session_id) {
                session.held = session.held.saturating_sub(1);
            }
        }
    }

    /// Numbers the pause `run` is about to record in Redis, one past its last.
    pub(crate) fn begin_pause(&self, run: &RunKey) -> u64 {
        let mut runs = lock(&self.runs);
        let number = runs.pauses.get(run).copied().unwrap_or_default() + 1;
        runs.pauses.insert(run.clone(), number);
        number
    }

    /// Forgets pause `number` of `run`, which Redis refused (or may not have recorded).
    pub(crate) fn abandon_pause(&self, run: &RunKey, number: u64) {
        self.number_pause(run, number, number - 1);
    }

    /// Renumbers the pause of `run` numbered `expected` as Redis numbered it.
    pub(crate) fn number_pause(&self, run: &RunKey, expected: u64, recorded: u64) {
        let mut runs = lock(&self.runs);
        if runs.pauses.get(run) == Some(&expected) {
            runs.pauses.insert(run.clone(), recorded);
        }
    }

    /// Applies to this process's mirror a resume that Redis recorded for pause `number` of `run` (told by a
    /// notification or found by the reconcile), unless `run` has paused again since (a later pause is not
    /// resumed by it). `value` is the resume's JSON text, "" for none.
    pub(crate) fn apply_resume(&self, run: &RunKey, number: &str, value: &str) {
        let current = lock(&self.runs).pauses.get(run).copied();
        if current.is_none() || number.parse::<u64>().ok() != current {
            return;
        }
        if let Some(mirror) = self.mirrors.get(&run.session_id) {
            let value = (!value.is_empty()).then(|| value.to_owned());
            mirror.tracker.resume(&run.task_id, value);
        }
    }

    /// Applies to this process's mirror the end of `run` recorded in Redis by id (by another process, say),
    /// so that a runner waiting for its resume learns that none will come.
    pub(crate) fn apply_end(&self, run: &RunKey) {
        if !lock(&self.runs).held.contains(run) {
            return;
        }
        if let Some(mirror) = self.mirrors.get(&run.session_id) {
            mirror.tracker.end(&run.task_id, Ok(None));
        }
    }

    fn held_runs(&self) -> Vec<RunKey> {
        lock(&self.runs).held.iter().cloned().collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        for task in lock(&self.background).drain(..) {
            task.abort();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded state stays consistent across a panic (each change is one insert or remove).
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
