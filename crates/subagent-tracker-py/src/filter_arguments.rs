//! The arguments of `cancel_subagent_tasks`: which pending tasks to cancel, checked alike for every store.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyMapping;
use subagent_tracker::SubagentStatus;

use crate::arguments::{self, JsonMetadata, Metadata};
use crate::python_types::PyValue;

/// A cancel by filter's arguments, checked in one order (agent, status, metadata, reason) on every store, so
/// that a call with more than one bad argument raises the same error everywhere.
pub(crate) struct FilterArguments<'py> {
    pub(crate) agent: Option<String>,
    pub(crate) status: Option<SubagentStatus>,
    metadata: Option<Bound<'py, PyAny>>,
    pub(crate) reason: Option<String>,
}

impl<'py> FilterArguments<'py> {
    pub(crate) fn new(
        agent: Option<&Bound<'py, PyAny>>,
        status: Option<&Bound<'py, PyAny>>,
        metadata: Option<&Bound<'py, PyAny>>,
        reason: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let agent = arguments::optional_string(agent, "agent")?;
        let status = arguments::optional_string(status, "status")?
            .map(|name| {
                SubagentStatus::from_name(&name).ok_or_else(|| {
                    let names: Vec<String> = SubagentStatus::ALL
                        .iter()
                        .map(|status| format!("'{status}'"))
                        .collect();
                    PyValueError::new_err(format!(
                        "status must be a SubagentStatus or one of {}, got '{name}'",
                        names.join(", ")
                    ))
                })
            })
            .transpose()?;
        let metadata = metadata.filter(|metadata| !metadata.is_none()).cloned();
        if let Some(metadata) = &metadata {
            // Checked here too, so that the JSON and the frozen forms below cannot fail.
            metadata.extract::<Metadata>()?;
        }
        let reason = arguments::optional_string(reason, "reason")?;
        Ok(FilterArguments {
            agent,
            status,
            metadata,
            reason,
        })
    }

    /// The wanted metadata as a session in memory compares it: the items of a deep read-only copy, as its tasks
    /// keep theirs.
    pub(crate) fn frozen_metadata(&self) -> PyResult<Option<WantedItems<'py>>> {
        let Some(metadata) = &self.metadata else {
            return Ok(None);
        };
        let frozen = metadata.extract::<Metadata>()?.0.into_bound(metadata.py());
        let items = frozen.cast_into::<PyMapping>()?.items()?;
        Ok(Some(
            items
                .iter()
                .map(|item| item.extract())
                .collect::<PyResult<_>>()?,
        ))
    }

    /// The wanted metadata as a Redis session compares it: JSON text.
    pub(crate) fn json_metadata(&self) -> PyResult<Option<String>> {
        self.metadata
            .as_ref()
            .map(|metadata| Ok(metadata.extract::<JsonMetadata>()?.0))
            .transpose()
    }
}

/// The wanted metadata's items.
pub(crate) type WantedItems<'py> = Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>;

/// Whether a task's metadata (`None` for a task without) holds every wanted key with an equal value, by
/// Python's `==`. Both sides are deep read-only copies of JSON-like values, whose comparison cannot fail; a
/// failure would count as no match.
pub(crate) fn holds(wanted: &WantedItems<'_>, metadata: Option<&PyValue>) -> bool {
    let Some((first_key, _)) = wanted.first() else {
        return true;
    };
    let py = first_key.py();
    let Some(metadata) = metadata.map(|metadata| metadata.get(py).into_bound(py)) else {
        return false;
    };
    wanted.iter().all(|(key, value)| {
        metadata
            .get_item(key)
            .is_ok_and(|present| present.eq(value).unwrap_or(false))
    })
}
