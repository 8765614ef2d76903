//! The compact record a finished run collapses into.
//!
//! A finished run needs no cancellation signal, no waiter lists and no tree links: nothing can fire, wake
//! or adopt through it any more. So once its end has been recorded, the session swaps its entry for a
//! [`FinishedRun`], which keeps the snapshot's fields and nothing else, with every field that a plain run
//! leaves empty in one box that such a run never allocates. A retained finished task then costs a third of a
//! live one.
//!
//! After the swap, the record changes once at most: a handle may still record an escalation, which the
//! session copies onto the record (see `TrackerShared::record_escalation`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use crate::sync::{AtomicU32, AtomicU8};
use crate::token::cancel_record::CancelRecord;
use crate::token::delivery::Delivery;
use crate::token::signal::{CancelSignal, Ending};
use crate::tracker::retention;
use crate::{ProgressEntry, SubagentStatus, SubagentTaskSnapshot, TaskFailure};

/// Why a claim of a run is refused: by its live entry (`TaskEntry::claim`) or by its finished record.
#[derive(Clone, Copy)]
pub(crate) enum ClaimRefusal {
    /// The task was claimed before, or was started with a runner.
    AlreadyClaimed,
    /// The reservation ended unclaimed other than by a cancel (it expired, or its end was recorded by id).
    Ended,
}

/// A finished record as the session shares it: with no weak count (`triomphe`'s `Arc`), since nothing holds a
/// record weakly, so that its last release is one atomic operation where the standard `Arc`'s takes two.
pub(crate) type SharedRun<V> = triomphe::Arc<FinishedRun<V>>;

/// A finished run's snapshot fields, and where it stands in the retention window.
pub(crate) struct FinishedRun<V> {
    pub(crate) sequence: u64,
    pub(crate) task_id: Arc<str>,
    started_at: SystemTime,
    pub(crate) ended_at: Option<SystemTime>,
    status: SubagentStatus,
    reserved: bool,
    detached: bool,
    /// Set when the run's handle records an escalation after the collapse (`AtomicU8` as a flag: the sync
    /// module's atomics are the ones the model checks swap).
    escalated: AtomicU8,
    /// The node of its key in the session's retention window (`retention`), once it is counted there.
    pub(crate) window_node: AtomicU32,
    /// `None` when every field in it would be empty: no allocation for a plain run.
    details: Option<Box<RunDetails<V>>>,
}

/// The fields a plain run (no parent, no metadata, no result, no cancel, no progress) leaves empty.
pub(crate) struct RunDetails<V> {
    pub(crate) parent_id: Option<Arc<str>>,
    pub(crate) agent: Option<Arc<str>>,
    pub(crate) description: Option<Arc<str>>,
    pub(crate) metadata: Option<V>,
    pub(crate) claimed_at: Option<SystemTime>,
    pub(crate) cancel: Option<CancelRecord>,
    pub(crate) pause_reason: Option<Arc<str>>,
    pub(crate) deadline: Option<SystemTime>,
    pub(crate) progress: Option<Arc<str>>,
    pub(crate) progress_count: u64,
    pub(crate) progress_log: Box<[ProgressEntry<V>]>,
    pub(crate) result: Option<V>,
    pub(crate) failure: Option<Arc<TaskFailure>>,
}

impl<V> RunDetails<V> {
    /// The details, unless every field is empty.
    pub(crate) fn unless_empty(self) -> Option<RunDetails<V>> {
        (!self.is_empty()).then_some(self)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.parent_id.is_none()
            && self.agent.is_none()
            && self.description.is_none()
            && self.metadata.is_none()
            && self.claimed_at.is_none()
            && self.cancel.is_none()
            && self.pause_reason.is_none()
            && self.deadline.is_none()
            && self.progress.is_none()
            && self.progress_count == 0
            && self.progress_log.is_empty()
            && self.result.is_none()
            && self.failure.is_none()
    }
}

/// The fields of a finished entry that a [`FinishedRun`] keeps, as the entry hands them over.
pub(crate) struct FinishedFields<V> {
    pub(crate) sequence: u64,
    pub(crate) task_id: Arc<str>,
    pub(crate) started_at: SystemTime,
    pub(crate) ended_at: Option<SystemTime>,
    pub(crate) status: SubagentStatus,
    pub(crate) reserved: bool,
    pub(crate) detached: bool,
    pub(crate) escalated: bool,
    /// `None` for a run with nothing a [`RunDetails`] keeps.
    pub(crate) details: Option<RunDetails<V>>,
}

