//! The description of a task to start or reserve, taken the same way by every kind of session (in memory or in
//! Redis, blocking or asyncio): the keyword arguments of `start_subagent_task` and `reserve_subagent_task`, or
//! one mapping of a batch (`batch_arguments`).

use std::time::Duration;

use pyo3::prelude::*;
use subagent_tracker::TaskStart;

use crate::arguments::{
    self, ClaimTimeoutArgument, EpochDeadline, Id, JsonMetadata, Metadata, ParentIdArgument,
    Seconds, TaskIdArgument, TimeoutArgument,
};
use crate::python_types::PyValue;
use crate::token::Tokens;

/// A task's description as the caller gave it: ids, times and tokens already extracted, the strings and the
/// metadata checked by [`into_start`](Self::into_start).
pub(crate) struct StartArguments<'py> {
    pub(crate) task_id: Option<Id<TaskIdArgument>>,
    pub(crate) parent_id: Option<Id<ParentIdArgument>>,
    pub(crate) agent: Option<Bound<'py, PyAny>>,
    pub(crate) description: Option<Bound<'py, PyAny>>,
    /// As given: each store keeps it in its own form ([`StoredMetadata`]).
    pub(crate) metadata: Option<Bound<'py, PyAny>>,
    pub(crate) timeout: Option<Seconds<TimeoutArgument>>,
    pub(crate) deadline: Option<EpochDeadline>,
    pub(crate) detached: bool,
    pub(crate) structured: bool,
    pub(crate) linked: Option<Tokens>,
    /// A reservation's own claim timeout.
    pub(crate) claim_timeout: Option<Seconds<ClaimTimeoutArgument>>,
}

/// Metadata as a store keeps it: a deep read-only copy in memory, JSON text that every process reads back in
/// Redis.
pub(crate) trait StoredMetadata: Sized {
    /// `metadata` (not `None`) in this store's form; `TypeError` or `ValueError` for what the store cannot keep.
    fn from_argument(metadata: &Bound<'_, PyAny>) -> PyResult<Self>;
}

impl StoredMetadata for PyValue {
    fn from_argument(metadata: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyValue::new(metadata.extract::<Metadata>()?.0))
    }
}

impl StoredMetadata for String {
    fn from_argument(metadata: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(metadata.extract::<JsonMetadata>()?.0)
    }
}

impl StartArguments<'_> {
    /// The core's description of the task, with its metadata in the store's form, and the reservation's own
    /// claim timeout.
    pub(crate) fn into_start<V: StoredMetadata>(
        self,
    ) -> PyResult<(TaskStart<V>, Option<Duration>)> {
        // The metadata first, as the Redis sessions always checked it: every store then raises the same error
        // for a call with more than one bad argument.
        let metadata = self
            .metadata
            .filter(|metadata| !metadata.is_none())
            .map(|metadata| V::from_argument(&metadata))
            .transpose()?;
        let mut start = TaskStart::new();
        if let Some(task_id) = self.task_id {
            start = start.task_id(task_id.0);
        }
        if let Some(parent_id) = self.parent_id {
            start = start.parent_id(&*parent_id.0);
        }
        if let Some(agent) = arguments::optional_string(self.agent.as_ref(), "agent")? {
            start = start.agent(agent);
        }
        if let Some(description) =
            arguments::optional_string(self.description.as_ref(), "description")?
        {
            start = start.description(description);
        }
        if let Some(metadata) = metadata {
            start = start.metadata(metadata);
        }
        if let Some(timeout) = self.timeout {
            start = start.timeout(timeout.0);
        }
        if let Some(deadline) = self.deadline {
            start = start.deadline_at(deadline.0);
        }
        start = start.detached(self.detached).structured(self.structured);
        for token in self.linked.map(|tokens| tokens.0).unwrap_or_default() {
            start = start.linked(token);
        }
        Ok((start, self.claim_timeout.map(|seconds| seconds.0)))
    }
}
