//! `restore_snapshots(snapshots)`: the records `export_snapshots()` made (mappings of a snapshot's fields, JSON's
//! types), as the core's snapshots (contract §6, export and restore). Keys a record does not need are ignored.

use std::sync::Arc;
use std::time::SystemTime;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMapping, PyString};
use subagent_tracker::{
    system_time_from_epoch_seconds, CancelCause, ProgressEntry, SubagentStatus,
    SubagentTaskSnapshot,
};

use crate::arguments::{self, Id, TaskIdArgument};
use crate::event_arguments::StoredValue;

/// Every record of `snapshots`, in order. `TypeError` or `ValueError` naming the record (by its index) and the
/// key at fault, before anything is restored.
pub(crate) fn restored_snapshots<V: StoredValue>(
    snapshots: &Bound<'_, PyAny>,
    session_id: &Arc<str>,
) -> PyResult<Vec<SubagentTaskSnapshot<V>>> {
    if snapshots.is_instance_of::<PyString>()
        || snapshots.is_instance_of::<PyBytes>()
        || snapshots.cast::<PyMapping>().is_ok()
    {
        return Err(PyTypeError::new_err(format!(
            "snapshots must be an iterable of the mappings export_snapshots() makes, got {}",
            arguments::type_name(snapshots)
        )));
    }
    let mut restored = Vec::new();
    for (index, record) in snapshots.try_iter()?.enumerate() {
        let snapshot = snapshot_of(&record?, session_id).map_err(|error| {
            let py = snapshots.py();
            let message = format!("snapshot {index}: {}", error.value(py));
            if error.is_instance_of::<PyValueError>(py) {
                PyValueError::new_err(message)
            } else {
                PyTypeError::new_err(message)
            }
        })?;
        restored.push(snapshot);
    }
    Ok(restored)
}

fn snapshot_of<V: StoredValue>(
    record: &Bound<'_, PyAny>,
    session_id: &Arc<str>,
) -> PyResult<SubagentTaskSnapshot<V>> {
    let mapping = arguments::as_mapping(record)?;
    let value = |key: &str| arguments::mapping_value(mapping, key);
    let text = |key: &'static str| -> PyResult<Option<Arc<str>>> {
        Ok(arguments::optional_string(value(key)?.as_ref(), key)?.map(Arc::from))
    };
    let time = |key: &'static str| -> PyResult<Option<SystemTime>> {
        value(key)?
            .map(|seconds| epoch_time(&seconds, key))
            .transpose()
    };
    let flag = |key: &'static str| -> PyResult<bool> {
        Ok(value(key)?
            .map(|flag| flag.extract::<bool>())
            .transpose()?
            .unwrap_or(false))
    };
    let task_id: Id<TaskIdArgument> = value("task_id")?
        .ok_or_else(|| PyTypeError::new_err("has no 'task_id'"))?
        .extract()?;
    let status_name = text("status")?.ok_or_else(|| PyTypeError::new_err("has no 'status'"))?;
    let status = SubagentStatus::from_name(&status_name)
        .ok_or_else(|| PyValueError::new_err(format!("has the unknown status {status_name:?}")))?;
    let started_at =
        time("started_at")?.ok_or_else(|| PyTypeError::new_err("has no 'started_at'"))?;
    let mut snapshot = SubagentTaskSnapshot::new(task_id.0, session_id.clone(), status, started_at);
    snapshot.parent_id = text("parent_id")?;
    snapshot.agent = text("agent")?;
    snapshot.description = text("description")?;
    snapshot.metadata = value("metadata")?
        .map(|metadata| V::from_argument(&metadata))
        .transpose()?;
    snapshot.finished = flag("finished")?;
    snapshot.queued_at = time("queued_at")?;
    snapshot.claimed_at = time("claimed_at")?;
    snapshot.cancelled_at = time("cancelled_at")?;
    snapshot.ended_at = time("ended_at")?;
    snapshot.cancel_reason = text("cancel_reason")?;
    snapshot.cancel_origin = text("cancel_origin")?;
    snapshot.cancel_cause = match text("cancel_cause")? {
        Some(cause) => Some(CancelCause::from_name(&cause).ok_or_else(|| {
            PyValueError::new_err(format!("has the unknown cancel_cause {cause:?}"))
        })?),
        None => None,
    };
    snapshot.deadline = time("deadline")?;
    snapshot.detached = flag("detached")?;
    snapshot.escalated = flag("escalated")?;
    snapshot.progress = text("progress")?;
    snapshot.progress_count = value("progress_count")?
        .map(|count| count.extract::<u64>())
        .transpose()?
        .unwrap_or_default();
    if let Some(log) = value("progress_log")? {
        for entry in log.try_iter()? {
            snapshot.progress_log.push(progress_entry(&entry?)?);
        }
    }
    snapshot.result = value("result")?
        .map(|result| V::result(&result))
        .transpose()?;
    snapshot.error = text("error")?;
    snapshot.error_type = text("error_type")?;
    snapshot.error_code = text("error_code")?;
    snapshot.pause_reason = text("pause_reason")?;
    snapshot.worker = text("worker")?;
    Ok(snapshot)
}

/// One entry of a record's progress log: a mapping with `at`, `message` and `data`.
fn progress_entry<V: StoredValue>(entry: &Bound<'_, PyAny>) -> PyResult<ProgressEntry<V>> {
    let field = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        let item = entry.get_item(key).map_err(|_| {
            PyTypeError::new_err(
                "has a progress_log entry that is not a mapping with 'at' and 'message'",
            )
        })?;
        Ok((!item.is_none()).then_some(item))
    };
    let at = field("at")?
        .ok_or_else(|| PyTypeError::new_err("has a progress_log entry without 'at'"))?;
    let message = arguments::optional_string(field("message")?.as_ref(), "progress_log message")?;
    Ok(ProgressEntry {
        at: epoch_time(&at, "progress_log at")?,
        message: Arc::from(message.unwrap_or_default()),
        data: match entry.get_item("data") {
            Ok(data) if !data.is_none() => Some(V::data(&data)?),
            _ => None,
        },
    })
}

fn epoch_time(seconds: &Bound<'_, PyAny>, key: &str) -> PyResult<SystemTime> {
    let seconds = arguments::number(seconds, key, "seconds since the epoch")?;
    system_time_from_epoch_seconds(seconds)
        .map_err(|problem| PyValueError::new_err(format!("{key} {problem}")))
}
