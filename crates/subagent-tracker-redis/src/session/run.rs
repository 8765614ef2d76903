//! What a run reports while it runs, kept in Redis: pauses and resumes, escalations and progress.

use subagent_tracker::validate_task_id;

use super::RedisSession;
use crate::RedisTrackerError;

impl RedisSession {
    /// Resumes the task `task_id`, which its runner paused, handing the runner `value` (JSON text) wherever it
    /// runs (contract §5, pause and resume). True exactly when this call resumed it: false for an unknown id or a
    /// task not paused. A runner in this process has been told before it returns, as in memory.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid id; [`RedisTrackerError::Unavailable`].
    pub async fn resume(
        &self,
        task_id: &str,
        value: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        let mut args = vec![&*self.incarnation, task_id, &self.worker.process];
        args.extend(value);
        let (resumed, told): (i64, String) = self.transition("resume", &args).await?;
        self.worker.apply_told(told.as_bytes());
        Ok(resumed == 1)
    }

    /// Records a pause of run `run`; returns its number among the run's pauses, 0 when refused.
    pub(crate) async fn pause_run(
        &self,
        task_id: &str,
        run: &str,
        reason: Option<&str>,
    ) -> Result<u64, RedisTrackerError> {
        let mut args = vec![&*self.incarnation, task_id, run];
        args.extend(reason);
        self.call("pause", &args).await
    }

    pub(crate) async fn record_escalation(
        &self,
        task_id: &str,
        run: &str,
    ) -> Result<bool, RedisTrackerError> {
        let recorded: i64 = self
            .call("escalate", &[&self.incarnation, task_id, run])
            .await?;
        Ok(recorded == 1)
    }

    pub(crate) async fn record_progress(
        &self,
        task_id: &str,
        run: &str,
        message: &str,
        data: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        let message = subagent_tracker::kept_progress_message(message);
        let data = data.unwrap_or_default();
        let recorded: i64 = self
            .call(
                "progress",
                &[&self.incarnation, task_id, run, message, data],
            )
            .await?;
        Ok(recorded == 1)
    }
}
