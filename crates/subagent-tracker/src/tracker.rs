//! The in-memory tracker of one session's subagent tasks.
//!
//! # Lock order
//!
//! A task's record lock (see `task_entry`) may be held while one of the session's own locks is taken: a shard
//! of the id map, a stripe of the pending index, or the retention window. Those three are leaves: none is
//! held while any other lock is taken. (The loom models see the stripes and the window, but not the id map's
//! shard locks, so under a shard lock the core does nothing but the map operation, reads of the run there, and
//! the store of a late escalation's flag on a finished record.)

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_utils::CachePadded;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
// Seeded per process, so ids chosen by users cannot be crafted to collide; several times faster than SipHash
// on the short keys used here (measured in BENCHMARKS.md).
use foldhash::fast::RandomState;

use crate::cancel_signal::{CancelRecord, Dependent, Registration, SourceLink};
use crate::deadline_timer::{self, Expire};
use crate::delivery::Delivery;
use crate::event_bus::{EventBus, EventSubscription, DEFAULT_EVENT_BUFFER};
use crate::pending_index::PendingIndex;
use crate::registry::RegistryShared;
use crate::retained_run::{FinishedRun, Run};
use crate::retention::{FinishedTasks, DEFAULT_MAX_FINISHED_TASKS};
use crate::sync::AtomicU64;
use crate::task_entry::{
    Admission, CancelOutcome, CancelRequest, ClaimRefusal, EndEffects, OpenRefusal, RunnerEnd,
    TaskEntry,
};
use crate::task_id::{generate_id, validate_task_id};
use crate::time::Deadline;
use crate::{
    CancelCause, ClaimProblem, SubagentStatus, SubagentTaskHandle, SubagentTaskSnapshot,
    SubagentTaskToken, TaskStart, TrackerError,
};

/// The cancel reason used when a caller gives none.
pub const DEFAULT_CANCEL_REASON: &str = "cancelled";

/// The cancel reason of a task whose deadline passed.
pub const DEADLINE_REASON: &str = "deadline exceeded";

/// The cancel reason of the tasks a batch had opened when another thread's change to the session (a start of
/// one of its ids, the end of a parent it names, a close) refused the rest of it.
pub const BATCH_REFUSED_REASON: &str = "the batch this task was started in was refused";

/// The start of the error of a reservation that no runner claimed within its claim timeout.
pub const CLAIM_TIMEOUT_ERROR: &str = "no runner claimed the task within its claim timeout";

/// The error of a reservation that no runner claimed within `claim_timeout`.
#[must_use]
pub fn claim_timeout_error(claim_timeout: Duration) -> String {
    format!(
        "{CLAIM_TIMEOUT_ERROR} of {} seconds",
        claim_timeout.as_secs_f64()
    )
}

/// Settings of a tracker, fixed at construction.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TrackerConfig {
    /// How many finished tasks are kept for queries; the oldest finished is evicted first. Unfinished tasks are
    /// never evicted.
    pub max_finished_tasks: usize,
    /// How many events each subscriber may hold before it starts missing the oldest.
    pub event_buffer: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            max_finished_tasks: DEFAULT_MAX_FINISHED_TASKS,
            event_buffer: DEFAULT_EVENT_BUFFER,
        }
    }
}

impl TrackerConfig {
    /// The default settings with `max_finished_tasks` retained.
    #[must_use]
    pub fn with_max_finished_tasks(mut self, max_finished_tasks: usize) -> Self {
        self.max_finished_tasks = max_finished_tasks;
        self
    }

    /// These settings with `event_buffer` events per subscriber (at least one).
    #[must_use]
    pub fn with_event_buffer(mut self, event_buffer: usize) -> Self {
        self.event_buffer = event_buffer.max(1);
        self
    }
}

/// Tracks the subagent tasks of one session in memory: their cancellation, their status and their lifecycle.
///
/// Cheap to clone (clones share the session) and safe to use from any number of threads. Every method takes
/// `&self`; no method holds a lock across tasks, so work on different tasks proceeds in parallel.
///
/// The rules it keeps, for every interleaving of calls:
/// - the first transition out of [`Queued`](crate::SubagentStatus::Queued) or
///   [`Running`](crate::SubagentStatus::Running) wins, and a late end never replaces `Cancelled`;
/// - cancelling a task cancels its pending descendants (in time proportional to the subtree, and through
///   descendants that already finished), and a child started under a cancelled parent starts cancelled;
/// - a cancel before a reserved task is claimed is never lost: the claim hands over a token that has fired;
/// - at most `max_finished_tasks` finished tasks are retained, so memory stays bounded.
///
/// Waiters are woken and callbacks run in the calling thread once the call's locks are released (wake-ups
/// first), except for deadlines, whose wake-ups and callbacks run in a thread of their own.
pub struct InMemorySubagentTaskTracker<V = String> {
    shared: Arc<TrackerShared<V>>,
}

impl<V> InMemorySubagentTaskTracker<V> {
    pub(crate) fn shared(&self) -> &Arc<TrackerShared<V>> {
        &self.shared
    }
}

impl<V> Clone for InMemorySubagentTaskTracker<V> {
    fn clone(&self) -> Self {
        InMemorySubagentTaskTracker {
            shared: self.shared.clone(),
        }
    }
}

/// A retained run in the id table. The start sequence sits beside the pointer so that eviction, which visits
/// runs that finished long ago, can tell a stale record without touching the run's (cold) memory.
struct RetainedRun<V> {
    sequence: u64,
    run: Run<V>,
}

pub(crate) struct TrackerShared<V> {
    session_id: Arc<str>,
    config: TrackerConfig,
    tasks: DashMap<Arc<str>, RetainedRun<V>, RandomState>,
    /// The pending (queued or running, not cancelled) tasks.
    pending: PendingIndex<V>,
    // The two fields every lifecycle writes sit on cache lines of their own (which also puts the `Arc`'s
    // reference counts on theirs): a write by one thread then never evicts the read-mostly fields above from
    // the other threads' caches.
    finished: CachePadded<FinishedTasks<V>>,
    next_sequence: CachePadded<AtomicU64>,
    /// Set once, by `close`, to the reason given.
    closed: OnceLock<Arc<str>>,
    bus: Arc<EventBus>,
    /// The registry that lists this session, which it leaves once closed with every task finished.
    pub(crate) registry: OnceLock<Weak<RegistryShared<V>>>,
}