impl<V> FinishedRun<V> {
    #[inline(always)]
    pub(crate) fn new(fields: FinishedFields<V>) -> FinishedRun<V> {
        FinishedRun {
            sequence: fields.sequence,
            task_id: fields.task_id,
            started_at: fields.started_at,
            ended_at: fields.ended_at,
            status: fields.status,
            reserved: fields.reserved,
            detached: fields.detached,
            escalated: AtomicU8::new(u8::from(fields.escalated)),
            window_node: AtomicU32::new(retention::NOT_IN_WINDOW),
            details: fields.details.map(Box::new),
        }
    }

    pub(crate) fn record_escalation(&self) {
        self.escalated.store(1, Ordering::Release);
    }

    /// Why a claim of this run is refused, as the live entry would have refused it.
    pub(crate) fn claim_refusal(&self) -> ClaimRefusal {
        let claimed = self
            .details
            .as_ref()
            .is_some_and(|details| details.claimed_at.is_some());
        if !self.reserved || claimed {
            ClaimRefusal::AlreadyClaimed
        } else {
            ClaimRefusal::Ended
        }
    }

    pub(crate) fn status(&self) -> SubagentStatus {
        self.status
    }

    /// A signal in this run's final state, for a token asked for after the run collapsed (contract §4, a token
    /// by id): fired with the run's cancel if it was cancelled, never to fire otherwise.
    pub(crate) fn settled_signal(&self) -> Arc<CancelSignal> {
        let signal = Arc::new(CancelSignal::new(SubagentStatus::Running));
        // Nothing waits on a new signal: these deliveries are empty.
        let mut delivery = Delivery::default();
        let cancel = self
            .details
            .as_ref()
            .and_then(|details| details.cancel.clone());
        let ending = match cancel {
            Some(cancel) => {
                signal.fire(cancel, &mut delivery);
                Ending::Stopped
            }
            None if self.status == SubagentStatus::Completed => Ending::Completed,
            None => Ending::Failed,
        };
        signal.finish(ending, &mut delivery);
        delivery.deliver();
        signal
    }

    pub(crate) fn visit_values(&self, mut visit: impl FnMut(&V)) {
        let Some(details) = &self.details else {
            return;
        };
        if let Some(metadata) = &details.metadata {
            visit(metadata);
        }
        if let Some(result) = &details.result {
            visit(result);
        }
        for data in details
            .progress_log
            .iter()
            .filter_map(|entry| entry.data.as_ref())
        {
            visit(data);
        }
    }
}

impl<V: Clone> FinishedRun<V> {
    /// The run's final snapshot: field for field what the entry's own snapshot showed when it collapsed.
    pub(crate) fn snapshot(&self, session_id: &Arc<str>) -> SubagentTaskSnapshot<V> {
        let mut snapshot = SubagentTaskSnapshot::new(
            self.task_id.clone(),
            session_id.clone(),
            self.status,
            self.started_at,
        );
        snapshot.finished = true;
        snapshot.queued_at = self.reserved.then_some(self.started_at);
        snapshot.ended_at = self.ended_at;
        snapshot.detached = self.detached;
        snapshot.escalated = self.escalated.load(Ordering::Acquire) != 0;
        if let Some(details) = &self.details {
            snapshot.parent_id = details.parent_id.clone();
            snapshot.agent = details.agent.clone();
            snapshot.description = details.description.clone();
            snapshot.metadata = details.metadata.clone();
            snapshot.claimed_at = details.claimed_at;
            if let Some(cancel) = &details.cancel {
                snapshot.cancelled_at = Some(cancel.at);
                snapshot.cancel_reason = Some(cancel.reason.clone());
                snapshot.cancel_origin = Some(cancel.origin.clone());
                snapshot.cancel_cause = Some(cancel.cause);
            }
            snapshot.pause_reason.clone_from(&details.pause_reason);
            snapshot.deadline = details.deadline;
            snapshot.progress = details.progress.clone();
            snapshot.progress_count = details.progress_count;
            snapshot.progress_log = details.progress_log.to_vec();
            snapshot.result = details.result.clone();
            if let Some(failure) = &details.failure {
                snapshot.error = Some(failure.message.clone());
                snapshot.error_type.clone_from(&failure.error_type);
                snapshot.error_code.clone_from(&failure.error_code);
            }
        }
        snapshot
    }
}
