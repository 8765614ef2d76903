//! The runner's side of a task.

use std::fmt;
use std::sync::Arc;

use crate::token::delivery::Delivery;
use crate::tracker::engine::TrackerShared;
use crate::tracker::entry::{RunnerEnd, TaskEntry};
use crate::{SubagentStatus, SubagentTaskSnapshot, SubagentTaskToken, TaskFailure};

/// The error recorded when a handle is dropped while its task is still running.
pub const DROPPED_HANDLE_ERROR: &str = "the runner dropped its handle without reporting an end";

/// Held by the code that runs a task: it reports progress and the task's end.
///
/// Dropping the handle closes it. A task still `Running` then fails with [`DROPPED_HANDLE_ERROR`], and a
/// cancelled one becomes finished, so a runner that disappears never leaves an unfinished task behind. What
/// that end wakes is woken in a thread of its own: nothing is delivered from `Drop`.
///
/// (`V: Clone` because that end copies the finished run's values into the session's compact record of it.)
pub struct SubagentTaskHandle<V: Clone = String> {
    shared: Arc<TrackerShared<V>>,
    entry: Arc<TaskEntry<V>>,
}

impl<V: Clone + Send + Sync + 'static> SubagentTaskHandle<V> {
    pub(crate) fn new(shared: Arc<TrackerShared<V>>, entry: Arc<TaskEntry<V>>) -> Self {
        SubagentTaskHandle { shared, entry }
    }

    /// The task's id.
    #[must_use]
    pub fn task_id(&self) -> &Arc<str> {
        &self.entry.task_id
    }

    /// The id of the session that owns the task.
    #[must_use]
    pub fn session_id(&self) -> &Arc<str> {
        self.shared.session_id()
    }

    /// The token that fires when the task is cancelled.
    #[must_use]
    pub fn token(&self) -> SubagentTaskToken {
        SubagentTaskToken::new(self.entry.signal.clone(), self.entry.task_id.clone())
    }

    /// True once the task is cancelled: one atomic load, cheap enough for every streamed chunk.
    #[inline]
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.entry.is_cancelled()
    }

    /// The task's status now.
    #[must_use]
    pub fn status(&self) -> SubagentStatus {
        self.entry.status()
    }

    /// Records a progress milestone: the snapshot keeps the latest message (cut to
    /// [`MAX_PROGRESS_MESSAGE_BYTES`](crate::MAX_PROGRESS_MESSAGE_BYTES)), a count, and the session's
    /// `progress_log_size` latest reports in its progress log. Returns false, recording nothing, once the task
    /// has finished.
    pub fn progress(&self, message: &str) -> bool {
        self.shared.record_progress(&self.entry, message, None)
    }

    /// Records a progress milestone as [`progress`](Self::progress) does, with `data` kept beside the message in
    /// the progress log (contract §5).
    pub fn progress_with(&self, message: &str, data: V) -> bool {
        self.shared
            .record_progress(&self.entry, message, Some(data))
    }

    /// Reports success. True exactly when this moved the task from `Running` to `Completed`; after a cancel it
    /// returns false, the status stays `Cancelled`, and `result` is kept on the snapshot.
    pub fn complete(&self, result: Option<V>) -> bool {
        self.shared
            .end(&self.entry, RunnerEnd::Completed(result), Delivery::deliver)
            == Some(true)
    }

    /// Reports failure. True exactly when this moved the task from `Running` to `Failed`; after a cancel it
    /// returns false, the status stays `Cancelled`, and `error` is kept on the snapshot.
    pub fn fail(&self, error: &str) -> bool {
        self.fail_with(TaskFailure::new(error))
    }

    /// Reports failure with a message and, if given, the failure's type and code (contract §5), which
    /// snapshots show as `error`, `error_type` and `error_code`. True exactly when this moved the task from
    /// running to failed; a late failure after a cancel is kept, the status stays `Cancelled`.
    pub fn fail_with(&self, failure: TaskFailure) -> bool {
        self.shared
            .end(&self.entry, RunnerEnd::Failed(failure), Delivery::deliver)
            == Some(true)
    }

    /// Reports that the runner stopped because of a cancel: a still running task is cancelled first (with its
    /// cascade, `reason` defaulting to `"cancelled"`), then the task becomes finished. Returns true when this
    /// call did the cancelling.
    pub fn stop_cancelled(&self, reason: Option<&str>) -> bool {
        let cancelled_here = self.shared.cancel_entry(&self.entry, reason);
        self.shared
            .end(&self.entry, RunnerEnd::Stopped, Delivery::deliver);
        cancelled_here
    }

    /// Records that the runner did not stop within its grace period after a cancel and is being stopped by
    /// force; snapshots show it as `escalated`.
    pub fn record_escalation(&self) {
        self.shared.record_escalation(&self.entry);
    }

    /// True once the task has finished.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.entry.is_finished()
    }

    /// A snapshot of the task.
    #[must_use]
    pub fn snapshot(&self) -> SubagentTaskSnapshot<V> {
        self.entry.snapshot(self.shared.session_id())
    }
}

impl<V: Clone> Drop for SubagentTaskHandle<V> {
    fn drop(&mut self) {
        if !self.entry.is_finished() {
            let end = if self.entry.is_cancelled() {
                RunnerEnd::Stopped
            } else {
                RunnerEnd::Failed(TaskFailure::new(DROPPED_HANDLE_ERROR))
            };
            self.shared
                .end(&self.entry, end, Delivery::deliver_in_own_thread);
        }
    }
}

impl<V: Clone> fmt::Debug for SubagentTaskHandle<V> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SubagentTaskHandle")
            .field("task_id", &self.entry.task_id)
            .field("session_id", self.shared.session_id())
            .finish_non_exhaustive()
    }
}
