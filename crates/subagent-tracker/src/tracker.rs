//! The tracker layer: one session's tasks in memory, built on the token layer (`crate::token`).
//!
//! The layer's parts, from the bottom up:
//! - [`config`], [`reasons`], [`start`]: a session's settings, the reasons it writes, the description of a
//!   task to start;
//! - [`retention`]: the bound on the finished tasks a session keeps, and which of them goes first;
//! - [`early_cancels`]: cancels recorded for tasks that have not started; [`task_filter`]: which pending tasks a
//!   cancel by filter reaches;
//! - [`finished_run`]: the compact record a finished run collapses into, and [`restore`], which fills a session
//!   with such records from exported snapshots; [`recorded_event`]: the events of a
//!   runtime's stream that a session is fed by;
//! - [`deadline_timer`]: the process's one timer thread for deadlines and claim timeouts;
//! - [`event_bus`]: the session's lifecycle events;
//! - [`entry`]: one task's record, its place in the tree, and the transitions that keep the status rules (lock
//!   level 2 in the crate's hierarchy);
//! - [`run`]: a run as the session holds it, live or collapsed; [`run_map`]: the session's runs by id, and
//!   which of them are pending (lock level 5); [`watch`], which waits for a run;
//! - [`engine`]: the session's shared state and the transitions that span tasks (cancel cascades, ends,
//!   adoption), with [`opening`] (how tasks enter), [`expiry`] (what its timers do) and [`linked_task`]
//!   (tasks cancelled by a token they are linked to);
//! - [`handle`]: the runner's handle on its task; [`cancel_wait`]: a cancel that waits for its work to be done;
//! - this file: [`InMemorySubagentTaskTracker`], the handle on a session, and its settings; [`queries`]: what
//!   it reads of its tasks.
//!
//! A session in a registry knows it only as an [`engine::SessionList`] to leave, so the registry sits above this layer.

pub(crate) mod batch_end;
pub(crate) mod cancel_wait;
pub(crate) mod config;
pub(crate) mod deadline_timer;
pub(crate) mod early_cancels;
pub(crate) mod engine;
pub(crate) mod entry;
pub(crate) mod event_bus;
mod expiry;
mod finished_run;
pub(crate) mod handle;
mod linked_task;
mod opening;
mod prefetch;
mod queries;
pub(crate) mod reasons;
pub(crate) mod recorded_event;
pub(crate) mod restore;
pub(crate) mod retention;
mod run;
mod run_map;
pub(crate) mod start;
pub(crate) mod task_filter;
pub(crate) mod watch;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::task_id::{generate_id, validate_task_id};
use crate::token::delivery::Delivery;
use crate::tracker::cancel_wait::CancelWait;
use crate::tracker::config::TrackerConfig;
use crate::tracker::engine::{MetadataMerge, TrackerShared};
use crate::tracker::entry::RunnerEnd;
use crate::tracker::opening::Opening;
use crate::tracker::reasons::cancel_reason;
use crate::tracker::recorded_event::RecordedEvent;
use crate::tracker::run::Run;
use crate::tracker::task_filter::TaskFilter;
use crate::{
    CancelCause, SubagentTaskHandle, SubagentTaskSnapshot, TaskFailure, TaskStart, TrackerError,
};

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

