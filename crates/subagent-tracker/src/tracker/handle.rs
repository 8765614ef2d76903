//! The runner's side of a task.

use std::fmt;
use std::sync::Arc;

use crate::token::delivery::Delivery;
use crate::tracker::engine::TrackerShared;
use crate::tracker::entry::{Resumption, RunnerEnd, TaskEntry};
use crate::{SubagentStatus, SubagentTaskSnapshot, SubagentTaskToken, TaskFailure, WaitForResume};

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

    /// Whether this handle is of the session `shared` holds.
    pub(crate) fn belongs_to(&self, shared: &Arc<TrackerShared<V>>) -> bool {
        Arc::ptr_eq(&self.shared, shared)
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

    /// Pauses the running task, to wait for a person's approval say (contract §5, pause and resume): `Running`
    /// becomes `Paused`, which is pending, so a cancel, a deadline or an end still moves it on. Snapshots show
    /// `reason` as `pause_reason` until the session resumes the task. False, changing nothing, if the task is
    /// not running.
    pub fn pause(&self, reason: Option<&str>) -> bool {
        let mut delivery = Delivery::default();
        let paused = self
            .entry
            .pause(reason.map(Arc::from), &self.shared.bus, &mut delivery);
        delivery.deliver();
        paused
    }

    /// Ends the task's pause from the runner's side (it stopped waiting: its approval timed out, say), with no
    /// value: `Paused` becomes `Running` as a session's resume would make it. False if the task is not paused.
    pub fn resume(&self) -> bool {
        let mut delivery = Delivery::default();
        let resumed = self.entry.resume(None, &self.shared.bus, &mut delivery);
        delivery.deliver();
        resumed
    }

    /// What the runner needs to wait for the resume, apart from the handle (cheap to clone, and kept past the
    /// handle by a store that lets go of it at the end).
    #[must_use]
    pub fn resume_watch(&self) -> ResumeWatch<V> {
        ResumeWatch {
            entry: self.entry.clone(),
        }
    }

    /// Where the paused task stands now: still paused, resumed with a value, cancelled, or ended.
    #[must_use]
    pub fn resumption(&self) -> Resumption<V> {
        self.entry.resumption()
    }

    /// Waits until the task is no longer paused and tells how the pause ended.
    pub async fn resumed(&self) -> Resumption<V> {
        self.resume_watch().resumed().await
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

/// A runner's wait for the resume of its paused task (contract §5, pause and resume), from
/// [`SubagentTaskHandle::resume_watch`].
pub struct ResumeWatch<V> {
    entry: Arc<TaskEntry<V>>,
}

impl<V> Clone for ResumeWatch<V> {
    fn clone(&self) -> Self {
        ResumeWatch {
            entry: self.entry.clone(),
        }
    }
}

impl<V: Clone> ResumeWatch<V> {
    /// A future that is ready once the task is no longer paused: resumed, cancelled or ended (at once if it
    /// is not paused). [`resumption`](Self::resumption) then tells which.
    pub fn wait_for_resume(&self) -> WaitForResume {
        WaitForResume::new(self.entry.signal.clone())
    }

    /// Blocks the calling thread until the task is no longer paused (true) or `timeout` passes (false).
    #[must_use]
    pub fn wait_for_resume_blocking(&self, timeout: Option<std::time::Duration>) -> bool {
        let deadline = timeout.and_then(|timeout| std::time::Instant::now().checked_add(timeout));
        self.entry.signal.wait_resumed_blocking(deadline)
    }

    /// Where the paused task stands now: still paused, resumed with a value, cancelled, or ended.
    #[must_use]
    pub fn resumption(&self) -> Resumption<V> {
        self.entry.resumption()
    }

    /// Waits until the task is no longer paused and tells how the pause ended.
    pub async fn resumed(&self) -> Resumption<V> {
        self.wait_for_resume().await;
        self.resumption()
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
