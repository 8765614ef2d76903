//! The description of a task to start or reserve, taken the same way by every kind of session (in memory or in
//! Redis, blocking or asyncio): the keyword arguments of `start_subagent_task` and `reserve_subagent_task`, or
//! one mapping of a batch (`batch_arguments`).
//!
//! The start options are declared once, here ([`START_OPTIONS`], read by [`StartArguments::read`]): every
//! native reservation takes them as `**options`, and Python declares them once too, as the `StartOptions`
//! typed dict that the stubs and the protocols unpack (a test holds the two lists equal). A start names each
//! in its signature instead ([`StartKeywords`], in the same order; a test holds its signature to the list):
//! `PyO3` then reads a start's arguments without building a tuple and a dict, on the call users repeat most.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use subagent_tracker::TaskStart;

use crate::arguments::{
    self, ClaimTimeoutArgument, EpochDeadline, Id, JsonMetadata, Metadata, ParentIdArgument,
    Seconds, TaskIdArgument, TimeoutArgument,
};
use crate::keyword_options::{argument_error, keyword, keywords};
use crate::python_types::PyValue;
use crate::token::Tokens;

/// The start options: the keyword arguments of `start_subagent_task` after `task_id`, in its signature's order,
/// and the keys of a batch's tasks besides it. Of several bad ones, the first reported is the first of this
/// list whose type is read as it is extracted ([`StartArguments::read`]: `parent_id`, `timeout`, `deadline`, the
/// flags, `linked`); the metadata, `agent` and `description` are checked after those, as the start is built
/// ([`StartArguments::into_start`]), the same way on every store.
pub(crate) const START_OPTIONS: [&str; 9] = [
    "parent_id",
    "agent",
    "description",
    "metadata",
    "timeout",
    "deadline",
    "detached",
    "structured",
    "linked",
];

/// A reservation's option beyond a start's.
pub(crate) const CLAIM_TIMEOUT: &str = "claim_timeout";

/// A task's description as the caller gave it: ids, times and tokens already extracted, the strings and the
/// metadata checked by [`into_start`](Self::into_start). Its default is every option at its default.
#[derive(Default)]
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

/// The start options as `start_subagent_task` takes them: each by its own keyword, in the order of
/// [`START_OPTIONS`], and each read as [`StartArguments::read`] reads it.
pub(crate) struct StartKeywords<'py> {
    pub(crate) parent_id: Option<Bound<'py, PyAny>>,
    pub(crate) agent: Option<Bound<'py, PyAny>>,
    pub(crate) description: Option<Bound<'py, PyAny>>,
    pub(crate) metadata: Option<Bound<'py, PyAny>>,
    pub(crate) timeout: Option<Bound<'py, PyAny>>,
    pub(crate) deadline: Option<Bound<'py, PyAny>>,
    pub(crate) detached: FlagArgument<'py>,
    pub(crate) structured: FlagArgument<'py>,
    pub(crate) linked: Option<Bound<'py, PyAny>>,
}

/// A flag as a signature takes it: a given `None` is a value (a flag must be a `bool`), not the default,
/// which an `Option` parameter could not tell apart.
pub(crate) enum FlagArgument<'py> {
    NotGiven,
    Given(Bound<'py, PyAny>),
}

impl<'py> FromPyObject<'_, 'py> for FlagArgument<'py> {
    type Error = std::convert::Infallible;

    fn extract(value: pyo3::Borrowed<'_, 'py, PyAny>) -> Result<Self, Self::Error> {
        Ok(FlagArgument::Given(value.to_owned()))
    }
}

impl<'py> FlagArgument<'py> {
    fn value(self) -> Option<Bound<'py, PyAny>> {
        match self {
            FlagArgument::NotGiven => None,
            FlagArgument::Given(value) => Some(value),
        }
    }
}

