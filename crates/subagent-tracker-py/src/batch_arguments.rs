//! The tasks of a batch (`start_subagent_tasks`, `reserve_subagent_tasks`): an iterable of mappings, each of the
//! keyword arguments that `start_subagent_task` (or `reserve_subagent_task`) takes.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMapping, PyString};
use subagent_tracker::TaskStart;

use crate::arguments;
use crate::start_arguments::{StartArguments, StoredMetadata, CLAIM_TIMEOUT, START_OPTIONS};

/// Every task of the batch `tasks`, described for the core, each with its own claim timeout if it has one
/// (`reserving` allows them). An error names the task at fault by its index.
pub(crate) fn batch_starts<V: StoredMetadata>(
    tasks: &Bound<'_, PyAny>,
    reserving: bool,
) -> PyResult<Vec<(TaskStart<V>, Option<Duration>)>> {
    batch_tasks(tasks, reserving)?
        .into_iter()
        .enumerate()
        .map(|(index, task)| {
            task.into_start()
                .map_err(|error| in_batch_item(tasks.py(), error, "task", index, ""))
        })
        .collect()
}

/// The tasks of `tasks`, in order; `reserving` also allows each a `claim_timeout`. Raises `TypeError` or
/// `ValueError` naming the task (by its index) and the key at fault.
fn batch_tasks<'py>(
    tasks: &Bound<'py, PyAny>,
    reserving: bool,
) -> PyResult<Vec<StartArguments<'py>>> {
    let expected = || {
        let call = if reserving {
            "reserve_subagent_task"
        } else {
            "start_subagent_task"
        };
        format!("tasks must be an iterable of mappings, each of the keyword arguments of {call}")
    };
    let mut batch = Vec::new();
    for (index, item) in batch_items(tasks, &expected())?.enumerate() {
        let task = item
            .and_then(|item| batch_task(&item, reserving))
            .map_err(|error| in_batch_item(tasks.py(), error, "task", index, &expected()))?;
        batch.push(task);
    }
    Ok(batch)
}

/// The items of a batch: `batch` must be an iterable (not a string, bytes or a mapping), or a `TypeError`
/// says what was `expected`.
pub(crate) fn batch_items<'py>(
    batch: &Bound<'py, PyAny>,
    expected: &str,
) -> PyResult<Bound<'py, pyo3::types::PyIterator>> {
    let refused = || {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{expected}, got {}",
            arguments::type_name(batch)
        ))
    };
    if batch.is_instance_of::<PyString>()
        || batch.is_instance_of::<PyBytes>()
        || batch.cast::<PyMapping>().is_ok()
    {
        return Err(refused());
    }
    batch.try_iter().map_err(|_| refused())
}

/// An item of a batch as a mapping whose keys are all `allowed`: a getter of its values, `None` for a key it
/// lacks or maps to `None`.
pub(crate) fn batch_mapping<'a, 'py>(
    item: &'a Bound<'py, PyAny>,
    allowed: impl Fn(&str) -> bool,
) -> PyResult<impl Fn(&str) -> PyResult<Option<Bound<'py, PyAny>>> + 'a> {
    let mapping = arguments::as_mapping(item)?;
    for key in mapping.keys()? {
        if !key.extract::<&str>().ok().is_some_and(&allowed) {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "has the unknown key {}",
                key.repr()?
            )));
        }
    }
    Ok(move |key: &str| arguments::mapping_value(mapping, key))
}

fn batch_task<'py>(item: &Bound<'py, PyAny>, reserving: bool) -> PyResult<StartArguments<'py>> {
    let value = batch_mapping(item, |key| {
        key == "task_id" || START_OPTIONS.contains(&key) || (reserving && key == CLAIM_TIMEOUT)
    })?;
    let task_id = value("task_id")?.map(|value| value.extract()).transpose()?;
    StartArguments::read(task_id, value, false)
}

/// A `TypeError` or `ValueError` about an item of a batch (a `task`, an `end`), its message saying which (by its
/// index), with the original as its cause; any other error as it was.
pub(crate) fn in_batch_item(
    py: Python<'_>,
    error: PyErr,
    item: &str,
    index: usize,
    expected: &str,
) -> PyErr {
    let is_type_error = error.is_instance_of::<pyo3::exceptions::PyTypeError>(py);
    if !is_type_error && !error.is_instance_of::<pyo3::exceptions::PyValueError>(py) {
        return error;
    }
    let mut message = format!("{item} {index} of the batch {}", error.value(py));
    if is_type_error && message.contains("not a mapping") {
        message = format!("{message}: {expected}");
    }
    let wrapped = if is_type_error {
        pyo3::exceptions::PyTypeError::new_err(message)
    } else {
        pyo3::exceptions::PyValueError::new_err(message)
    };
    wrapped.set_cause(py, Some(error));
    wrapped
}