impl<V: Clone + Send + Sync + 'static> InMemorySubagentTaskTracker<V> {
    /// A tracker for a session with a generated id and the default settings.
    #[must_use]
    pub fn new() -> Self {
        Self::with_config(None, TrackerConfig::default())
    }

    /// A tracker for the session `session_id` (generated when `None`). The id is not checked here; bindings
    /// check user input with [`validate_task_id`].
    #[must_use]
    pub fn with_config(session_id: Option<&str>, config: TrackerConfig) -> Self {
        let session_id: Arc<str> = match session_id {
            Some(session_id) => Arc::from(session_id),
            None => Arc::from(generate_id()),
        };
        InMemorySubagentTaskTracker {
            shared: Arc::new(TrackerShared::new(session_id, config)),
        }
    }

    /// Sets how this session merges a parent's metadata with a child's own (contract §5, inherited metadata):
    /// for values that are mappings, the parent's updated with the child's. Without it, a child that has
    /// metadata of its own keeps it whole. False, changing nothing, if a merge was set before.
    pub fn set_metadata_merge(&self, merge: MetadataMerge<V>) -> bool {
        self.shared.metadata_merge.set(merge).is_ok()
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
    /// [`BATCH_REFUSED_REASON`](crate::BATCH_REFUSED_REASON) and finished, and the error is returned.
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
    /// [`CLAIM_TIMEOUT_ERROR`](crate::CLAIM_TIMEOUT_ERROR).
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
    /// - [`TrackerError::NotReserved`] for an id that is not retained;
    /// - [`TrackerError::NotClaimable`] for a task claimed before, started with a runner, or ended unclaimed
    ///   (its claim timeout passed, or its end was recorded by id).
    pub fn claim(&self, task_id: &str) -> Result<SubagentTaskHandle<V>, TrackerError> {
        let shared = &self.shared;
        let entry = match shared.lookup(task_id) {
            Some(Run::Live(entry)) => entry,
            Some(Run::Finished(run)) => {
                return Err(shared.not_claimable(&run.task_id, run.claim_refusal(), run.status()))
            }
            None => {
                return Err(TrackerError::NotReserved {
                    task_id: Arc::from(task_id),
                    session_id: shared.session_id.clone(),
                })
            }
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
    /// returns true. `reason` defaults to [`DEFAULT_CANCEL_REASON`](crate::DEFAULT_CANCEL_REASON).
    pub fn cancel(&self, task_id: &str, reason: Option<&str>) -> bool {
        match self.shared.live_entry(task_id) {
            Some(entry) => self.shared.cancel_entry(&entry, reason),
            None => false,
        }
    }

    /// Cancels the task `task_id` as [`cancel`](Self::cancel) does, and returns what to wait on for the cancel's
    /// work to be done (contract §3, cancel and wait): the run's end, and the cancel handlers of the task and of
    /// its unfinished descendants. A task cancelled or finished before is waited for all the same.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] when no task of that id is retained.
    pub fn cancel_and_watch(
        &self,
        task_id: &str,
        reason: Option<&str>,
    ) -> Result<CancelWait<V>, TrackerError> {
        let shared = &self.shared;
        let run = shared
            .lookup(task_id)
            .ok_or_else(|| TrackerError::unknown_task(task_id, &shared.session_id))?;
        let (moved, subtree) = match &run {
            Run::Live(entry) => (shared.cancel_entry(entry, reason), entry.subtree()),
            Run::Finished(_) => (false, Vec::new()),
        };
        let watch = crate::TaskWatch::new(run, shared.session_id.clone());
        Ok(CancelWait::new(moved, watch, &subtree))
    }

    /// Cancels the task `task_id` and waits until its runner has ended and every cancel handler of the task and
    /// of its unfinished descendants has finished its work (see [`cancel_and_watch`](Self::cancel_and_watch));
    /// returns the final snapshot.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] when no task of that id is retained.
    pub async fn cancel_and_wait(
        &self,
        task_id: &str,
        reason: Option<&str>,
    ) -> Result<SubagentTaskSnapshot<V>, TrackerError> {
        Ok(self.cancel_and_watch(task_id, reason)?.finished().await)
    }

    /// Cancels the task `task_id` if it is pending, as [`cancel`](Self::cancel) does; otherwise records the
    /// cancel, so that the next start or reservation of the id begins `Cancelled`, with `reason` and cause
    /// `requested` (contract §3, cancel before start). The record waits `early_cancel_ttl` (see
    /// [`TrackerConfig`]); at most `MAX_EARLY_CANCELS` wait at once. True only when this call cancelled a
    /// pending task.
    pub fn cancel_before_start(&self, task_id: &str, reason: Option<&str>) -> bool {
        if self.cancel(task_id, reason) {
            return true;
        }
        if validate_task_id("task_id", task_id).is_err() {
            // No task can ever start with this id.
            return false;
        }
        let reason = cancel_reason(reason);
        self.shared.early_cancels.record(
            Arc::from(task_id),
            reason.clone(),
            self.shared.config.early_cancel_ttl,
        );
        // A start that became visible before the record, and so did not take it: the cancel reaches it here,
        // unless that start took the record after all.
        match self.shared.live_entry(task_id) {
            Some(entry)
                if entry.status().is_pending()
                    && self.shared.early_cancels.take(task_id).is_some() =>
            {
                self.shared.cancel_entry(&entry, Some(&reason))
            }
            _ => false,
        }
    }

    /// Cancels the pending tasks that `filter` matches, each with its pending descendants and cause `Requested`
    /// as [`cancel`](Self::cancel) does, and returns the ids of the matching tasks this call moved to
    /// `Cancelled`, in start order (contract §3, cancel by filter). A match that a concurrent cancel moved first
    /// is left out; one reached by the cascade of an earlier match is in. `reason` defaults to
    /// [`DEFAULT_CANCEL_REASON`](crate::DEFAULT_CANCEL_REASON).
    pub fn cancel_matching<M: Fn(Option<&V>) -> bool>(
        &self,
        filter: &TaskFilter<'_, M>,
        reason: Option<&str>,
    ) -> Vec<Arc<str>> {
        self.shared.cancel_matching(filter, &cancel_reason(reason))
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
        self.apply_remote_cancels([(task_id, reason, cause, origin)]) > 0
    }

    /// Applies cancels decided elsewhere, each `(task_id, reason, cause, origin)` as
    /// [`apply_remote_cancel`](Self::apply_remote_cancel) applies one, and delivers what they owe together once
    /// every one has taken effect: no waiter or callback of one runs before the others' tokens have fired, as
    /// within one cancel's cascade (a cascade that reached several tasks of this process arrives as several
    /// cancels). Returns how many tasks moved.
    pub fn apply_remote_cancels<'a>(
        &self,
        cancels: impl IntoIterator<Item = (&'a str, &'a str, CancelCause, &'a str)>,
    ) -> usize {
        let mut delivery = Delivery::default();
        let mut moved = 0;
        for (task_id, reason, cause, origin) in cancels {
            if let Some(entry) = self.shared.live_entry(task_id) {
                moved += self.shared.cancel_trees(
                    [entry],
                    &Arc::from(reason),
                    cause,
                    Some(&Arc::from(origin)),
                    &mut delivery,
                );
            }
        }
        delivery.deliver_in_own_thread();
        moved
    }

    /// Resumes the task `task_id`, which its runner paused, handing the runner `value` (contract §5, pause and
    /// resume): `Paused` becomes `Running`. True exactly when this call resumed it: false for an unknown id or a
    /// task that is not paused (never paused, resumed already, cancelled or finished).
    pub fn resume(&self, task_id: &str, value: Option<V>) -> bool {
        let Some(entry) = self.shared.live_entry(task_id) else {
            return false;
        };
        let mut delivery = Delivery::default();
        let resumed = entry.resume(value, &self.shared.bus, &mut delivery);
        delivery.deliver();
        resumed
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
            Err(error) => RunnerEnd::Failed(TaskFailure::new(error)),
        };
        self.shared.end(&entry, end, Delivery::deliver) == Some(true)
    }

    /// Records one event of another runtime's stream (contract §5, event-sourced ingestion), and returns whether
    /// it changed the session. Events may come late, early or twice:
    /// - `Started` starts the task with no runner here (its end comes as an event); a task this session already
    ///   retains, live or finished, is a repeat and changes nothing;
    /// - `Progress` records a report on the unfinished task, as its runner would;
    /// - `Ended` ends the task as [`end`](Self::end) and [`fail`](Self::fail) do (the first end wins); an end
    ///   whose start was never seen records the task as started and ended at once.
    ///
    /// # Errors
    /// As [`start`](Self::start), for a `Started` event (or an early `Ended` one) the session refuses for a
    /// reason other than a repeat: an invalid id, an unknown or finished parent, a closed session.
    pub fn record_event(&self, event: RecordedEvent<V>) -> Result<bool, TrackerError> {
        match event {
            RecordedEvent::Started(start) => {
                let task_id = start.task_id.clone();
                if task_id
                    .as_deref()
                    .is_some_and(|task_id| self.shared.lookup(task_id).is_some())
                {
                    return Ok(false);
                }
                match self.shared.open(start, Opening::Start) {
                    Ok(_) => Ok(true),
                    // A repeat that raced this one.
                    Err(TrackerError::DuplicateTask { .. }) => Ok(false),
                    Err(error) => Err(error),
                }
            }
            RecordedEvent::Progress {
                task_id,
                message,
                data,
            } => Ok(self
                .shared
                .live_entry(&task_id)
                .is_some_and(|entry| self.shared.record_progress(&entry, &message, data))),
            RecordedEvent::Ended { task_id, outcome } => {
                let end = match outcome {
                    Ok(result) => RunnerEnd::Completed(result),
                    Err(failure) => RunnerEnd::Failed(failure),
                };
                let entry = match self.shared.lookup(&task_id) {
                    Some(Run::Live(entry)) => entry,
                    Some(Run::Finished(_)) => return Ok(false),
                    None => match self
                        .shared
                        .open(TaskStart::new().task_id(&*task_id), Opening::Recorded)
                    {
                        Ok(entry) => entry,
                        Err(TrackerError::DuplicateTask { .. }) => {
                            match self.shared.live_entry(&task_id) {
                                Some(entry) => entry,
                                None => return Ok(false),
                            }
                        }
                        Err(error) => return Err(error),
                    },
                };
                Ok(self.shared.end(&entry, end, Delivery::deliver) == Some(true))
            }
        }
    }

    /// Records the failure of a task without its handle, with the failure's type and code if given: as
    /// [`end`](Self::end) with an error, and the first transition wins.
    pub fn fail(&self, task_id: &str, failure: TaskFailure) -> bool {
        let Some(entry) = self.shared.live_entry(task_id) else {
            return false;
        };
        self.shared
            .end(&entry, RunnerEnd::Failed(failure), Delivery::deliver)
            == Some(true)
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

    /// Fills the session with tasks exported from another (contract §6, export and restore), in the order given,
    /// and returns how many it restored. Each comes back finished: a finished task as it was; a task that was
    /// pending `Failed` with [`RESTORED_WITHOUT_RUNNER_ERROR`](crate::RESTORED_WITHOUT_RUNNER_ERROR), never as
    /// running without a runner; a cancelled one whose runner had yet to stop, finished. Each is a new run of its
    /// id in this session, counted against `max_finished_tasks` as it is restored.
    ///
    /// # Errors
    /// Nothing is restored when a snapshot's id is invalid, repeated in the list
    /// ([`TrackerError::DuplicateInBatch`]) or retained by the session ([`TrackerError::DuplicateTask`]), or
    /// the session is closed. A start that takes one of the ids while the restore runs wins over its snapshot.
    pub fn restore(&self, snapshots: Vec<SubagentTaskSnapshot<V>>) -> Result<usize, TrackerError> {
        self.shared.restore(snapshots)
    }

    /// Forgets the finished tasks that ended at least `older_than` ago, as if the retention bound had evicted
    /// them, and returns how many it forgot (contract §7). Pending tasks are never forgotten.
    pub fn forget_finished(&self, older_than: Duration) -> usize {
        match SystemTime::now().checked_sub(older_than) {
            Some(cutoff) => self.shared.forget_ended_before(cutoff),
            None => 0,
        }
    }

    /// True when this tracker and `other` are handles on the same session.
    #[must_use]
    pub fn same_session(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Whether an [`InMemoryRegistry`](crate::InMemoryRegistry) lists this session now: from its creation there
    /// until the registry is cleared, or the session leaves it (closed, with every task finished). A binding
    /// gives the registry the values of the sessions it lists to show its garbage collector, and a session
    /// those of its own alone.
    #[must_use]
    pub fn is_listed(&self) -> bool {
        self.shared.is_listed()
    }

    /// A number that tells this session apart from every other live one (for hashing by identity).
    #[must_use]
    pub fn session_key(&self) -> usize {
        self.shared.key()
    }

    /// Calls `visit` with the metadata and result of every retained task, in no particular order (for a
    /// binding that must show its garbage collector what the tracker holds). `visit` runs under a shard lock of
    /// the session's id map (a finished task's) or under the task's record lock (a live one's), so it must take
    /// no lock of the tracker's and must not call back into it.
    pub fn visit_values(&self, visit: impl FnMut(&V)) {
        self.shared.visit_values(visit);
    }
}

impl<V: Clone + Send + Sync + 'static> Default for InMemorySubagentTaskTracker<V> {
    fn default() -> Self {
        Self::new()
    }
}
