//! Batches of ends (contract §22): many tasks ended in one call, by their runners' handles or by id, each end
//! on its own.

use std::collections::HashSet;
use std::sync::Arc;

use crate::{
    validate_task_id, InMemorySubagentTaskTracker, SubagentTaskHandle, TaskFailure, TrackerError,
};

/// How one task of a batch ends: completed, with its result if any, or failed.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskEnd<V> {
    /// Success, as `complete(result)`.
    Completed(Option<V>),
    /// Failure, as `fail_with(failure)`.
    Failed(TaskFailure),
}

/// Whose end one item of a batch records: a runner's own run, through its handle (only that run: a later run of
/// the id is another task), or whatever run holds the id, as an end by id does.
#[derive(Debug)]
pub enum EndTarget<H> {
    /// The run of this handle, which must be of the session the batch ends tasks in.
    Handle(H),
    /// The task that holds this id now.
    TaskId(Arc<str>),
}

/// Checks a batch of ends before any of them is recorded: each id is valid, each handle is of the session
/// `session_id` (`of_session` says whether one is, `task_of` names its task), and the batch names each task once
/// (by its handle or its id), as a batch of starts does. A batch that fails the check changes nothing.
///
/// # Errors
/// [`TrackerError::InvalidId`], [`TrackerError::HandleOfAnotherSession`] and [`TrackerError::DuplicateInBatch`],
/// for the first item at fault.
pub fn check_batch_ends<H, V>(
    session_id: &Arc<str>,
    ends: &[(EndTarget<H>, TaskEnd<V>)],
    of_session: impl Fn(&H) -> bool,
    task_of: impl Fn(&H) -> Arc<str>,
) -> Result<(), TrackerError> {
    let mut named = HashSet::with_capacity(ends.len());
    for (target, _) in ends {
        let task_id = match target {
            EndTarget::TaskId(task_id) => {
                validate_task_id("task_id", task_id)?;
                task_id.clone()
            }
            EndTarget::Handle(handle) if !of_session(handle) => {
                return Err(TrackerError::HandleOfAnotherSession {
                    task_id: task_of(handle),
                    session_id: session_id.clone(),
                })
            }
            EndTarget::Handle(handle) => task_of(handle),
        };
        if !named.insert(task_id.clone()) {
            return Err(TrackerError::DuplicateInBatch { task_id });
        }
    }
    Ok(())
}

impl<V: Clone + Send + Sync + 'static> InMemorySubagentTaskTracker<V> {
    /// Ends many tasks in one call, in order, each as its own end would (a handle's `complete` or `fail_with`,
    /// or [`end`](Self::end) and [`fail`](Self::fail) by id), and returns per end whether it moved its task:
    /// the first transition wins, and an unknown or finished id, or a handle whose run has ended, is false.
    /// The in-memory twin of the Redis store's batch end, which is one round trip.
    ///
    /// # Errors
    /// As [`check_batch_ends`]: an invalid id, or a handle of another session, refuses the whole batch before
    /// any end is recorded.
    pub fn end_batch(
        &self,
        ends: Vec<(EndTarget<&SubagentTaskHandle<V>>, TaskEnd<V>)>,
    ) -> Result<Vec<bool>, TrackerError> {
        check_batch_ends(
            self.shared().session_id(),
            &ends,
            |handle| handle.belongs_to(self.shared()),
            |handle| handle.task_id().clone(),
        )?;
        Ok(ends
            .into_iter()
            .map(|(target, end)| match (target, end) {
                (EndTarget::Handle(handle), TaskEnd::Completed(result)) => handle.complete(result),
                (EndTarget::Handle(handle), TaskEnd::Failed(failure)) => handle.fail_with(failure),
                (EndTarget::TaskId(task_id), TaskEnd::Completed(result)) => {
                    self.end(&task_id, Ok(result))
                }
                (EndTarget::TaskId(task_id), TaskEnd::Failed(failure)) => {
                    self.fail(&task_id, failure)
                }
            })
            .collect())
    }
}