/// How a task of a batch will begin, foreseen before the batch opens anything.
struct BeginsAs {
    cancelled: bool,
    /// A reservation that begins cancelled: it finishes as it opens.
    finishes: bool,
    deadline: Option<Deadline>,
}

/// How a task enters the session.
#[derive(Clone, Copy)]
enum Opening {
    /// With its runner, which holds the handle.
    Start,
    /// Queued for a runner to claim, failing if none has within `claim_timeout`.
    Reserve { claim_timeout: Option<Duration> },
}

impl<V: Clone + Send + Sync + 'static> InMemorySubagentTaskTracker<V> {
    /// A tracker for a session with a generated id and the default settings.
    #[must_use]
    pub fn new() -> Self {
        Self::with_config(None, TrackerConfig::default())
    }

    /// A tracker for the session `session_id` (generated when `None`). The id is not checked here; bindings
    /// check user input with [`validate_task_id`](crate::validate_task_id).
    #[must_use]
    pub fn with_config(session_id: Option<&str>, config: TrackerConfig) -> Self {
        let session_id: Arc<str> = match session_id {
            Some(session_id) => Arc::from(session_id),
            None => Arc::from(generate_id()),
        };
        InMemorySubagentTaskTracker {
            shared: Arc::new(TrackerShared {
                session_id,
                finished: CachePadded::new(FinishedTasks::new(config.max_finished_tasks)),
                config,
                tasks: DashMap::with_hasher(RandomState::default()),
                pending: PendingIndex::new(),
                next_sequence: CachePadded::new(AtomicU64::new(0)),
                closed: OnceLock::new(),
                bus: Arc::new(EventBus::new()),
                registry: OnceLock::new(),
            }),
        }
    }

    /// The session's id.
    #[must_use]
    pub fn session_id(&self) -> &Arc<str> {
        &self.shared.session_id
    }

    /// The settings the tracker was made with.
    #[must_use]
    pub fn config(&self) -> &TrackerConfig {
        &self.shared.config
    }

    /// Starts a task and returns the runner's handle to it.
    ///
    /// # Errors
    /// - [`TrackerError::InvalidId`] for an empty or oversized id;
    /// - [`TrackerError::DuplicateTask`] when the id is live (a finished id may be started again, and the new
    ///   run replaces the old snapshot);
    /// - [`TrackerError::UnknownTask`] when the parent is unknown, [`TrackerError::ParentFinished`] when it
    ///   has finished;
    /// - [`TrackerError::SessionClosed`] after [`close`](Self::close).
    ///
    /// A task started under a parent that is cancelled but not finished starts `Cancelled`, with the parent's
    /// reason and origin. A start that races `close` either fails or returns a task that is already cancelled.
    pub fn start(&self, start: TaskStart<V>) -> Result<SubagentTaskHandle<V>, TrackerError> {
        let entry = self.shared.open(start, Opening::Start)?;
        Ok(SubagentTaskHandle::new(self.shared.clone(), entry))
    }

    /// Starts many tasks in one call, and returns their runners' handles in the batch's order: all of them or
    /// none (contract §22). A task may name as parent a task earlier in the batch; a child opens under its
    /// parent's lock, so a cancel of that parent reaches every child of the batch, whenever it lands.
    ///
    /// # Errors
    /// As [`start`](Self::start) for the first task that would be refused, and
    /// [`TrackerError::DuplicateInBatch`] for an id named twice: each refuses the whole batch before anything
    /// changes. Only a change made meanwhile by another thread (a start of one of its ids, the end of a parent
    /// it names, a close) can refuse it part way; the tasks it had opened are then cancelled with
    /// [`BATCH_REFUSED_REASON`] and finished, and the error is returned.
    pub fn start_batch(
        &self,
        starts: Vec<TaskStart<V>>,
    ) -> Result<Vec<SubagentTaskHandle<V>>, TrackerError> {
        let batch = starts
            .into_iter()
            .map(|start| (start, Opening::Start))
            .collect();
        let entries = self.shared.open_batch(batch)?;
        Ok(entries
            .into_iter()
            .map(|entry| SubagentTaskHandle::new(self.shared.clone(), entry))
            .collect())
    }

    /// Reserves many tasks in one call, each with its claim timeout, and returns their ids in the batch's
    /// order: all of them or none, as [`start_batch`](Self::start_batch).
    ///
    /// # Errors
    /// As [`start_batch`](Self::start_batch).
    pub fn reserve_batch(
        &self,
        reservations: Vec<(TaskStart<V>, Option<Duration>)>,
    ) -> Result<Vec<Arc<str>>, TrackerError> {
        let batch = reservations
            .into_iter()
            .map(|(start, claim_timeout)| (start, Opening::Reserve { claim_timeout }))
            .collect();
        let entries = self.shared.open_batch(batch)?;
        Ok(entries
            .into_iter()
            .map(|entry| entry.task_id.clone())
            .collect())
    }

    /// Reserves a task for a runner to claim later, and returns its id. The task is
    /// [`Queued`](crate::SubagentStatus::Queued): pending, listed, holding its id, able to have children, and reached
    /// by cancels and deadlines as a running task is. A cancel finishes it at once.
    ///
    /// A reservation not claimed within `claim_timeout` fails with an error starting with
    /// [`CLAIM_TIMEOUT_ERROR`].
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn reserve(
        &self,
        start: TaskStart<V>,
        claim_timeout: Option<Duration>,
    ) -> Result<Arc<str>, TrackerError> {
        let entry = self
            .shared
            .open(start, Opening::Reserve { claim_timeout })?;
        Ok(entry.task_id.clone())
    }

    /// Claims a reserved task for its runner: `Queued` becomes `Running`, and the runner gets the handle. Of
    /// many concurrent claims of one task, exactly one succeeds.
    ///
    /// A reservation cancelled before its claim is claimed all the same: its handle's token has fired (the
    /// task is already finished), so the runner stops at its first checkpoint.
    ///
    /// # Errors
    /// - [`TrackerError::UnknownTask`] for an id that is not retained;
    /// - [`TrackerError::NotClaimable`] for a task claimed before, started with a runner, or ended unclaimed
    ///   (its claim timeout passed, or its end was recorded by id).
    pub fn claim(&self, task_id: &str) -> Result<SubagentTaskHandle<V>, TrackerError> {
        let shared = &self.shared;
        let entry = match shared.lookup(task_id) {
            Some(Run::Live(entry)) => entry,
            Some(Run::Finished(run)) => {
                return Err(shared.not_claimable(&run.task_id, run.claim_refusal(), run.status()))
            }
            None => return Err(TrackerError::unknown_task(task_id, &shared.session_id)),
        };
        let mut delivery = Delivery::default();
        let claimed = entry.claim(&shared.bus, &mut delivery);
        delivery.deliver();
        match claimed {
            Ok(claim_timeout_key) => {
                if let Some(key) = claim_timeout_key {
                    deadline_timer::unschedule(key);
                }
                Ok(SubagentTaskHandle::new(shared.clone(), entry))
            }
            Err(refusal) => Err(shared.not_claimable(&entry.task_id, refusal, entry.status())),
        }
    }

    /// Cancels a pending task and its pending descendants.
    ///
    /// Returns true exactly when this call moved the task from `Queued` or `Running` to `Cancelled`: false for
    /// an unknown id, a finished task, or a task already cancelled. A queued task is finished at once. Of many concurrent cancels of one task, exactly one
    /// returns true. `reason` defaults to [`DEFAULT_CANCEL_REASON`].
    pub fn cancel(&self, task_id: &str, reason: Option<&str>) -> bool {
        match self.shared.live_entry(task_id) {
            Some(entry) => self.shared.cancel_entry(&entry, reason),
            None => false,
        }
    }

    /// Applies to the task `task_id` a cancel that was decided elsewhere (by another process, through a shared
    /// store), recording the cancel's own `cause` and `origin`, and cascading as any cancel does. For a store
    /// whose listener serves every task: the wake-ups and callbacks run in a thread of their own, never in the
    /// caller's. True exactly when this moved the task.
    pub fn apply_remote_cancel(
        &self,
        task_id: &str,
        reason: &str,
        cause: CancelCause,
        origin: &str,
    ) -> bool {
        let Some(entry) = self.shared.live_entry(task_id) else {
            return false;
        };
        let mut delivery = Delivery::default();
        let moved = self.shared.cancel_trees(
            [entry],
            &Arc::from(reason),
            cause,
            Some(&Arc::from(origin)),
            &mut delivery,
        );
        delivery.deliver_in_own_thread();
        moved > 0
    }

    /// Records the end of the task `task_id` without its handle, as its runner would: `Ok(result)` completes
    /// it, `Err(error)` fails it. For trackers fed by an event stream of starts and ends.
    ///
    /// The first transition out of `Queued` or `Running` wins, as for the handle: true exactly when this call
    /// moved the task to `Completed` or `Failed`. A cancelled task stays `Cancelled` and becomes finished, keeping what
    /// was reported (false); an unknown or finished id changes nothing (false). The runner's handle, if any,
    /// then finds the task finished.
    pub fn end(&self, task_id: &str, outcome: Result<Option<V>, &str>) -> bool {
        let Some(entry) = self.shared.live_entry(task_id) else {
            return false;
        };
        let end = match outcome {
            Ok(result) => RunnerEnd::Completed(result),
            Err(error) => RunnerEnd::Failed(Arc::from(error)),
        };
        self.shared.end(&entry, end, Delivery::deliver) == Some(true)
    }

    /// Cancels every pending task of the session and returns how many it moved to `Cancelled`.
    pub fn cancel_all(&self, reason: Option<&str>) -> usize {
        self.shared.cancel_running(&cancel_reason(reason))
    }

    /// Cancels every running task, like [`cancel_all`](Self::cancel_all), and refuses new starts from then on.
    /// Closing again cancels what may have started since and keeps the first reason.
    /// A session in a registry leaves it once closed with every task finished.
    pub fn close(&self, reason: Option<&str>) -> usize {
        let reason = self
            .shared
            .closed
            .get_or_init(|| cancel_reason(reason))
            .clone();
        let moved = self.shared.cancel_running(&reason);
        self.shared.leave_registry_if_drained();
        moved
    }

    /// True once [`close`](Self::close) has been called.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared.closed.get().is_some()
    }

    /// A snapshot of the retained task `task_id`, or `None`. Copies that one task only.
    #[must_use]
    pub fn get(&self, task_id: &str) -> Option<SubagentTaskSnapshot<V>> {
        self.shared
            .lookup(task_id)
            .map(|run| run.snapshot(&self.shared.session_id))
    }

    /// Snapshots of every retained task, in start order.
    #[must_use]
    pub fn tasks(&self) -> Vec<SubagentTaskSnapshot<V>> {
        self.shared
            .retained_runs()
            .iter()
            .map(|run| run.snapshot(&self.shared.session_id))
            .collect()
    }

    /// Snapshots of the pending (`Queued` and `Running`) tasks, in start order. Costs O(p log p) in the number
    /// p of pending tasks, whatever the number retained.
    #[must_use]
    pub fn pending(&self) -> Vec<SubagentTaskSnapshot<V>> {
        self.shared
            .pending
            .entries()
            .iter()
            .map(|entry| entry.snapshot(&self.shared.session_id))
            // A task cancelled a moment ago may still be indexed; the snapshot tells.
            .filter(|snapshot| !snapshot.status.is_terminal())
            .collect()
    }

    /// How many tasks are retained (pending, cancelled-but-unfinished and finished).
    #[must_use]
    pub fn retained_count(&self) -> usize {
        self.shared.tasks.len()
    }

    /// Waits until the task `task_id` has finished and returns its final snapshot.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] when no task with that id is retained at the call.
    pub async fn wait_finished(
        &self,
        task_id: &str,
    ) -> Result<SubagentTaskSnapshot<V>, TrackerError> {
        let watch = self
            .watch(task_id)
            .ok_or_else(|| TrackerError::unknown_task(task_id, &self.shared.session_id))?;
        Ok(watch.finished().await)
    }

    /// A [`TaskWatch`](crate::TaskWatch) on the current run of `task_id`, or `None` for an unknown id.
    #[must_use]
    pub fn watch(&self, task_id: &str) -> Option<crate::TaskWatch<V>> {
        self.shared
            .lookup(task_id)
            .map(|run| crate::TaskWatch::new(run, self.shared.session_id.clone()))
    }

    /// A watch on the current run of `task_id`.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] for an unknown id.
    pub fn watch_or_error(&self, task_id: &str) -> Result<crate::TaskWatch<V>, TrackerError> {
        self.watch(task_id)
            .ok_or_else(|| TrackerError::unknown_task(task_id, &self.shared.session_id))
    }

    /// Subscribes to lifecycle events from this moment on, with the configured per-subscriber buffer.
    #[must_use]
    pub fn subscribe(&self) -> EventSubscription {
        self.shared.bus.subscribe(self.shared.config.event_buffer)
    }

    /// True when this tracker and `other` are handles on the same session.
    #[must_use]
    pub fn same_session(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// A number that tells this session apart from every other live one (for hashing by identity).
    #[must_use]
    pub fn session_key(&self) -> usize {
        Arc::as_ptr(&self.shared).addr()
    }

    /// Calls `visit` with the metadata and result of every retained task (for a binding that must show its
    /// garbage collector what the tracker holds). `visit` runs under the task's record lock, so it must not
    /// call back into the tracker.
    pub fn visit_values(&self, mut visit: impl FnMut(&V)) {
        for run in self.shared.retained_runs() {
            run.visit_values(&mut visit);
        }
    }
}

