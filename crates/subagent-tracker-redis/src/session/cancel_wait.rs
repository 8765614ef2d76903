//! Waiting for a task kept in Redis to finish, and for a cancel's work to be done (contract §3, cancel and wait).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use subagent_tracker::{validate_task_id, SubagentEventKind, SubagentTaskSnapshot, TrackerError};

use super::RedisSession;
use crate::RedisTrackerError;

/// The most items of a walk's frontier one call of `stv2_handling` takes (`HANDLING_STEP` in
/// `lua/functions/handling.lua`): a call reads that many tasks or children sets, whatever the size of the tree.
const HANDLING_STEP: usize = 32;

impl RedisSession {
    /// Waits until the task `task_id` has finished, in whatever process it runs, and returns its final
    /// snapshot. Bound it with `tokio::time::timeout`.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] (as [`RedisTrackerError::Tracker`]) for a task that is not retained;
    /// [`RedisTrackerError::Unavailable`].
    pub async fn wait_finished(
        &self,
        task_id: &str,
    ) -> Result<SubagentTaskSnapshot<String>, RedisTrackerError> {
        // Subscribed before the first look, so an end between the two is not missed.
        let mut events = self.subscribe().await?;
        loop {
            match self.read(task_id, None, true).await? {
                None => {
                    return Err(TrackerError::UnknownTask {
                        task_id: Arc::from(task_id),
                        session_id: self.session_id.clone(),
                    }
                    .into())
                }
                Some(snapshot) if snapshot.finished => return Ok(snapshot),
                Some(_) => {}
            }
            loop {
                let event = events.next().await?;
                let ended = event.kind == SubagentEventKind::Ended && &*event.task_id == task_id;
                if ended || event.kind == SubagentEventKind::Lagged {
                    break;
                }
            }
        }
    }

    /// Cancels the task `task_id` as [`cancel`](Self::cancel) does, then waits until its runner has ended and the
    /// worker processes that run the task and its descendants have reported their cancel handlers done
    /// (contract §3, cancel and wait); returns the final snapshot. A task cancelled or finished before is waited
    /// for all the same.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid or unknown id (or one no longer retained once finished);
    /// [`RedisTrackerError::Unavailable`].
    pub async fn cancel_and_wait(
        &self,
        task_id: &str,
        reason: Option<&str>,
    ) -> Result<SubagentTaskSnapshot<String>, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        self.cancel_with(task_id, reason, "requested", "", "")
            .await?;
        let finished = self.wait_finished(task_id).await?;
        // The handlers' reports come from other processes, and rarely after the runner's end: a short poll. A
        // walk of the tree takes a call per few dozen tasks, so between walks only the tasks found at work are
        // looked at again; the wait ends when a whole walk finds none.
        let mut pause = Duration::from_millis(2);
        let mut at_work = match self.cancel_work(task_id).await? {
            Some((_, at_work)) => at_work,
            None => Vec::new(),
        };
        while !at_work.is_empty() {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            let items = at_work
                .iter()
                .map(|task_id| format!("h{task_id}"))
                .collect();
            at_work = match self.walk_cancel_work(task_id, items).await? {
                Some((_, still)) if !still.is_empty() => still,
                Some(_) => match self.cancel_work(task_id).await? {
                    Some((_, at_work)) => at_work,
                    None => Vec::new(),
                },
                None => Vec::new(),
            };
        }
        Ok(self.read(task_id, None, true).await?.unwrap_or(finished))
    }

    /// Where a cancel of the task `task_id` stands: whether its runner has ended, and the ids of the task and
    /// its descendants whose cancel handlers their worker processes have yet to report done; `None` when the
    /// task is not retained. The tree is walked in calls of a bounded number of tasks each (contract §3), so a
    /// task that joins it or leaves it meanwhile is seen by the steps after.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn cancel_work(
        &self,
        task_id: &str,
    ) -> Result<Option<(bool, Vec<Arc<str>>)>, RedisTrackerError> {
        self.walk_cancel_work(task_id, VecDeque::new()).await
    }

    /// `cancel_work` from a frontier of `stv2_handling`'s items (the task itself when empty), through as many
    /// calls as the walk takes.
    pub(super) async fn walk_cancel_work(
        &self,
        task_id: &str,
        mut frontier: VecDeque<String>,
    ) -> Result<Option<(bool, Vec<Arc<str>>)>, RedisTrackerError> {
        let malformed = || RedisTrackerError::Protocol(Arc::from("stv2_handling"));
        let mut at_work = Vec::new();
        loop {
            let step: Vec<String> = frontier
                .drain(..frontier.len().min(HANDLING_STEP))
                .collect();
            let mut args = vec![&*self.incarnation, task_id];
            args.extend(step.iter().map(String::as_str));
            let answer: Vec<String> = self.transition("handling", &args).await?;
            let mut answer = answer.into_iter();
            let Some(finished) = answer.next() else {
                return Ok(None);
            };
            let count: usize = answer
                .next()
                .and_then(|count| count.parse().ok())
                .ok_or_else(malformed)?;
            at_work.extend(answer.by_ref().take(count).map(|id| Arc::from(id.as_str())));
            frontier.extend(answer);
            if frontier.is_empty() {
                return Ok(Some((finished == "1", at_work)));
            }
        }
    }
}
