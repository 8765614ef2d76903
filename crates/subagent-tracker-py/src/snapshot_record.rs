//! Export (contract §6, export and restore): snapshots as records of JSON's types, which `restore_snapshots`
//! takes back, in this process or another, on either store. Written once, for every session.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyList, PyMapping, PyTuple};

/// The fields of a snapshot that a record keeps, in the snapshot's own order.
const FIELDS: [&str; 27] = [
    "task_id",
    "parent_id",
    "agent",
    "description",
    "metadata",
    "status",
    "finished",
    "started_at",
    "queued_at",
    "claimed_at",
    "cancelled_at",
    "ended_at",
    "cancel_reason",
    "cancel_origin",
    "cancel_cause",
    "pause_reason",
    "deadline",
    "detached",
    "escalated",
    "progress",
    "progress_count",
    "progress_log",
    "result",
    "error",
    "error_type",
    "error_code",
    "worker",
];

/// The record of each snapshot of `tasks` (a list of `SubagentTask`), in order.
pub(crate) fn records<'py>(tasks: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let records = PyList::empty(tasks.py());
    for task in tasks.try_iter()? {
        records.append(record(&task?)?)?;
    }
    Ok(records)
}

/// One snapshot as a record: its fields, the status as its name, every value of JSON's types (as far as the
/// task's own metadata and result are).
fn record<'py>(task: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = task.py();
    let record = PyDict::new(py);
    for name in FIELDS {
        record.set_item(name, task.getattr(name)?)?;
    }
    let status = task.getattr(intern!(py, "status"))?;
    record.set_item("status", status.getattr(intern!(py, "value"))?)?;
    let log = PyList::empty(py);
    for entry in task.getattr(intern!(py, "progress_log"))?.try_iter()? {
        let entry = entry?;
        let item = PyDict::new(py);
        for name in ["at", "message", "data"] {
            item.set_item(name, entry.getattr(name)?)?;
        }
        log.append(item)?;
    }
    record.set_item("progress_log", log)?;
    thawed(record.into_any())
}

/// `value` with the read-only containers a session keeps made plain again (mappings to dicts, tuples and
/// frozensets to lists), so that `json.dumps` takes it. Walks with a work list, never recursing: a value's
/// depth is the user's.
fn thawed(value: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    let py = value.py();
    let root = PyList::new(py, [py.None()])?.into_any();
    let mut pending = vec![(root.clone(), 0_usize.into_pyobject(py)?.into_any(), value)];
    while let Some((container, slot, item)) = pending.pop() {
        let plain = if let Ok(mapping) = item.cast::<PyMapping>() {
            let dict = PyDict::new(py);
            for pair in mapping.items()?.iter() {
                let (key, inner) = pair.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
                // Inserted now, so that the keys keep their order.
                dict.set_item(&key, py.None())?;
                pending.push((dict.clone().into_any(), key, inner));
            }
            dict.into_any()
        } else if item.is_instance_of::<PyTuple>()
            || item.is_instance_of::<PyList>()
            || item.is_instance_of::<PyFrozenSet>()
        {
            let items = item.try_iter()?.collect::<PyResult<Vec<_>>>()?;
            let list = PyList::new(py, items.iter().map(|_| py.None()))?.into_any();
            for (index, inner) in items.into_iter().enumerate() {
                pending.push((list.clone(), index.into_pyobject(py)?.into_any(), inner));
            }
            list
        } else {
            item
        };
        container.set_item(slot, plain)?;
    }
    root.get_item(0)
}
