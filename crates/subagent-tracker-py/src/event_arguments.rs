//! `record_event(event)`: a runtime's event, a mapping with `kind` and `task_id`, as the core takes it
//! (contract §5, event-sourced ingestion). Keys the kind does not use are ignored: runtimes' events carry more.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyMapping, PyString};
use subagent_tracker::{RecordedEvent, TaskFailure};

use crate::arguments::{self, Id, TaskIdArgument};
use crate::python_types::PyValue;
use crate::start_arguments::{StartArguments, StoredMetadata};

/// The error of an `ended` event that says it failed and gives no error.
const FAILED_WITHOUT_ERROR: &str = "the task failed (its event gave no error)";

/// How a store keeps a result and progress data: as given in memory (data read-only), as JSON text in Redis.
pub(crate) trait StoredValue: StoredMetadata {
    fn result(value: &Bound<'_, PyAny>) -> PyResult<Self>;
    fn data(value: &Bound<'_, PyAny>) -> PyResult<Self>;
    /// The value a paused task is resumed with.
    fn resume_value(value: &Bound<'_, PyAny>) -> PyResult<Self>;
}

impl StoredValue for PyValue {
    fn result(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyValue::new(value.clone().unbind()))
    }

    fn data(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyValue::new(arguments::frozen_copy(value, "data")?))
    }

    fn resume_value(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyValue::new(value.clone().unbind()))
    }
}

impl StoredValue for String {
    fn result(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        arguments::json_text(value, "result")
    }

    fn data(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        arguments::json_text(value, "data")
    }

    fn resume_value(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        arguments::json_text(value, "value")
    }
}

/// The event for the core, or `None` for a kind the session ignores. `TypeError` or `ValueError` for an event
/// that is not a mapping, or whose `kind`, `task_id` or other values are not what its kind takes.
pub(crate) fn recorded_event<V: StoredValue>(
    event: &Bound<'_, PyAny>,
) -> PyResult<Option<RecordedEvent<V>>> {
    let mapping = event.cast::<PyMapping>().map_err(|_| {
        PyTypeError::new_err(format!(
            "event must be a mapping with 'kind' and 'task_id', got {}",
            arguments::type_name(event)
        ))
    })?;
    let value = |key: &str| arguments::mapping_value(mapping, key);
    let kind = value("kind")?.ok_or_else(|| PyTypeError::new_err("event must have a 'kind'"))?;
    let kind = kind.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "event 'kind' must be a str, got {}",
            arguments::type_name(&kind)
        ))
    })?;
    let kind = arguments::text(kind, "event 'kind'")?;
    if !matches!(kind, "started" | "progress" | "ended") {
        return Ok(None);
    }
    let task_id: Id<TaskIdArgument> = value("task_id")?
        .ok_or_else(|| PyTypeError::new_err("event must have a 'task_id'"))?
        .extract()?;
    Ok(Some(match kind {
        "started" => {
            let start = StartArguments {
                task_id: Some(task_id),
                parent_id: value("parent_id")?
                    .map(|value| value.extract())
                    .transpose()?,
                agent: value("agent")?,
                description: value("description")?,
                metadata: value("metadata")?,
                ..StartArguments::default()
            };
            let (start, _) = start.into_start()?;
            RecordedEvent::Started(start)
        }
        "progress" => {
            let message = value("message")?;
            let message =
                arguments::optional_string(message.as_ref(), "message")?.unwrap_or_default();
            RecordedEvent::Progress {
                task_id: task_id.0,
                message: Arc::from(message),
                data: value("data")?.map(|data| V::data(&data)).transpose()?,
            }
        }
        _ => {
            let success = value("success")?
                .map(|success| success.extract::<bool>())
                .transpose()?
                .unwrap_or(true);
            let outcome = if success {
                Ok(value("result")?
                    .map(|result| V::result(&result))
                    .transpose()?)
            } else {
                Err(match value("error")? {
                    Some(error) => arguments::failure(
                        &error,
                        value("error_type")?.as_ref(),
                        value("error_code")?.as_ref(),
                    )?,
                    None => TaskFailure::new(FAILED_WITHOUT_ERROR),
                })
            };
            RecordedEvent::Ended {
                task_id: task_id.0,
                outcome,
            }
        }
    }))
}