impl<V: Clone + Send + Sync + 'static> Default for InMemorySubagentTaskTracker<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone> TrackerShared<V> {
    pub(crate) fn session_id(&self) -> &Arc<str> {
        &self.session_id
    }

    fn lookup(&self, task_id: &str) -> Option<Run<V>> {
        // The map guard is dropped before the run is used: no task lock is ever taken under a map lock.
        self.tasks.get(task_id).map(|item| item.value().run.clone())
    }

    /// The entry of `task_id` while it can still change: `None` for an unknown id or a collapsed run (which
    /// has finished, so no cancel or end reaches it).
    fn live_entry(&self, task_id: &str) -> Option<Arc<TaskEntry<V>>> {
        self.lookup(task_id).and_then(Run::live)
    }

    /// Every retained run, in start order, copied out of the map so that no map lock is held after.
    fn retained_runs(&self) -> Vec<Run<V>> {
        let mut runs: Vec<Run<V>> = self
            .tasks
            .iter()
            .map(|item| item.value().run.clone())
            .collect();
        runs.sort_unstable_by_key(Run::sequence);
        runs
    }

    fn not_claimable(
        &self,
        task_id: &Arc<str>,
        refusal: ClaimRefusal,
        status: SubagentStatus,
    ) -> TrackerError {
        TrackerError::NotClaimable {
            task_id: task_id.clone(),
            session_id: self.session_id.clone(),
            problem: match refusal {
                ClaimRefusal::AlreadyClaimed => ClaimProblem::AlreadyClaimed,
                ClaimRefusal::Ended => ClaimProblem::Ended(status),
            },
        }
    }

    /// Records that `entry`'s runner was stopped by force, on the entry and, once it has finished, on the
    /// record it may have collapsed into.
    pub(crate) fn record_escalation(&self, entry: &TaskEntry<V>) {
        entry.record_escalation(|| {
            if let Some(item) = self.tasks.get(&entry.task_id) {
                if let Run::Finished(run) = &item.value().run {
                    if run.sequence == entry.sequence {
                        run.record_escalation();
                    }
                }
            }
        });
    }

    /// Indexes a new entry, unless its id is live. Runs under the new entry's record lock when `open` takes
    /// it (not for a parentless start that nobody listens to). A finished run it replaces goes to `replaced`,
    /// for the caller to drop once no lock is held: an eviction may have let go of every other reference.
    fn make_visible(
        &self,
        entry: &Arc<TaskEntry<V>>,
        starts_cancelled: bool,
        replaced: &mut Vec<Run<V>>,
    ) -> Result<(), OpenRefusal> {
        loop {
            match self.tasks.entry(entry.task_id.clone()) {
                Entry::Occupied(occupied) if !occupied.get().run.is_finished() => {
                    return Err(OpenRefusal::DuplicateTask)
                }
                // A finished run of this id stops counting against the retention bound before it is replaced,
                // so that a restart never evicts another task and a closed session never counts the new run
                // as finished; out of the map's lock, which nests no other. Then the entry is looked at again:
                // the run may have collapsed into its record meanwhile, and the record is forgotten in turn.
                Entry::Occupied(occupied)
                    if replaced
                        .last()
                        .is_none_or(|forgotten| !forgotten.is(&occupied.get().run)) =>
                {
                    let previous = occupied.get().run.clone();
                    drop(occupied);
                    self.finished.forget(&previous);
                    #[cfg(all(test, not(subagent_tracker_loom)))]
                    tests::pause(&tests::PAUSE_AFTER_FORGETTING, 20);
                    replaced.push(previous);
                }
                slot => {
                    slot.insert(RetainedRun {
                        sequence: entry.sequence,
                        run: Run::Live(entry.clone()),
                    });
                    break;
                }
            }
        }
        #[cfg(all(test, not(subagent_tracker_loom)))]
        tests::pause(&tests::PAUSE_BETWEEN_MAP_AND_INDEX, 2);
        if !starts_cancelled {
            // Out of the map's lock, so another thread may already have found the task by id and ended or
            // cancelled it, its removal from the index finding nothing. The stripe's lock orders the two:
            // whichever comes second sees the other's work, so a task that stopped being pending meanwhile is
            // taken out again here.
            self.pending.insert(entry);
            if !entry.status().is_pending() {
                self.pending.remove(entry);
            }
        }
        Ok(())
    }

    /// Cancels each pending root with its pending descendants, all at one instant; returns how many tasks
    /// moved (for a single root: zero exactly when that root was not pending). Queued tasks it reaches are
    /// finished too, once the whole cascade has been cancelled.
    ///
    /// A root records `cause` and names `origin` (itself when `None`); its descendants record `Parent` and
    /// name the root's origin. A session-wide cancel reaches every task in its own right, so each records
    /// `Session` and names itself. What it wakes goes to `delivery`.
    fn cancel_trees(
        &self,
        roots: impl IntoIterator<Item = Arc<TaskEntry<V>>>,
        reason: &Arc<str>,
        cause: CancelCause,
        origin: Option<&Arc<str>>,
        delivery: &mut Delivery,
    ) -> usize {
        let request = CancelRequest {
            reason: reason.clone(),
            at: SystemTime::now(),
        };
        let mut stack = Vec::new();
        let mut children = Vec::new();
        let mut finished_unclaimed = Vec::new();
        let mut moved = 0;
        for root in roots {
            let root_origin = origin.unwrap_or(&root.task_id).clone();
            let root_sequence = root.sequence;
            stack.push(root);
            while let Some(entry) = stack.pop() {
                let (entry_origin, entry_cause) = match cause {
                    CancelCause::Session => (&entry.task_id, CancelCause::Session),
                    _ if entry.sequence == root_sequence => (&root_origin, cause),
                    _ => (&root_origin, CancelCause::Parent),
                };
                let outcome = entry.cancel(
                    &request,
                    entry_origin,
                    entry_cause,
                    &self.bus,
                    delivery,
                    &mut children,
                );
                if let CancelOutcome::NotPending = outcome {
                    continue;
                }
                moved += 1;
                self.pending.remove(&entry);
                stack.append(&mut children);
                if let CancelOutcome::CancelledUnclaimed(effects) = outcome {
                    finished_unclaimed.push((entry, effects));
                }
            }
        }
        // After the cascade, so that the children these leave behind are all cancelled and none is adopted; in
        // start order, so that which of them retention evicts first does not depend on the walk.
        finished_unclaimed.sort_unstable_by_key(|(entry, _)| entry.sequence);
        for (entry, effects) in finished_unclaimed {
            self.settle(&entry, effects, delivery);
        }
        moved
    }

    fn cancel_running(&self, reason: &Arc<str>) -> usize {
        let running = self.pending.entries();
        let mut delivery = Delivery::default();
        let moved = self.cancel_trees(running, reason, CancelCause::Session, None, &mut delivery);
        delivery.deliver();
        moved
    }

    pub(crate) fn cancel_entry(&self, entry: &Arc<TaskEntry<V>>, reason: Option<&str>) -> bool {
        let mut delivery = Delivery::default();
        let moved = self.cancel_trees(
            [entry.clone()],
            &cancel_reason(reason),
            CancelCause::Requested,
            None,
            &mut delivery,
        );
        delivery.deliver();
        moved > 0
    }

    /// Records the runner's end of `entry` and does the session's bookkeeping (see `settle`); the wake-ups go
    /// to `deliver`. Returns `None` if it had already finished, otherwise whether this end was the transition.
    pub(crate) fn end(
        &self,
        entry: &Arc<TaskEntry<V>>,
        end: RunnerEnd<V>,
        deliver: impl FnOnce(Delivery),
    ) -> Option<bool> {
        let mut delivery = Delivery::default();
        let ended = self.end_into(entry, end, &mut delivery);
        deliver(delivery);
        ended
    }

    fn end_into(
        &self,
        entry: &Arc<TaskEntry<V>>,
        end: RunnerEnd<V>,
        delivery: &mut Delivery,
    ) -> Option<bool> {
        let effects = entry.end(end, &self.bus, delivery)?;
        let transitioned = effects.transitioned;
        self.settle(entry, effects, delivery);
        Some(transitioned)
    }

    /// The session's bookkeeping for a task that has just finished: the pending index, the tree (its pending
    /// children go to its nearest unfinished ancestor), retention, its timers, and the registry.
    fn settle(&self, entry: &Arc<TaskEntry<V>>, effects: EndEffects<V>, delivery: &mut Delivery) {
        if effects.transitioned {
            self.pending.remove(entry);
        }
        if let Some(parent) = &effects.parent {
            parent.forget_child(entry.sequence);
        }
        // A cancelled child needs no adopter: no cancel can reach it again.
        let orphans: Vec<_> = effects
            .orphans
            .into_iter()
            .filter(|orphan| orphan.status().is_pending())
            .collect();
        if !orphans.is_empty() {
            self.adopt(effects.parent, orphans, delivery);
        }
        #[cfg(all(test, not(subagent_tracker_loom)))]
        tests::pause(&tests::PAUSE_BEFORE_COLLAPSE, 5);
        // A session that keeps no finished run (a store's local mirror) evicts it at once: nothing to collapse.
        let collapsed = if self.config.max_finished_tasks == 0 {
            None
        } else {
            entry.collapse(|run| self.install_finished(entry, run))
        };
        let run = collapsed.map_or_else(|| Run::Live(entry.clone()), Run::Finished);
        let released = self.finished.record(&run);
        if let Some(evicted) = &released.evicted {
            self.tasks.remove_if(evicted.task_id(), |_, retained| {
                retained.sequence == evicted.sequence()
            });
        }
        // A finished task leaves nothing behind: no timer entry, no registration on the tokens it linked to.
        for key in [effects.deadline_key, effects.claim_timeout_key]
            .into_iter()
            .flatten()
        {
            deadline_timer::unschedule(key);
        }
        self.leave_registry_if_drained();
        // Dropped here, with no lock held: the last reference to an evicted run may own foreign objects.
        drop(released);
    }

    /// Puts the finished record `run` in the id map in place of `entry`, unless its id has been started again.
    /// Runs under `entry`'s record lock (see `TaskEntry::collapse`).
    fn install_finished(&self, entry: &Arc<TaskEntry<V>>, run: &Arc<FinishedRun<V>>) -> bool {
        let Some(mut item) = self.tasks.get_mut(&entry.task_id) else {
            return false;
        };
        let current = item.value_mut();
        if !matches!(&current.run, Run::Live(live) if Arc::ptr_eq(live, entry)) {
            return false;
        }
        // The entry's own reference is the caller's too, so this is never the last one (no drop under the lock).
        current.run = Run::Finished(run.clone());
        true
    }

    /// A closed session in a registry leaves it once none of its tasks is unfinished.
    fn leave_registry_if_drained(&self) {
        if self.closed.get().is_none() {
            return;
        }
        let Some(registry) = self.registry.get().and_then(Weak::upgrade) else {
            return;
        };
        // Every retained run is either counted by the retention window or unfinished; a run being recorded or
        // evicted right now is counted on the unfinished side, so the last end to finish its bookkeeping is
        // the one that sees zero.
        if self.tasks.len() <= self.finished.retained() {
            registry.leave(&self.session_id, self);
        }
    }

    /// Hands the pending children of a task that finished to its nearest unfinished ancestor, so that the
    /// ancestor's cancel still reaches them; a cancelled ancestor cancels them instead.
    fn adopt(
        &self,
        mut adopter: Option<Arc<TaskEntry<V>>>,
        orphans: Vec<Arc<TaskEntry<V>>>,
        delivery: &mut Delivery,
    ) {
        while let Some(candidate) = adopter {
            match candidate.admit(&orphans) {
                Admission::Admitted => {
                    for orphan in &orphans {
                        if !orphan.set_parent(&candidate) {
                            candidate.forget_child(orphan.sequence);
                        }
                    }
                    return;
                }
                Admission::Cancelled(cancel) => {
                    self.cancel_trees(
                        orphans,
                        &cancel.reason,
                        CancelCause::Parent,
                        Some(&cancel.origin),
                        delivery,
                    );
                    return;
                }
                Admission::Finished(next) => adopter = next,
            }
        }
        // No ancestor is left: the orphans are roots now.
        for orphan in &orphans {
            orphan.clear_parent();
        }
    }

    pub(crate) fn record_progress(&self, entry: &TaskEntry<V>, message: &str) -> bool {
        let mut delivery = Delivery::default();
        let recorded = entry.record_progress(message, &self.bus, &mut delivery);
        delivery.deliver();
        recorded
    }
}

