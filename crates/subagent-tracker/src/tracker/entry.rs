//! One task's record, its place in the task tree, and the transitions that keep the status rules.
//!
//! The cancellation signal (status word, cancel record, waiters, callbacks, links) is a [`CancelSignal`] of
//! its own; the entry drives it. Every transition takes the entry's record lock, then the signal's, so a
//! snapshot taken under the record lock sees each transition whole, and events of one task are published in
//! the order their transitions happened.
//!
//! # The tree
//!
//! A running task keeps its running, attached children, so a cancel can cascade in time proportional to the
//! subtree. A child is admitted under its parent's record lock after the parent's status is read there, and
//! a cancel stores the status before it takes that lock to collect the children: so a child started while
//! its parent is being cancelled is either collected by the cascade or starts cancelled. When a task
//! finishes, its running children are adopted by its nearest unfinished ancestor, so an ancestor's cancel
//! still reaches them.
//!
//! # Reserved tasks
//!
//! A reserved task is `Queued` until a runner claims it; it is in the tree and reachable by cancels like a
//! running one. A cancel finishes it at once (nothing runs to wait for), so its end is recorded with the
//! cancel, under the same lock. A claim happens under the record lock, so exactly one claim wins.
//!
//! The record lock is level 2 in the crate's lock hierarchy (see the crate root): record locks nest only
//! child before parent, and a record lock is taken before its own signal's.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use crate::sync::{AtomicU32, Mutex};
use crate::time::Deadline;
use crate::token::cancel_record::CancelRecord;
use crate::token::delivery::Delivery;
use crate::token::signal::{CancelSignal, Ending};
use crate::tracker::deadline_timer::DeadlineKey;
use crate::tracker::event_bus::EventBus;
use crate::tracker::finished_run::{ClaimRefusal, SharedRun};
use crate::tracker::retention::{self, Eviction};
use crate::tracker::run_map;
use crate::{
    CancelCause, ProgressEntry, SubagentEvent, SubagentEventKind, SubagentStatus, TaskFailure,
};

mod reports;
mod snapshot;

pub use reports::kept_progress_message;

/// The longest progress message kept, in UTF-8 bytes; longer ones are cut at a character boundary.
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 4096;

pub(crate) struct TaskEntry<V> {
    /// The order of starts within the session; unique, so it also tells apart two runs of one task id.
    pub(crate) sequence: u64,
    pub(crate) task_id: Arc<str>,
    pub(crate) parent_id: Option<Arc<str>>,
    pub(crate) agent: Option<Arc<str>>,
    pub(crate) description: Option<Arc<str>>,
    pub(crate) metadata: Option<V>,
    pub(crate) started_at: SystemTime,
    /// The effective deadline: the task's own, bounded by its parent's unless detached.
    pub(crate) deadline: Option<Deadline>,
    /// Out of its parent's cascade (still cancellable by id and by its session).
    pub(crate) detached: bool,
    /// A task group (`TaskStart::structured`): its children's failures and its own end reach its children.
    pub(crate) structured: bool,
    /// Reserved (it started `Queued`), so a runner must claim it.
    pub(crate) reserved: bool,
    /// Its slot among its shard's pending runs while it is pending (`run_map`).
    pub(crate) pending_slot: AtomicU32,
    pub(crate) signal: Arc<CancelSignal>,
    /// The node of its key in the session's retention window (`retention`), once it is counted there.
    pub(crate) window_node: AtomicU32,
    record: Mutex<TaskRecord<V>>,
}

