//! Export and restore (contract §6): a session filled from the snapshots another session exported, its
//! finished tasks as they were and its pending ones failed, since no runner came with them.

use std::sync::Arc;
use std::time::SystemTime;

use crate::task_id::validate_task_id;
use crate::token::cancel_record::CancelRecord;
use crate::tracker::engine::TrackerShared;
use crate::tracker::finished_run::{FinishedFields, FinishedRun, RunDetails, SharedRun};
use crate::{SubagentStatus, SubagentTaskSnapshot, TaskFailure, TrackerError};

/// The error of a task restored from a snapshot taken while it was pending: no runner came with it.
pub const RESTORED_WITHOUT_RUNNER_ERROR: &str =
    "the task was pending when its snapshot was taken, and no runner came back with it";

impl<V: Clone + Send + Sync + 'static> TrackerShared<V> {
    /// Restores `snapshots` as finished tasks, in their order; returns how many. Refuses, restoring nothing, a
    /// list that repeats an id or names one the session retains, an invalid id, and a closed session. A start
    /// that takes one of the ids while the restore runs wins, and that snapshot is left out.
    pub(super) fn restore(
        &self,
        snapshots: Vec<SubagentTaskSnapshot<V>>,
    ) -> Result<usize, TrackerError> {
        let mut named = std::collections::HashSet::with_capacity(snapshots.len());
        for snapshot in &snapshots {
            validate_task_id("task_id", &snapshot.task_id)?;
            if !named.insert(snapshot.task_id.clone()) {
                return Err(TrackerError::DuplicateInBatch {
                    task_id: snapshot.task_id.clone(),
                });
            }
            if self.lookup(&snapshot.task_id).is_some() {
                return Err(TrackerError::DuplicateTask {
                    task_id: snapshot.task_id.clone(),
                    session_id: self.session_id.clone(),
                });
            }
        }
        if self.closed.get().is_some() {
            return Err(TrackerError::SessionClosed {
                session_id: self.session_id.clone(),
            });
        }
        let now = SystemTime::now();
        let mut restored = 0;
        for snapshot in snapshots {
            let sequence = self
                .next_sequence
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let run = SharedRun::new(finished_run(sequence, restored_snapshot(snapshot, now)));
            let task_id = run.task_id.clone();
            let restored_here = self.tasks.write(&task_id, |slot| {
                if slot.run().is_some() {
                    // Dropped once the lock is released: it holds the caller's values.
                    return Err(run);
                }
                Ok(self.put_retained(slot, run))
            });
            let Ok(evicted) = restored_here else {
                continue;
            };
            restored += 1;
            self.evict(evicted);
        }
        Ok(restored)
    }
}

/// `snapshot` as a restore brings it back (contract §6, export and restore): finished, since no runner comes with
/// it. A task that was pending has failed with [`RESTORED_WITHOUT_RUNNER_ERROR`] at `now`; a cancelled one whose
/// runner had yet to stop has finished at `now`; a finished one is as it was. The rule every store applies.
#[must_use]
pub fn restored_snapshot<V>(
    mut snapshot: SubagentTaskSnapshot<V>,
    now: SystemTime,
) -> SubagentTaskSnapshot<V> {
    if snapshot.status.is_pending() {
        snapshot.status = SubagentStatus::Failed;
        snapshot.error = Some(Arc::from(RESTORED_WITHOUT_RUNNER_ERROR));
        snapshot.error_type = None;
        snapshot.error_code = None;
        snapshot.ended_at = Some(now);
    }
    if snapshot.status != SubagentStatus::Cancelled {
        snapshot.cancelled_at = None;
        snapshot.cancel_reason = None;
        snapshot.cancel_origin = None;
        snapshot.cancel_cause = None;
    }
    snapshot.ended_at = snapshot.ended_at.or(Some(now));
    snapshot.finished = true;
    snapshot
}

/// The finished record of a restored snapshot, as run `sequence`.
fn finished_run<V>(sequence: u64, snapshot: SubagentTaskSnapshot<V>) -> FinishedRun<V> {
    let cancel = snapshot.cancel_reason.map(|reason| CancelRecord {
        reason,
        origin: snapshot
            .cancel_origin
            .unwrap_or_else(|| snapshot.task_id.clone()),
        cause: snapshot
            .cancel_cause
            .unwrap_or(crate::CancelCause::Requested),
        at: snapshot.cancelled_at.unwrap_or(snapshot.started_at),
    });
    let failure = snapshot.error.map(|message| TaskFailure {
        message,
        error_type: snapshot.error_type,
        error_code: snapshot.error_code,
    });
    FinishedRun::new(FinishedFields {
        sequence,
        task_id: snapshot.task_id,
        started_at: snapshot.started_at,
        ended_at: snapshot.ended_at,
        status: snapshot.status,
        reserved: snapshot.queued_at.is_some(),
        detached: snapshot.detached,
        escalated: snapshot.escalated,
        details: RunDetails {
            parent_id: snapshot.parent_id,
            agent: snapshot.agent,
            description: snapshot.description,
            metadata: snapshot.metadata,
            claimed_at: snapshot.claimed_at,
            cancel,
            pause_reason: snapshot.pause_reason,
            deadline: snapshot.deadline,
            progress: snapshot.progress,
            progress_count: snapshot.progress_count,
            progress_log: snapshot.progress_log.into_boxed_slice(),
            result: snapshot.result,
            failure: failure.map(Arc::new),
        }
        .unless_empty(),
    })
}
