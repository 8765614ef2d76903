//! The runner's side of a task kept in Redis.

use subagent_tracker::{
    CancelCallback, ResumeWatch, SubagentTaskHandle, SubagentTaskToken, TaskFailure,
    DEFAULT_CANCEL_REASON,
};

use crate::session::Outcome;
use crate::worker::RunKey;
use crate::{RedisSession, RedisTrackerError};

/// Held by the code that runs a task: its token fires in this process when the task is cancelled in Redis, by
/// any process; it reports progress and the end.
///
/// Dropping the handle before reporting an end fails a running task with
/// [`DROPPED_HANDLE_ERROR`](subagent_tracker::DROPPED_HANDLE_ERROR) (and finishes a cancelled one), from a task on the registry's runtime.
pub struct RedisTaskHandle {
    session: RedisSession,
    run: RunKey,
    local: Option<SubagentTaskHandle<String>>,
    /// The run's token, kept past the end (the local handle is let go of then).
    token: SubagentTaskToken,
    /// Registrations on the tokens the task is linked to, removed when the task ends.
    links: Vec<CancelCallback>,
}

impl RedisTaskHandle {
    pub(crate) fn new(
        session: RedisSession,
        run: RunKey,
        local: SubagentTaskHandle<String>,
    ) -> RedisTaskHandle {
        RedisTaskHandle {
            session,
            run,
            token: local.token(),
            local: Some(local),
            links: Vec::new(),
        }
    }

    pub(crate) fn keep_links(&mut self, links: Vec<CancelCallback>) {
        self.links = links;
    }

    pub(crate) fn session(&self) -> &RedisSession {
        &self.session
    }

    /// Stops mirroring the run once a batch recorded its end (`RedisSession::end_batch`), as the handle's own
    /// end does.
    pub(crate) fn release_after_end(&mut self) {
        self.release(None);
    }

    /// The task's id.
    #[must_use]
    pub fn task_id(&self) -> &str {
        &self.run.task_id
    }

    /// The session's id.
    #[must_use]
    pub fn session_id(&self) -> &str {
        &self.run.session_id
    }

    /// This run's number, unique in the session: it tells apart two runs of one task id.
    #[must_use]
    pub fn run(&self) -> &str {
        &self.run.run
    }

    /// The token that fires when the task is cancelled. Reading it never touches the network.
    #[must_use]
    pub fn token(&self) -> SubagentTaskToken {
        self.token.clone()
    }