struct TaskRecord<V> {
    ended_at: Option<SystemTime>,
    escalated: bool,
    progress: Option<Arc<str>>,
    progress_count: u64,
    /// The latest progress reports, oldest first, at most the session's `progress_log_size`.
    progress_log: VecDeque<ProgressEntry<V>>,
    result: Option<V>,
    failure: Option<Arc<TaskFailure>>,
    /// The task's pauses, once it has paused: boxed apart, so that a task that never pauses stays small.
    pause: Option<Box<PauseRecord<V>>>,
    /// Running attached children by sequence; a child removes itself when it finishes.
    children: Option<HashMap<u64, Arc<TaskEntry<V>>>>,
    /// The ancestor that holds this task among its children (the nearest unfinished one when adopted). Kept
    /// after the task finishes, so that adoption can walk up past it; a retained run keeps its ancestors.
    parent: Option<Arc<TaskEntry<V>>>,
    /// The scheduled deadline, removed from the timer when the task finishes first.
    deadline_key: Option<DeadlineKey>,
    /// When a runner claimed the reserved task.
    claimed_at: Option<SystemTime>,
    /// The scheduled end of an unclaimed reservation, removed from the timer at the claim or the end.
    claim_timeout_key: Option<DeadlineKey>,
}

/// What a task that paused keeps of its pauses.
struct PauseRecord<V> {
    /// Why the runner paused the task; cleared by the resume.
    reason: Option<Arc<str>>,
    /// What the latest resume handed the runner.
    resume_value: Option<V>,
}

impl<V> TaskRecord<V> {
    fn pause_reason(&self) -> Option<Arc<str>> {
        self.pause.as_ref().and_then(|pause| pause.reason.clone())
    }
}

/// What a cancel carries to every task it reaches.
pub(crate) struct CancelRequest {
    pub(crate) reason: Arc<str>,
    pub(crate) at: SystemTime,
}

/// How a runner ended its task.
pub(crate) enum RunnerEnd<V> {
    Completed(Option<V>),
    Failed(TaskFailure),
    /// The runner stopped because of a cancel (the task is already `Cancelled`).
    Stopped,
    /// Nobody claimed the reservation in time: it fails with this error if it is still `Queued`.
    ClaimExpired(Arc<str>),
}

/// What [`TaskEntry::end`] did, and what it hands to the tracker's bookkeeping.
pub(crate) struct EndEffects<V> {
    /// True when this end moved the task out of its pending status (a cancel that finished a queued task
    /// reports false: the cancel was the transition).
    pub(crate) transitioned: bool,
    pub(crate) parent: Option<Arc<TaskEntry<V>>>,
    /// Children left without a live parent, for an ancestor to adopt.
    pub(crate) orphans: Vec<Arc<TaskEntry<V>>>,
    pub(crate) deadline_key: Option<DeadlineKey>,
    pub(crate) claim_timeout_key: Option<DeadlineKey>,
    /// Whether the run collapsed into its finished record within its end (see [`TaskEntry::end`]).
    pub(crate) collapse: EndCollapse,
}

/// What became of a run's collapse into its record.
pub(crate) enum EndCollapse {
    /// Not tried: the session collapses the run once it has settled it.
    Later,
    /// The record took the entry's place in the session, which counted it in its retention window: the key of
    /// the run that fell out of the window, if one did, for the session to take out of its id map.
    Installed(Option<Eviction>),
    /// Tried, and the entry stays where it is: the session refused the record (the id was started again), or
    /// the run keeps its entry.
    Kept,
}

/// What the session did with a finished record offered in its entry's place: counted it in its retention
/// window, with the key of the run that fell out if one did, or refused it (the id has been started again),
/// giving it back.
pub(crate) type Installed<V> = Result<Option<Eviction>, SharedRun<V>>;

/// Where a task that its runner paused stands (contract §5, pause and resume), as
/// [`SubagentTaskHandle::resumption`](crate::SubagentTaskHandle::resumption) tells its runner.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resumption<V> {
    /// Still paused.
    Paused,
    /// Resumed (or never paused): running, with the value the latest resume handed over, if any.
    Resumed(Option<V>),
    /// Cancelled, while paused or since: the runner stops.
    Cancelled,
    /// Ended by the session (`end` by id) while paused: the runner's own end will change nothing.
    Ended,
}