impl<V: Clone + Send + Sync + 'static> TrackerShared<V> {
    /// Opens every task of a batch, or none: everything the batch and the session's state refuse is found
    /// before the first task opens. The checks run in the order the Redis store runs them: every task's ids
    /// and the batch's repeats first, then the session, then each task in turn.
    fn open_batch(
        self: &Arc<Self>,
        mut batch: Vec<(TaskStart<V>, Opening)>,
    ) -> Result<Vec<Arc<TaskEntry<V>>>, TrackerError> {
        let mut named = std::collections::HashSet::with_capacity_and_hasher(
            batch.len(),
            RandomState::default(),
        );
        for (start, _) in &mut batch {
            let task_id = start
                .task_id
                .get_or_insert_with(|| Arc::from(generate_id()));
            validate_task_id("task_id", task_id)?;
            if let Some(parent_id) = &start.parent_id {
                validate_task_id("parent_id", parent_id)?;
            }
        }
        for (start, _) in &batch {
            let task_id = start.task_id.clone().unwrap_or_default();
            if !named.insert(task_id.clone()) {
                return Err(TrackerError::DuplicateInBatch { task_id });
            }
        }
        if self.closed.get().is_some() {
            return Err(TrackerError::SessionClosed {
                session_id: self.session_id.clone(),
            });
        }
        // How each task of the batch will begin: a reservation that begins cancelled finishes as it opens, so
        // it can be no later task's parent.
        let mut opened_here: std::collections::HashMap<Arc<str>, BeginsAs, RandomState> =
            std::collections::HashMap::with_capacity_and_hasher(
                batch.len(),
                RandomState::default(),
            );
        let now = Instant::now();
        for (start, opening) in &batch {
            let task_id = start.task_id.clone().unwrap_or_default();
            if self
                .lookup(&task_id)
                .is_some_and(|retained| !retained.is_finished())
            {
                return Err(TrackerError::DuplicateTask {
                    task_id,
                    session_id: self.session_id.clone(),
                });
            }
            let (inherits_cancel, inherited_deadline) = match &start.parent_id {
                None => (false, None),
                Some(parent_id) => {
                    let parent_finished = || TrackerError::ParentFinished {
                        parent_id: Arc::from(parent_id.as_str()),
                        session_id: self.session_id.clone(),
                    };
                    if let Some(here) = opened_here.get(parent_id.as_str()) {
                        if here.finishes {
                            return Err(parent_finished());
                        }
                        (here.cancelled, here.deadline)
                    } else {
                        let parent = self.lookup(parent_id).ok_or_else(|| {
                            TrackerError::unknown_task(parent_id, &self.session_id)
                        })?;
                        match parent {
                            Run::Live(parent) if !parent.is_finished() => {
                                (parent.is_cancelled(), parent.deadline)
                            }
                            _ => return Err(parent_finished()),
                        }
                    }
                }
            };
            let (inherits_cancel, inherited_deadline) = if start.detached {
                (false, None)
            } else {
                (inherits_cancel, inherited_deadline)
            };
            let deadline = match (start.deadline, inherited_deadline) {
                (Some(own), Some(inherited)) => Some(own.earlier(inherited)),
                (own, inherited) => own.or(inherited),
            };
            let cancelled = inherits_cancel
                || deadline.is_some_and(|deadline| deadline.instant <= now)
                || start.linked.iter().any(SubagentTaskToken::is_cancelled);
            let finishes = cancelled && matches!(opening, Opening::Reserve { .. });
            opened_here.insert(
                task_id,
                BeginsAs {
                    cancelled,
                    finishes,
                    deadline,
                },
            );
        }
        let mut opened: Vec<(Arc<TaskEntry<V>>, bool)> = Vec::with_capacity(batch.len());
        for (start, opening) in batch {
            let with_runner = matches!(opening, Opening::Start);
            match self.open(start, opening) {
                Ok(entry) => opened.push((entry, with_runner)),
                Err(refusal) => {
                    // Another thread changed the session after the checks (started one of these ids, ended or
                    // cancelled a parent, closed it): what the batch opened is cancelled and finished.
                    for (entry, with_runner) in opened {
                        self.cancel_entry(&entry, Some(BATCH_REFUSED_REASON));
                        if with_runner {
                            // No runner ever got its handle: the task is finished here, as a dropped handle's.
                            self.end(&entry, RunnerEnd::Stopped, Delivery::deliver);
                        }
                    }
                    return Err(refusal);
                }
            }
        }
        Ok(opened.into_iter().map(|(entry, _)| entry).collect())
    }

    /// Makes a new task live in the session (the common part of `start` and `reserve`).
    fn open(
        self: &Arc<Self>,
        start: TaskStart<V>,
        opening: Opening,
    ) -> Result<Arc<TaskEntry<V>>, TrackerError> {
        let task_id: Arc<str> = match start.task_id {
            Some(task_id) => {
                validate_task_id("task_id", &task_id)?;
                task_id
            }
            None => Arc::from(generate_id()),
        };
        if let Some(parent_id) = &start.parent_id {
            validate_task_id("parent_id", parent_id)?;
        }
        if self.closed.get().is_some() {
            return Err(TrackerError::SessionClosed {
                session_id: self.session_id.clone(),
            });
        }
        let parent = match &start.parent_id {
            Some(parent_id) => match self.lookup(parent_id) {
                Some(Run::Live(parent)) => Some(parent),
                Some(Run::Finished(_)) => {
                    return Err(TrackerError::ParentFinished {
                        parent_id: Arc::from(parent_id.as_str()),
                        session_id: self.session_id.clone(),
                    })
                }
                None => return Err(TrackerError::unknown_task(parent_id, &self.session_id)),
            },
            None => None,
        };
        // A child never outlives its parent's deadline, unless it was started out of the parent's reach.
        let inherited_deadline = parent
            .as_ref()
            .filter(|_| !start.detached)
            .and_then(|parent| parent.deadline);
        let deadline = match (start.deadline, inherited_deadline) {
            (Some(own), Some(inherited)) => Some(own.earlier(inherited)),
            (own, inherited) => own.or(inherited),
        };
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        // Built inside the allocation (`new_cyclic` allocates first), not on the stack and then copied: the
        // copy of this large struct was a measurable share of a lifecycle.
        let entry = Arc::new_cyclic(|_| {
            TaskEntry::new(
                sequence,
                task_id.clone(),
                parent.clone(),
                start.agent,
                start.description,
                start.metadata,
                deadline,
                start.detached,
                matches!(opening, Opening::Reserve { .. }),
                SystemTime::now(),
            )
        });
        let mut delivery = Delivery::default();
        let mut replaced = Vec::new();
        let opened = entry.open(
            parent.as_ref(),
            |starts_cancelled| self.make_visible(&entry, starts_cancelled, &mut replaced),
            &self.bus,
            &mut delivery,
        );
        // With no lock held: it may be the last reference to a run that owns foreign objects.
        drop(replaced);
        let finished_unclaimed = match opened {
            Ok(effects) => effects,
            Err(refusal) => {
                delivery.deliver();
                return Err(match refusal {
                    OpenRefusal::DuplicateTask => TrackerError::DuplicateTask {
                        task_id,
                        session_id: self.session_id.clone(),
                    },
                    OpenRefusal::ParentFinished => TrackerError::ParentFinished {
                        parent_id: Arc::from(start.parent_id.unwrap_or_default()),
                        session_id: self.session_id.clone(),
                    },
                });
            }
        };
        if let Some(effects) = finished_unclaimed {
            self.settle(&entry, effects, &mut delivery);
        }
        if let Opening::Reserve {
            claim_timeout: Some(claim_timeout),
        } = opening
        {
            self.arm_claim_timeout(&entry, claim_timeout);
        }
        if let Some(deadline) = deadline {
            self.arm_deadline(&entry, deadline, &mut delivery);
        }
        if !start.linked.is_empty() {
            self.link(&entry, start.linked, &mut delivery);
        }
        if let Some(reason) = self.closed.get() {
            // `close` may have swept the running tasks before this one became visible; finish its work here.
            self.cancel_trees(
                [entry.clone()],
                reason,
                CancelCause::Session,
                None,
                &mut delivery,
            );
        }
        delivery.deliver();
        Ok(entry)
    }

    /// Cancels `entry` when `deadline` passes, on the shared timer thread; at once if it already has.
    fn arm_deadline(
        self: &Arc<Self>,
        entry: &Arc<TaskEntry<V>>,
        deadline: Deadline,
        delivery: &mut Delivery,
    ) {
        if deadline.instant <= Instant::now() {
            self.cancel_trees(
                [entry.clone()],
                &Arc::from(DEADLINE_REASON),
                CancelCause::Deadline,
                None,
                delivery,
            );
            return;
        }
        let expiry = DeadlineExpiry {
            tracker: Arc::downgrade(self),
            entry: Arc::downgrade(entry),
        };
        let key = deadline_timer::schedule(deadline.instant, Box::new(expiry));
        if !entry.keep_deadline_key(key) {
            // It finished in the meantime and will never look for the key.
            deadline_timer::unschedule(key);
        }
    }

    /// Cancels `entry` when any of `sources` fires (at once if one already has), until `entry` finishes.
    fn link(
        self: &Arc<Self>,
        entry: &Arc<TaskEntry<V>>,
        sources: Vec<SubagentTaskToken>,
        delivery: &mut Delivery,
    ) {
        let action: Arc<dyn Dependent> = Arc::new(LinkedTask {
            tracker: Arc::downgrade(self),
            entry: Arc::downgrade(entry),
        });
        let mut links = Vec::new();
        for source in sources {
            match source.signal().add_dependent(Arc::downgrade(&action)) {
                Registration::Registered(registration) => links.push(SourceLink {
                    source: source.signal().clone(),
                    registration,
                    _action: Some(action.clone()),
                }),
                Registration::Fired(cancel) => {
                    action.source_fired(&cancel, delivery);
                    break;
                }
                Registration::Finished => {}
            }
        }
        delivery.release_sources(entry.signal.keep_sources(links));
    }
}