impl StartKeywords<'_> {
    /// True when every option is at its default: the start is then [`StartArguments::bare_start`], which reads
    /// none. The options then hold no Python object, so the caller may forget them rather than drop them.
    #[inline]
    pub(crate) fn are_defaults(&self) -> bool {
        matches!(self.detached, FlagArgument::NotGiven)
            && matches!(self.structured, FlagArgument::NotGiven)
            && self.parent_id.is_none()
            && self.agent.is_none()
            && self.description.is_none()
            && self.metadata.is_none()
            && self.timeout.is_none()
            && self.deadline.is_none()
            && self.linked.is_none()
    }

    /// The start of the task `task_id` with these options, read as [`StartArguments::read`] reads a call's
    /// keywords.
    #[inline(never)]
    pub(crate) fn into_start<V: StoredMetadata>(
        self,
        task_id: Option<Id<TaskIdArgument>>,
    ) -> PyResult<TaskStart<V>> {
        let (detached, structured) = (self.detached.value(), self.structured.value());
        let value = |key: &str| {
            Ok(match key {
                "parent_id" => self.parent_id.clone(),
                "agent" => self.agent.clone(),
                "description" => self.description.clone(),
                "metadata" => self.metadata.clone(),
                "timeout" => self.timeout.clone(),
                "deadline" => self.deadline.clone(),
                "detached" => detached.clone(),
                "structured" => structured.clone(),
                "linked" => self.linked.clone(),
                // A start has no claim timeout.
                _ => None,
            })
        };
        Ok(StartArguments::read(task_id, value, true)?.into_start()?.0)
    }
}

impl<'py> StartArguments<'py> {
    /// The start of the task `task_id` with every option at its default: the call users repeat most, which
    /// needs no options read.
    pub(crate) fn bare_start<V>(task_id: Option<Id<TaskIdArgument>>) -> TaskStart<V> {
        match task_id {
            Some(task_id) => TaskStart::new().task_id(task_id.0),
            None => TaskStart::new(),
        }
    }

    /// The task `task_id` with the keyword arguments `options` of the call `call` (`Class.method`), which
    /// `reserving` lets name a claim timeout. Errors read as Python's own keyword parsing words them: an
    /// unknown keyword first, then a value of the wrong type as `argument 'name': ...`.
    pub(crate) fn from_keywords(
        task_id: Option<Id<TaskIdArgument>>,
        options: Option<&Bound<'py, PyDict>>,
        reserving: bool,
        call: &str,
    ) -> PyResult<StartArguments<'py>> {
        let Some(options) = options else {
            return Ok(StartArguments {
                task_id,
                ..StartArguments::default()
            });
        };
        let known = |key: &str| START_OPTIONS.contains(&key) || (reserving && key == CLAIM_TIMEOUT);
        let value = keywords(Some(options), known, call)?;
        StartArguments::read(task_id, value, true)
    }

    /// The task `task_id` with the options that `value` gives (`None` for one not given): each read in the
    /// order of [`START_OPTIONS`], then the claim timeout. A given `None` means the default, but for the flags,
    /// which must be `bool`; with `as_arguments`, a `TypeError` names its argument as Python's own does.
    pub(crate) fn read(
        task_id: Option<Id<TaskIdArgument>>,
        value: impl Fn(&str) -> PyResult<Option<Bound<'py, PyAny>>>,
        as_arguments: bool,
    ) -> PyResult<StartArguments<'py>> {
        let given = |key: &str| -> PyResult<Option<Bound<'py, PyAny>>> {
            Ok(value(key)?.filter(|value| !value.is_none()))
        };
        let flag = |key: &str| -> PyResult<bool> {
            let Some(value) = value(key)? else {
                return Ok(false);
            };
            value.extract::<bool>().map_err(|error| {
                if as_arguments {
                    argument_error(value.py(), key, error)
                } else {
                    error
                }
            })
        };
        Ok(StartArguments {
            task_id,
            parent_id: keyword(value("parent_id")?, "parent_id", as_arguments)?,
            agent: given("agent")?,
            description: given("description")?,
            metadata: given("metadata")?,
            timeout: keyword(value("timeout")?, "timeout", as_arguments)?,
            deadline: keyword(value("deadline")?, "deadline", as_arguments)?,
            detached: flag("detached")?,
            structured: flag("structured")?,
            linked: keyword(value("linked")?, "linked", as_arguments)?,
            claim_timeout: keyword(value(CLAIM_TIMEOUT)?, CLAIM_TIMEOUT, as_arguments)?,
        })
    }

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