/// What [`TaskEntry::cancel`] did.
pub(crate) enum CancelOutcome<V> {
    /// The task was not pending: nothing changed.
    NotPending,
    /// A running task is now `Cancelled`; its runner will report the end.
    Cancelled,
    /// A queued task is now `Cancelled` and finished, with these effects for the tracker's bookkeeping.
    CancelledUnclaimed(EndEffects<V>),
}

/// Why [`TaskEntry::open`] refused a start.
pub(crate) enum OpenRefusal {
    ParentFinished,
    DuplicateTask,
}

/// What a parent says to children joining it.
pub(crate) enum Admission<V> {
    Admitted,
    /// The parent is cancelled but not finished: the children start (or become) cancelled with its cancel.
    Cancelled(CancelRecord),
    /// The parent has finished; for adoption, this is where to ask next.
    Finished(Option<Arc<TaskEntry<V>>>),
}

impl<V> TaskEntry<V> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        sequence: u64,
        task_id: Arc<str>,
        parent: Option<Arc<TaskEntry<V>>>,
        agent: Option<Arc<str>>,
        description: Option<Arc<str>>,
        metadata: Option<V>,
        deadline: Option<Deadline>,
        [detached, structured, reserved]: [bool; 3],
        started_at: SystemTime,
    ) -> TaskEntry<V> {
        TaskEntry {
            sequence,
            task_id,
            parent_id: parent.as_ref().map(|parent| parent.task_id.clone()),
            agent,
            description,
            metadata,
            started_at,
            deadline,
            detached,
            structured,
            reserved,
            pending_slot: AtomicU32::new(run_map::NOT_INDEXED),
            signal: Arc::new(CancelSignal::new(if reserved {
                SubagentStatus::Queued
            } else {
                SubagentStatus::Running
            })),
            window_node: AtomicU32::new(retention::NOT_IN_WINDOW),
            record: Mutex::new(TaskRecord {
                ended_at: None,
                escalated: false,
                progress: None,
                progress_count: 0,
                progress_log: VecDeque::new(),
                result: None,
                failure: None,
                pause: None,
                children: None,
                // A detached child is not among its parent's children, so no cascade or adoption links them.
                parent: if detached { None } else { parent },
                deadline_key: None,
                claimed_at: None,
                claim_timeout_key: None,
            }),
        }
    }

    #[inline]
    pub(crate) fn status(&self) -> SubagentStatus {
        self.signal.status()
    }

    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.signal.is_cancelled()
    }

    /// When the task ended, once it has.
    pub(crate) fn ended_at(&self) -> Option<SystemTime> {
        self.record.lock().ended_at
    }

    #[inline]
    pub(crate) fn is_finished(&self) -> bool {
        self.signal.is_finished()
    }

    /// Makes a new entry live: admits it under `parent`, runs `make_visible` (which indexes it), and publishes
    /// `started`, all under the entry's record lock.
    ///
    /// Holding the lock throughout means a cascade that reaches the child through its parent waits until the
    /// start is decided, so it never sees a half-started task and its `cancelled` event never precedes
    /// `started`. A refused start leaves no trace: the parent forgets the child and the entry is marked
    /// finished. A task with no parent cannot be reached before it is visible, so when nobody listens for
    /// events it starts without the lock (one lock fewer on the hottest path).
    ///
    /// A reserved task that inherits its parent's cancel is finished at once: its end's effects are returned
    /// for the tracker's bookkeeping.
    pub(crate) fn open(
        self: &Arc<Self>,
        parent: Option<&Arc<TaskEntry<V>>>,
        early: Option<CancelRecord>,
        make_visible: impl FnOnce(bool) -> Result<(), OpenRefusal>,
        bus: &EventBus,
        delivery: &mut Delivery,
    ) -> Result<Option<EndEffects<V>>, OpenRefusal> {
        let mut record = (parent.is_some() || bus.has_subscribers()).then(|| self.record.lock());
        let mut inherited = None;
        if let Some(parent) = parent {
            let admission = if self.detached {
                parent.check_unfinished()
            } else {
                parent.admit(std::slice::from_ref(self))
            };
            match admission {
                Admission::Admitted => {}
                Admission::Finished(_) => return Err(OpenRefusal::ParentFinished),
                Admission::Cancelled(cancel) => inherited = Some(cancel),
            }
        }
        // A parent's cancel comes first; a cancel recorded for this id before it started otherwise.
        if let Some(cancel) = inherited {
            self.signal.fire(
                CancelRecord {
                    cause: CancelCause::Parent,
                    at: self.started_at,
                    ..cancel
                },
                delivery,
            );
        } else if let Some(cancel) = early {
            self.signal.fire(cancel, delivery);
        }
        if let Err(refusal) = make_visible(self.is_cancelled()) {
            if let Some(parent) = parent {
                parent.forget_child(self.sequence);
            }
            self.signal.finish(Ending::Failed, delivery);
            return Err(refusal);
        }
        if bus.has_subscribers() {
            let record = record.get_or_insert_with(|| self.record.lock());
            bus.publish(
                &self.event(SubagentEventKind::Started, self.started_at, record),
                delivery,
            );
            if self.is_cancelled() {
                bus.publish(
                    &self.event(SubagentEventKind::Cancelled, self.started_at, record),
                    delivery,
                );
            }
        }
        if !self.is_finished() {
            return Ok(None);
        }
        let record = record.get_or_insert_with(|| self.record.lock());
        Ok(Some(self.record_unclaimed_end(
            record,
            self.started_at,
            bus,
            delivery,
        )))
    }

    /// Moves a pending task to `Cancelled` (and a queued one to finished as well).
    ///
    /// On success the pending children are appended to `children` for the caller to cascade into.
    pub(crate) fn cancel(
        &self,
        request: &CancelRequest,
        origin: &Arc<str>,
        cause: CancelCause,
        bus: &EventBus,
        delivery: &mut Delivery,
        children: &mut Vec<Arc<TaskEntry<V>>>,
    ) -> CancelOutcome<V> {
        if !self.status().is_pending() {
            return CancelOutcome::NotPending;
        }
        let mut record = self.record.lock();
        let cancel = CancelRecord {
            reason: request.reason.clone(),
            origin: origin.clone(),
            cause,
            at: request.at,
        };
        if !self.signal.fire(cancel, delivery) {
            return CancelOutcome::NotPending;
        }
        if let Some(running_children) = &record.children {
            children.extend(running_children.values().cloned());
        }
        if bus.has_subscribers() {
            let event = self.event(SubagentEventKind::Cancelled, request.at, &record);
            bus.publish(&event, delivery);
        }
        if self.is_finished() {
            CancelOutcome::CancelledUnclaimed(self.record_unclaimed_end(
                &mut record,
                request.at,
                bus,
                delivery,
            ))
        } else {
            CancelOutcome::Cancelled
        }
    }

    /// The end of a reserved task that a cancel finished before any runner claimed it.
    fn record_unclaimed_end(
        &self,
        record: &mut TaskRecord<V>,
        at: SystemTime,
        bus: &EventBus,
        delivery: &mut Delivery,
    ) -> EndEffects<V> {
        record.ended_at = Some(at);
        if bus.has_subscribers() {
            bus.publish(&self.event(SubagentEventKind::Ended, at, record), delivery);
        }
        EndEffects {
            transitioned: false,
            ..Self::take_end_effects(record)
        }
    }

    fn take_end_effects(record: &mut TaskRecord<V>) -> EndEffects<V> {
        EndEffects {
            transitioned: true,
            // Kept, not taken: a later adoption that finds this task finished asks its parent next.
            parent: record.parent.clone(),
            orphans: record
                .children
                .take()
                .map(|children| children.into_values().collect())
                .unwrap_or_default(),
            deadline_key: record.deadline_key.take(),
            claim_timeout_key: record.claim_timeout_key.take(),
            collapse: EndCollapse::Later,
        }
    }

    /// A runner takes this reserved task: `Queued` becomes `Running`. A reservation cancelled before its claim
    /// is claimed too, finished and with its token fired, so the runner stops at its first checkpoint. Returns
    /// the claim timeout to unschedule.
    pub(crate) fn claim(
        &self,
        bus: &EventBus,
        delivery: &mut Delivery,
    ) -> Result<Option<DeadlineKey>, ClaimRefusal> {
        let mut record = self.record.lock();
        if !self.reserved || record.claimed_at.is_some() {
            return Err(ClaimRefusal::AlreadyClaimed);
        }
        if !self.signal.claim() && !self.is_cancelled() {
            return Err(ClaimRefusal::Ended);
        }
        let now = SystemTime::now();
        record.claimed_at = Some(now);
        if bus.has_subscribers() {
            bus.publish(
                &self.event(SubagentEventKind::Claimed, now, &record),
                delivery,
            );
        }
        Ok(record.claim_timeout_key.take())
    }

    /// Records the runner's end. Returns `None` when the task had already finished (nothing changes).
    ///
    /// A `Running` task takes the reported status; a `Cancelled` one stays cancelled and keeps what the runner
    /// reported for diagnosis. Either way the task becomes finished.
    ///
    /// A task with no parent and no child collapses here, under the record lock the end holds, offering its
    /// record to `install` (see [`collapse`](Self::collapse); `None` when the session keeps no finished run).
    /// The session has nothing to settle for it before the collapse (no parent forgets it, no group rule
    /// reaches it, nothing is adopted), so this saves the collapse's own taking of the lock. A task in a tree
    /// collapses once the session has settled the tree around it, as it always has.
    pub(crate) fn end(
        &self,
        end: RunnerEnd<V>,
        bus: &EventBus,
        delivery: &mut Delivery,
        install: Option<impl FnOnce(SharedRun<V>) -> Installed<V>>,
    ) -> Option<EndEffects<V>>
    where
        V: Clone,
    {
        let mut record = self.record.lock();
        let ending = match &end {
            RunnerEnd::Completed(_) => Ending::Completed,
            RunnerEnd::Failed(_) => Ending::Failed,
            RunnerEnd::Stopped => Ending::Stopped,
            RunnerEnd::ClaimExpired(_) if self.status() == SubagentStatus::Queued => Ending::Failed,
            RunnerEnd::ClaimExpired(_) => return None,
        };
        let transitioned = self.signal.finish(ending, delivery)?;
        match end {
            RunnerEnd::Completed(result) => record.result = result,
            RunnerEnd::Failed(failure) => record.failure = Some(Arc::new(failure)),
            RunnerEnd::ClaimExpired(error) => {
                record.failure = Some(Arc::new(TaskFailure::new(error)));
            }
            RunnerEnd::Stopped => {}
        }
        let now = SystemTime::now();
        record.ended_at = Some(now);
        if bus.has_subscribers() {
            bus.publish(
                &self.event(SubagentEventKind::Ended, now, &record),
                delivery,
            );
        }
        let mut effects = EndEffects {
            transitioned,
            ..Self::take_end_effects(&mut record)
        };
        let mut refused = None;
        if let Some(install) =
            install.filter(|_| effects.parent.is_none() && effects.orphans.is_empty())
        {
            effects.collapse = match self.collapse_locked(&record, install) {
                Some(Ok(evicted)) => EndCollapse::Installed(evicted),
                Some(Err(run)) => {
                    refused = Some(run);
                    EndCollapse::Kept
                }
                None => EndCollapse::Kept,
            };
        }
        drop(record);
        // A record the session refused is dropped with no lock held: it holds clones of the caller's values.
        drop(refused);
        Some(effects)
    }

    /// Lets `children` in, unless this task has finished; a cancelled task passes its cancel on instead.
    pub(crate) fn admit(&self, children: &[Arc<TaskEntry<V>>]) -> Admission<V> {
        let mut record = self.record.lock();
        if self.is_finished() {
            return Admission::Finished(record.parent.clone());
        }
        if let Some(cancel) = self.signal.cancel_record() {
            return Admission::Cancelled(cancel);
        }
        let running = record.children.get_or_insert_with(HashMap::new);
        for child in children {
            running.insert(child.sequence, child.clone());
        }
        Admission::Admitted
    }

    /// For a detached child: the parent must be unfinished, and its cancel is not passed on.
    fn check_unfinished(&self) -> Admission<V> {
        if self.is_finished() {
            Admission::Finished(None)
        } else {
            Admission::Admitted
        }
    }

    /// This task and its unfinished attached descendants, walked with a work list (one record lock at a time).
    pub(crate) fn subtree(self: &Arc<Self>) -> Vec<Arc<TaskEntry<V>>> {
        let mut walked = Vec::new();
        let mut stack = vec![self.clone()];
        while let Some(entry) = stack.pop() {
            if let Some(children) = &entry.record.lock().children {
                stack.extend(children.values().cloned());
            }
            walked.push(entry);
        }
        walked
    }

    pub(crate) fn forget_child(&self, child_sequence: u64) {
        if let Some(children) = &mut self.record.lock().children {
            children.remove(&child_sequence);
        }
    }

    /// Points an adopted child at its new parent; false if the child has finished meanwhile (the new
    /// parent must then forget it).
    pub(crate) fn set_parent(&self, parent: &Arc<TaskEntry<V>>) -> bool {
        let mut record = self.record.lock();
        if self.is_finished() {
            return false;
        }
        record.parent = Some(parent.clone());
        true
    }

    /// Forgets the parent of a child whose ancestors have all finished: it is a root now.
    pub(crate) fn clear_parent(&self) {
        self.record.lock().parent = None;
    }

    /// Records that the runner was stopped by force. A run that has finished may have collapsed into its
    /// session's record already: `copy_to_record` copies the flag there, under this entry's record lock, which
    /// the collapse holds too, so the flag reaches whichever form the session keeps.
    pub(crate) fn record_escalation(&self, copy_to_record: impl FnOnce()) {
        let mut record = self.record.lock();
        record.escalated = true;
        if self.is_finished() {
            copy_to_record();
        }
    }

    /// Remembers the scheduled deadline so that finishing removes it; false (nothing kept) if already finished.
    pub(crate) fn keep_deadline_key(&self, key: DeadlineKey) -> bool {
        let mut record = self.record.lock();
        if self.is_finished() {
            return false;
        }
        record.deadline_key = Some(key);
        true
    }

    /// Remembers the scheduled claim timeout so that the claim or the end removes it; false (nothing kept) if
    /// the task is no longer queued.
    pub(crate) fn keep_claim_timeout_key(&self, key: DeadlineKey) -> bool {
        let mut record = self.record.lock();
        if self.signal.word().status() != SubagentStatus::Queued || self.is_finished() {
            return false;
        }
        record.claim_timeout_key = Some(key);
        true
    }

    /// Calls `visit` with the metadata and the result, if any.
    pub(crate) fn visit_values(&self, mut visit: impl FnMut(&V)) {
        if let Some(metadata) = &self.metadata {
            visit(metadata);
        }
        let record = self.record.lock();
        let resume_value = record
            .pause
            .as_ref()
            .and_then(|pause| pause.resume_value.as_ref());
        for value in record.result.iter().chain(resume_value) {
            visit(value);
        }
        for data in record
            .progress_log
            .iter()
            .filter_map(|entry| entry.data.as_ref())
        {
            visit(data);
        }
    }

    fn event(
        &self,
        kind: SubagentEventKind,
        timestamp: SystemTime,
        record: &TaskRecord<V>,
    ) -> SubagentEvent {
        SubagentEvent {
            task_id: self.task_id.clone(),
            kind,
            status: self.status(),
            timestamp,
            reason: match kind {
                SubagentEventKind::Cancelled | SubagentEventKind::Started => {
                    self.signal.cancel_reason()
                }
                SubagentEventKind::Paused => record.pause_reason(),
                _ => None,
            },
            message: match kind {
                SubagentEventKind::Progress => record.progress.clone(),
                _ => None,
            },
            missed: 0,
        }
    }
}