/// What a source fires for a task linked to it: a cancel of the task's tree, with the source's reason.
struct LinkedTask<V> {
    tracker: Weak<TrackerShared<V>>,
    entry: Weak<TaskEntry<V>>,
}

impl<V: Clone + Send + Sync + 'static> Dependent for LinkedTask<V> {
    fn source_fired(&self, source: &CancelRecord, delivery: &mut Delivery) {
        if let (Some(tracker), Some(entry)) = (self.tracker.upgrade(), self.entry.upgrade()) {
            tracker.cancel_trees([entry], &source.reason, CancelCause::Linked, None, delivery);
        }
    }
}

impl<V: Clone + Send + Sync + 'static> TrackerShared<V> {
    /// Fails `entry` if it is still queued when `claim_timeout` has passed.
    fn arm_claim_timeout(self: &Arc<Self>, entry: &Arc<TaskEntry<V>>, claim_timeout: Duration) {
        let Some(at) = Instant::now().checked_add(claim_timeout) else {
            return;
        };
        let expiry = ClaimExpiry {
            tracker: Arc::downgrade(self),
            entry: Arc::downgrade(entry),
            claim_timeout,
        };
        let key = deadline_timer::schedule(at, Box::new(expiry));
        if !entry.keep_claim_timeout_key(key) {
            deadline_timer::unschedule(key);
        }
    }
}

