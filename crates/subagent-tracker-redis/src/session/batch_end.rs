//! Runners' ends in Redis, one or a batch (contract §22), each written as `stv2_end` takes it.

use std::sync::Arc;

use subagent_tracker::{check_batch_ends, validate_task_id, EndTarget, TaskEnd, TaskFailure};

use super::{is_gone, Outcome, RedisSession};
use crate::coalesce::MAX_ITEMS_PER_CALL;
use crate::store::{self};
use crate::{RedisTaskHandle, RedisTrackerError};

/// One end as `stv2_end` takes it: a completion without a result in the short form (the common path), any other
/// end in the long one.
fn end_item(task_id: &str, run: &str, outcome: &Outcome<'_>) -> Vec<String> {
    let (name, value, error_type, error_code) = match outcome {
        Outcome::Completed(None | Some("")) => {
            return vec!["c".to_owned(), task_id.to_owned(), run.to_owned()]
        }
        Outcome::Completed(Some(result)) => ("completed", *result, "", ""),
        Outcome::Failed(failure) => (
            "failed",
            &*failure.message,
            failure.error_type.as_deref().unwrap_or_default(),
            failure.error_code.as_deref().unwrap_or_default(),
        ),
        Outcome::Stopped(reason) => ("stopped", reason.unwrap_or_default(), "", ""),
        Outcome::Dropped => ("dropped", subagent_tracker::DROPPED_HANDLE_ERROR, "", ""),
    };
    ["e", task_id, run, name, value, error_type, error_code]
        .map(str::to_owned)
        .to_vec()
}

impl RedisSession {
    /// Records the end of a task without its handle (by id, from any process). The first transition wins.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn end(
        &self,
        task_id: &str,
        outcome: Result<Option<&str>, &str>,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        match outcome {
            Ok(result) => self.end_run(task_id, "", &Outcome::Completed(result)).await,
            Err(error) => self.fail(task_id, &TaskFailure::new(error)).await,
        }
    }

    /// Records the failure of a task without its handle, with the failure's type and code if given (contract
    /// §5). The first transition wins.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn fail(
        &self,
        task_id: &str,
        failure: &TaskFailure,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        self.end_run(task_id, "", &Outcome::Failed(failure)).await
    }

    pub(crate) async fn end_run(
        &self,
        task_id: &str,
        run: &str,
        outcome: &Outcome<'_>,
    ) -> Result<bool, RedisTrackerError> {
        let item = end_item(task_id, run, outcome);
        let transitioned = match self.calls.ends.call(item, &self.worker.runtime).await {
            Ok(reply) => reply,
            // A runner's end of a run whose incarnation has ended: the run is over, and this end changed nothing.
            Err(error) if !run.is_empty() && is_gone(&error) => return Ok(false),
            Err(error) => return Err(self.refusal(self.lost_if_gone(error).await, "", None)),
        };
        Ok(transitioned == 1)
    }

    /// Ends many tasks in one round trip, in order, each on its own as its own end would (a handle's
    /// `complete` or `fail_with`, or [`end`](Self::end) and [`fail`](Self::fail) by id), and returns per end
    /// whether it moved its task (contract §22, batch ends): the first transition wins, and an unknown or
    /// finished id, or a handle whose run has ended, is false. A handle ended here reports no further end, as
    /// after its own. Batches beyond the server's call size go as several calls in the one round trip.
    ///
    /// # Errors
    /// [`TrackerError::InvalidId`] and [`TrackerError::HandleOfAnotherSession`] refuse the whole batch before
    /// any end is sent; [`TrackerError::SessionClosed`] when this object's incarnation has ended and the batch
    /// names an id (its handles' runs are over: they are released); [`RedisTrackerError::Unavailable`]: some
    /// ends may have been recorded, and ending again is safe.
    ///
    /// [`TrackerError::InvalidId`]: subagent_tracker::TrackerError::InvalidId
    /// [`TrackerError::HandleOfAnotherSession`]: subagent_tracker::TrackerError::HandleOfAnotherSession
    /// [`TrackerError::SessionClosed`]: subagent_tracker::TrackerError::SessionClosed
    pub async fn end_batch(
        &self,
        mut ends: Vec<(EndTarget<&mut RedisTaskHandle>, TaskEnd<String>)>,
    ) -> Result<Vec<bool>, RedisTrackerError> {
        check_batch_ends(
            &self.session_id,
            &ends,
            |handle| handle.session().same_session(self),
            |handle| Arc::from(handle.task_id()),
        )?;
        let mut sent = Vec::with_capacity(ends.len());
        let mut items = Vec::with_capacity(ends.len());
        for (index, (target, end)) in ends.iter().enumerate() {
            let (task_id, run) = match target {
                // Answered by the handle, as its own later ends are.
                EndTarget::Handle(handle) if handle.has_reported_end() => continue,
                EndTarget::Handle(handle) => (handle.task_id(), handle.run()),
                EndTarget::TaskId(task_id) => (&**task_id, ""),
            };
            let outcome = match end {
                TaskEnd::Completed(result) => Outcome::Completed(result.as_deref()),
                TaskEnd::Failed(failure) => Outcome::Failed(failure),
            };
            items.push(end_item(task_id, run, &outcome));
            sent.push(index);
        }
        let mut calls = Vec::new();
        for chunk in items.chunks(MAX_ITEMS_PER_CALL) {
            let mut args: Vec<&str> = vec![&self.incarnation, &self.worker.process];
            args.extend(chunk.iter().flatten().map(String::as_str));
            calls.push((vec![&*self.key], args));
        }
        let mut connection = self.worker.connection.clone();
        let outcomes: Vec<Result<Vec<redis::Value>, RedisTrackerError>> =
            store::call_each(&mut connection, "end", &calls).await?;
        let mut walks_left = false;
        let mut moved = vec![false; ends.len()];
        let mut sent = sent.into_iter();
        let mut refusal = None;
        // The first chunk that failed; the others' ends took effect, and are settled here before it is raised.
        let mut failure = None;
        for (outcome, chunk) in outcomes.into_iter().zip(items.chunks(MAX_ITEMS_PER_CALL)) {
            let replies = match outcome.and_then(store::end_replies) {
                Ok(replies) if replies.moved.len() == chunk.len() => {
                    walks_left |= replies.walks_left;
                    self.worker.apply_told(&replies.told);
                    Ok(replies.moved)
                }
                Ok(_) => Err(RedisTrackerError::Protocol(Arc::from("stv2_end"))),
                // The incarnation has ended: every run of the batch is over, and no id can be ended.
                Err(error) if is_gone(&error) => {
                    refusal = Some(error);
                    Ok(vec![0; chunk.len()])
                }
                Err(error) => Err(error),
            };
            let replies = match replies {
                Ok(replies) => replies,
                Err(error) => {
                    failure.get_or_insert(error);
                    sent.by_ref().take(chunk.len()).for_each(drop);
                    continue;
                }
            };
            for transitioned in replies {
                let Some(index) = sent.next() else { break };
                moved[index] = transitioned == 1;
                if let (EndTarget::Handle(handle), _) = &mut ends[index] {
                    handle.release_after_end();
                }
            }
        }
        if walks_left {
            store::finish_walks(
                &mut connection,
                &self.key,
                &self.incarnation,
                &self.worker.process,
                |told| self.worker.apply_told(told),
            )
            .await?;
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        match refusal {
            Some(error)
                if ends
                    .iter()
                    .any(|(target, _)| matches!(target, EndTarget::TaskId(_))) =>
            {
                Err(self.refusal(self.lost_if_gone(error).await, "", None))
            }
            _ => Ok(moved),
        }
    }
}
