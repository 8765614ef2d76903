//! Every object the binding takes from the pure-Python half of the package, imported once, in one place.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use subagent_tracker::SubagentStatus;

fn module<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyModule>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyModule>> {
    Ok(cell
        .get_or_try_init(py, || py.import(name).map(Bound::unbind))?
        .bind(py))
}

/// `subagent_tracker._checkpoints`, which holds the async checkpoints (async code is best written in Python).
pub(crate) fn checkpoints(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    module(py, &MODULE, "subagent_tracker._checkpoints")
}

/// An exception class of `subagent_tracker._errors`.
pub(crate) fn error_class<'py>(
    py: Python<'py>,
    name: &'static str,
) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(module(py, &MODULE, "subagent_tracker._errors")?
        .getattr(name)?
        .cast_into::<PyType>()?)
}

/// The member of the Python `SubagentStatus` enum for a core status.
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
    let index = SubagentStatus::ALL
        .iter()
        .position(|member| *member == status)
        .unwrap_or_default();
    Ok(members[index].clone_ref(py))
}

/// `subagent_tracker.ProgressEntry`, the entries of a snapshot's progress log.
pub(crate) fn progress_entry_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(CLASS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("subagent_tracker._progress")?
                    .getattr("ProgressEntry")?
                    .unbind(),
            )
        })?
        .bind(py))
}

/// `json.dumps` or `json.loads`: metadata and results cross processes as JSON.
pub(crate) fn json_function<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    module(py, &MODULE, "json")?.getattr(name)
}