/// The timer's way back to a reservation whose claim timeout passed.
struct ClaimExpiry<V> {
    tracker: Weak<TrackerShared<V>>,
    entry: Weak<TaskEntry<V>>,
    claim_timeout: Duration,
}

impl<V: Clone + Send + Sync + 'static> Expire for ClaimExpiry<V> {
    fn expire(&self, delivery: &mut Delivery) {
        if let (Some(tracker), Some(entry)) = (self.tracker.upgrade(), self.entry.upgrade()) {
            let error = claim_timeout_error(self.claim_timeout);
            tracker.end_into(&entry, RunnerEnd::ClaimExpired(Arc::from(error)), delivery);
        }
    }
}

/// The timer's way back to a task whose deadline passed.
struct DeadlineExpiry<V> {
    tracker: Weak<TrackerShared<V>>,
    entry: Weak<TaskEntry<V>>,
}

impl<V: Clone + Send + Sync + 'static> Expire for DeadlineExpiry<V> {
    fn expire(&self, delivery: &mut Delivery) {
        if let (Some(tracker), Some(entry)) = (self.tracker.upgrade(), self.entry.upgrade()) {
            tracker.cancel_trees(
                [entry],
                &Arc::from(DEADLINE_REASON),
                CancelCause::Deadline,
                None,
                delivery,
            );
        }
    }
}