    /// True once the cancel has reached this process: one atomic load.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.local
            .as_ref()
            .is_some_and(SubagentTaskHandle::is_cancelled)
    }

    /// Records a progress message (and keeps it in the task's progress log); false once the task has finished.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn progress(&self, message: &str) -> Result<bool, RedisTrackerError> {
        self.session
            .record_progress(&self.run.task_id, &self.run.run, message, None)
            .await
    }

    /// Records a progress report as [`progress`](Self::progress) does, with `data` (JSON text) kept beside the
    /// message in the task's progress log (contract §5).
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn progress_with(
        &self,
        message: &str,
        data: &str,
    ) -> Result<bool, RedisTrackerError> {
        self.session
            .record_progress(&self.run.task_id, &self.run.run, message, Some(data))
            .await
    }

    /// Pauses the running task, as the in-memory handle does (contract §5, pause and resume): in Redis, where
    /// every process sees it, and in this process, where the runner waits for the resume. False, changing
    /// nothing, when the task is not running.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`]: the pause may not have been recorded; the task runs on here.
    pub async fn pause(&self, reason: Option<&str>) -> Result<bool, RedisTrackerError> {
        let Some(local) = &self.local else {
            return Ok(false);
        };
        // Paused here first, and numbered: a resume notified right after Redis records the pause must find it
        // paused, and a resume of an earlier pause must not end it.
        let worker = self.session.worker();
        let number = worker.begin_pause(&self.run);
        if !local.pause(reason) {
            worker.abandon_pause(&self.run, number);
            return Ok(false);
        }
        let recorded = self
            .session
            .pause_run(&self.run.task_id, &self.run.run, reason)
            .await;
        if let Ok(recorded @ 1..) = recorded {
            // Redis's count, should an earlier pause have been recorded there unknown to this process.
            worker.number_pause(&self.run, number, recorded);
            return Ok(true);
        }
        // Refused (the run was cancelled or ended there) or unknown: the runner must not wait here.
        worker.abandon_pause(&self.run, number);
        local.resume();
        recorded.map(|_| false)
    }

    /// What the runner needs to wait for the resume in this process, where a resume or a cancel from any
    /// process reaches it (kept valid past the handle's end, when the watch tells the pause ended).
    #[must_use]
    pub fn resume_watch(&self) -> Option<ResumeWatch<String>> {
        self.local.as_ref().map(SubagentTaskHandle::resume_watch)
    }

    /// Records that the runner did not stop within its grace period after a cancel and is being stopped by
    /// force; snapshots show it as `escalated`. False when this run is no longer the task's current one.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn record_escalation(&self) -> Result<bool, RedisTrackerError> {
        self.session
            .record_escalation(&self.run.task_id, &self.run.run)
            .await
    }

    /// Reports success. True exactly when this moved the task to `Completed`.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`]: the end may not have been recorded; the handle keeps the run, so
    /// the runner can report again.
    pub async fn complete(&mut self, result: Option<&str>) -> Result<bool, RedisTrackerError> {
        self.end(&Outcome::Completed(result)).await
    }

    /// Reports failure. True exactly when this moved the task to `Failed`.
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn fail(&mut self, error: &str) -> Result<bool, RedisTrackerError> {
        self.fail_with(&TaskFailure::new(error)).await
    }

    /// Reports failure with the failure's type and code, if given (contract §5). True exactly when this moved
    /// the task to `Failed`.
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn fail_with(&mut self, failure: &TaskFailure) -> Result<bool, RedisTrackerError> {
        self.end(&Outcome::Failed(failure)).await
    }

    /// Reports that the runner stopped on a cancel: the task stays `Cancelled` and becomes finished. A runner
    /// that stopped on a cancel of its own (one the store has not seen) cancels the task first, with `reason`.
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn stopped(&mut self, reason: Option<&str>) -> Result<bool, RedisTrackerError> {
        self.end(&Outcome::Stopped(reason)).await
    }

    /// True once this handle has reported its run's end: the server refuses every later end of the run (it is
    /// finished, or another run holds the id), so each is false, answered without a round trip. The common case
    /// is `async with handle:` around a runner that completes: the block's exit is a second end.
    #[must_use]
    pub fn has_reported_end(&self) -> bool {
        self.local.is_none()
    }

    async fn end(&mut self, outcome: &Outcome<'_>) -> Result<bool, RedisTrackerError> {
        if self.has_reported_end() {
            return Ok(false);
        }
        let ended = self
            .session
            .end_run(&self.run.task_id, &self.run.run, outcome)
            .await?;
        let stopped_by = match outcome {
            Outcome::Stopped(reason) => Some(reason.unwrap_or(DEFAULT_CANCEL_REASON)),
            _ => None,
        };
        self.release(stopped_by);
        Ok(ended)
    }

    /// Stops mirroring the run: its token will not fire any more, unless it fired, or the runner stopped on a
    /// cancel (`stopped_by` its reason), which the token shows as Redis does.
    fn release(&mut self, stopped_by: Option<&str>) {
        for link in self.links.drain(..) {
            link.remove();
        }
        self.session.worker().release(&self.run);
        if let Some(local) = self.local.take() {
            match stopped_by {
                Some(reason) => {
                    local.stop_cancelled(Some(reason));
                }
                None => {
                    local.complete(None);
                }
            }
        }
    }
}

impl Drop for RedisTaskHandle {
    fn drop(&mut self) {
        if self.local.is_none() {
            return;
        }
        // Under way until written: should the write fail, the run is left to the orphan check.
        let call = self
            .session
            .worker()
            .track_call(&self.run.session_id, &self.run.task_id, false);
        self.release(None);
        let session = self.session.clone();
        let run = self.run.clone();
        // No await in `Drop`: the end is written by a task of the registry's runtime.
        self.session.worker().runtime.spawn(async move {
            let written = session
                .end_run(&run.task_id, &run.run, &Outcome::Dropped)
                .await;
            if written.is_ok() {
                call.settle();
            }
        });
    }
}
