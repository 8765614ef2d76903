//! What an entry shows of itself: the snapshot of its run, the resumption its runner reads, and the compact
//! record its run collapses into once finished.

use std::sync::Arc;

use crate::tracker::finished_run::{FinishedFields, FinishedRun, RunDetails, SharedRun};
use crate::{SubagentStatus, SubagentTaskSnapshot};

use super::{EndCollapse, Installed, Resumption, TaskEntry, TaskRecord};

impl<V: Clone> TaskEntry<V> {
    /// Collapses this finished run into its compact record (see `finished_run`) and offers the record to
    /// `install`, which puts it in the session's place of this entry unless the id has been started again
    /// meanwhile. Both happen under the record lock, which orders them with a late escalation. `Kept` when
    /// the run keeps its entry (a reservation cancelled before its claim: it can still be claimed) or
    /// `install` refused the record.
    pub(crate) fn collapse(
        &self,
        install: impl FnOnce(SharedRun<V>) -> Installed<V>,
    ) -> EndCollapse {
        let record = self.record.lock();
        let installed = self.collapse_locked(&record, install);
        // A record the session refused is dropped with no lock held: it holds clones of the caller's values.
        drop(record);
        match installed {
            Some(Ok(evicted)) => EndCollapse::Installed(evicted),
            Some(Err(_)) | None => EndCollapse::Kept,
        }
    }

    /// [`collapse`](Self::collapse), under the record lock the caller holds: what `install` did with the
    /// record, `None` when the run keeps its entry. A record it refused is for the caller to drop once the lock
    /// is released.
    pub(super) fn collapse_locked(
        &self,
        record: &TaskRecord<V>,
        install: impl FnOnce(SharedRun<V>) -> Installed<V>,
    ) -> Option<Installed<V>> {
        if self.reserved && record.claimed_at.is_none() && self.is_cancelled() {
            return None;
        }
        // Most runs keep nothing beyond the record's own fields: their details are neither copied out nor dropped.
        // (The debug builds the tests run copy them all the same, to check that both rules of "nothing" agree.)
        let kept = self.has_details(record);
        let details = (kept || cfg!(debug_assertions)).then(|| RunDetails {
            parent_id: self.parent_id.clone(),
            agent: self.agent.clone(),
            description: self.description.clone(),
            metadata: self.metadata.clone(),
            claimed_at: record.claimed_at,
            cancel: self.signal.cancel_record(),
            pause_reason: record.pause_reason(),
            deadline: self.deadline.map(|deadline| deadline.wall),
            progress: record.progress.clone(),
            progress_count: record.progress_count,
            // Most tasks report no progress: an empty log allocates nothing, and skips the copy's setup.
            progress_log: if record.progress_log.is_empty() {
                Box::default()
            } else {
                record.progress_log.iter().cloned().collect()
            },
            result: record.result.clone(),
            failure: record.failure.clone(),
        });
        debug_assert!(details
            .as_ref()
            .is_none_or(|details| details.is_empty() != kept));
        let run = SharedRun::new(FinishedRun::new(FinishedFields {
            sequence: self.sequence,
            task_id: self.task_id.clone(),
            started_at: self.started_at,
            ended_at: record.ended_at,
            status: self.status(),
            reserved: self.reserved,
            detached: self.detached,
            escalated: record.escalated,
            details: details.filter(|_| kept),
        }));
        Some(install(run))
    }

    /// Whether the run has anything its finished record keeps in a [`RunDetails`]: the same fields that
    /// `RunDetails::is_empty` reads, read where they are.
    fn has_details(&self, record: &TaskRecord<V>) -> bool {
        self.parent_id.is_some()
            || self.agent.is_some()
            || self.description.is_some()
            || self.metadata.is_some()
            || record.claimed_at.is_some()
            || self.is_cancelled()
            || record
                .pause
                .as_ref()
                .is_some_and(|pause| pause.reason.is_some())
            || self.deadline.is_some()
            || record.progress.is_some()
            || record.progress_count != 0
            || !record.progress_log.is_empty()
            || record.result.is_some()
            || record.failure.is_some()
    }

    /// Where the task stands for a runner that paused it: still paused, or what ended the pause.
    pub(crate) fn resumption(&self) -> Resumption<V> {
        let record = self.record.lock();
        match self.status() {
            SubagentStatus::Paused => Resumption::Paused,
            SubagentStatus::Cancelled => Resumption::Cancelled,
            status if status.is_pending() => Resumption::Resumed(
                record
                    .pause
                    .as_ref()
                    .and_then(|pause| pause.resume_value.clone()),
            ),
            _ => Resumption::Ended,
        }
    }

    /// A copy of the task's state, every field from the same instant. (The session's id is the caller's: an
    /// entry does not keep its own reference, which every start would count up and down.)
    pub(crate) fn snapshot(&self, session_id: &Arc<str>) -> SubagentTaskSnapshot<V> {
        let record = self.record.lock();
        let word = self.signal.word();
        let cancel = self.signal.cancel_record();
        SubagentTaskSnapshot {
            task_id: self.task_id.clone(),
            session_id: session_id.clone(),
            parent_id: self.parent_id.clone(),
            agent: self.agent.clone(),
            description: self.description.clone(),
            metadata: self.metadata.clone(),
            status: word.status(),
            finished: word.is_finished(),
            started_at: self.started_at,
            queued_at: self.reserved.then_some(self.started_at),
            claimed_at: record.claimed_at,
            cancelled_at: cancel.as_ref().map(|cancel| cancel.at),
            ended_at: record.ended_at,
            cancel_reason: cancel.as_ref().map(|cancel| cancel.reason.clone()),
            cancel_origin: cancel.as_ref().map(|cancel| cancel.origin.clone()),
            cancel_cause: cancel.as_ref().map(|cancel| cancel.cause),
            pause_reason: record.pause_reason(),
            escalated: record.escalated,
            deadline: self.deadline.map(|deadline| deadline.wall),
            detached: self.detached,
            progress: record.progress.clone(),
            progress_count: record.progress_count,
            progress_log: record.progress_log.iter().cloned().collect(),
            result: record.result.clone(),
            error: record
                .failure
                .as_ref()
                .map(|failure| failure.message.clone()),
            error_type: record
                .failure
                .as_ref()
                .and_then(|failure| failure.error_type.clone()),
            error_code: record
                .failure
                .as_ref()
                .and_then(|failure| failure.error_code.clone()),
            worker: None,
        }
    }
}