fn cancel_reason(reason: Option<&str>) -> Arc<str> {
    Arc::from(reason.unwrap_or(DEFAULT_CANCEL_REASON))
}

#[cfg(all(test, not(subagent_tracker_loom)))]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// Widens the window in which a start is in the id map but not yet in the pending index.
    pub(super) static PAUSE_BETWEEN_MAP_AND_INDEX: AtomicBool = AtomicBool::new(false);
    /// Widens the window between a run's end and its collapse into a record.
    pub(super) static PAUSE_BEFORE_COLLAPSE: AtomicBool = AtomicBool::new(false);
    /// Widens the window between a restart's forgetting the finished run it replaces and its look again.
    pub(super) static PAUSE_AFTER_FORGETTING: AtomicBool = AtomicBool::new(false);

    pub(super) fn pause(switch: &AtomicBool, milliseconds: u64) {
        if switch.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(milliseconds));
        }
    }

    /// An end by id that finds a task between its entering the id map and its entering the pending index
    /// must not leave it in the index for good (the start takes it out again).
    #[test]
    fn an_end_racing_a_start_leaves_nothing_in_the_pending_index() {
        let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
        PAUSE_BETWEEN_MAP_AND_INDEX.store(true, Ordering::Relaxed);
        for round in 0..20 {
            let task_id = format!("t{round}");
            std::thread::scope(|scope| {
                let ender = scope.spawn(|| {
                    let began = Instant::now();
                    while !tracker.end(&task_id, Ok(None)) {
                        if began.elapsed() > Duration::from_secs(5) {
                            panic!("the start never became visible");
                        }
                        std::hint::spin_loop();
                    }
                });
                let handle = tracker.start(TaskStart::new().task_id(task_id.as_str()));
                ender.join().unwrap();
                drop(handle);
            });
        }
        PAUSE_BETWEEN_MAP_AND_INDEX.store(false, Ordering::Relaxed);
        assert!(tracker.shared.pending.entries().is_empty());
    }

    /// A restart that forgets the finished run it replaces while that run is still an entry, and then finds
    /// it collapsed into a record, must forget the record too: otherwise the retention window counts a run
    /// the id map no longer holds.
    #[test]
    fn a_restart_between_an_end_and_its_collapse_forgets_the_record() {
        let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
        PAUSE_BEFORE_COLLAPSE.store(true, Ordering::Relaxed);
        PAUSE_AFTER_FORGETTING.store(true, Ordering::Relaxed);
        let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
        std::thread::scope(|scope| {
            let restarter = scope.spawn(|| {
                let began = Instant::now();
                while !tracker.get("a").is_some_and(|snapshot| snapshot.finished) {
                    assert!(
                        began.elapsed() < Duration::from_secs(5),
                        "the end never came"
                    );
                    std::hint::spin_loop();
                }
                tracker.start(TaskStart::new().task_id("a")).unwrap()
            });
            handle.complete(None);
            let restarted = restarter.join().unwrap();
            PAUSE_BEFORE_COLLAPSE.store(false, Ordering::Relaxed);
            PAUSE_AFTER_FORGETTING.store(false, Ordering::Relaxed);
            restarted.complete(None);
        });
        assert_eq!(tracker.retained_count(), 1);
        assert_eq!(tracker.shared.finished.retained(), 1);
    }
}
