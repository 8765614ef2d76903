//! Recording another runtime's events in a session kept in Redis: a task it starts names no worker process.

use std::sync::Arc;

use subagent_tracker::{generate_id, validate_task_id, RecordedEvent, TaskStart, TrackerError};

use super::RedisSession;
use crate::RedisTrackerError;

impl RedisSession {
    /// Records one event of another runtime's stream, as the in-memory tracker does (contract §5, event-sourced
    /// ingestion; see [`InMemorySubagentTaskTracker::record_event`](subagent_tracker::InMemorySubagentTaskTracker::record_event)),
    /// and returns whether it changed the session. A task started by an event names no worker process: its
    /// end comes as an event, from any process.
    ///
    /// # Errors
    /// As [`start`](Self::start) for a start the session refuses other than as a repeat;
    /// [`RedisTrackerError::Unavailable`].
    pub async fn record_event(
        &self,
        event: RecordedEvent<String>,
    ) -> Result<bool, RedisTrackerError> {
        match event {
            RecordedEvent::Started(start) => {
                let task_id = start
                    .given_task_id()
                    .cloned()
                    .unwrap_or_else(|| Arc::from(generate_id()));
                validate_task_id("task_id", &task_id)?;
                self.open_without_runner(start.task_id(task_id)).await
            }
            RecordedEvent::Progress {
                task_id,
                message,
                data,
            } => {
                validate_task_id("task_id", &task_id)?;
                self.record_progress(&task_id, "", &message, data.as_deref())
                    .await
            }
            RecordedEvent::Ended { task_id, outcome } => {
                validate_task_id("task_id", &task_id)?;
                match self.read(&task_id, None, true).await? {
                    Some(task) if task.finished => return Ok(false),
                    Some(_) => {}
                    // An end whose start was never seen: the task is recorded started, then ended.
                    None => {
                        self.open_without_runner(TaskStart::new().task_id(task_id.clone()))
                            .await?;
                    }
                }
                match &outcome {
                    Ok(result) => self.end(&task_id, Ok(result.as_deref())).await,
                    Err(failure) => self.fail(&task_id, failure).await,
                }
            }
        }
    }

    /// Opens a task run elsewhere: true when it opened, false when its id was retained already, live or finished
    /// (a repeat: such a start never restarts a finished run).
    pub(super) async fn open_without_runner(
        &self,
        start: TaskStart<String>,
    ) -> Result<bool, RedisTrackerError> {
        match self.open(start, None, false).await {
            Ok((_, _, _links, call)) => {
                call.settle();
                Ok(true)
            }
            Err(RedisTrackerError::Tracker(TrackerError::DuplicateTask { .. })) => Ok(false),
            Err(error) => Err(error),
        }
    }
}
