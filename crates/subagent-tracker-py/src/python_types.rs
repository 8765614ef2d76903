//! Python objects the binding needs from the pure-Python half of the package, imported once.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use subagent_tracker::SubagentStatus;

/// A Python object held by the core as task metadata or result.
pub(crate) type PyValue = Arc<Py<PyAny>>;

/// The members of the Python `SubagentStatus` enum, in the core's declaration order.
pub(crate) fn status_member(py: Python<'_>, status: SubagentStatus) -> PyResult<Py<PyAny>> {
    static MEMBERS: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();
    let members = MEMBERS.get_or_try_init(py, || -> PyResult<_> {
        let enum_type = py
            .import("subagent_tracker._status")?
            .getattr("SubagentStatus")?;
        SubagentStatus::ALL
            .iter()
            .map(|status| Ok(enum_type.call1((status.as_str(),))?.unbind()))
            .collect()
    })?;
    Ok(members[status as usize].clone_ref(py))
}

/// Seconds since the Unix epoch, as Python's `time.time()` gives them.
pub(crate) fn epoch_seconds(time: SystemTime) -> f64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

/// `text` as Python's `repr` would show a `str | None`, for `__repr__` methods.
pub(crate) fn python_repr(text: Option<&str>) -> String {
    match text {
        None => "None".to_owned(),
        Some(text) => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
    }
}
