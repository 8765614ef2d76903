//! The pure-Python half of the package, as the binding uses it: handed over once by the package when it is
//! imported (`_bind_python_half`, in `subagent_tracker/__init__.py`, before any session exists), so that the
//! binding imports no module of the package and every call goes one way: from the package into the binding,
//! never back.
//!
//! The package's half is what is best written in Python: its exception classes, the `SubagentStatus` enum and
//! `ProgressEntry` that snapshots hold, the async checkpoints, and the session classes that add spawning and the
//! event stream to the native ones (`session_classes`).

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use subagent_tracker::SubagentStatus;

/// What the package hands over.
pub(crate) struct PythonHalf {
    /// `subagent_tracker._errors`, whose classes the binding raises by name.
    errors: Py<PyModule>,
    /// The members of `SubagentStatus`, in the order of `SubagentStatus::ALL`.
    status_members: Vec<Py<PyAny>>,
    progress_entry: Py<PyAny>,
    pub(crate) guarded_stream: Py<PyAny>,
    pub(crate) run_until_cancelled: Py<PyAny>,
    pub(crate) run_cancel_handler: Py<PyAny>,
    /// The package's subclasses of `Session`, `RedisSession` and `AsyncRedisSession` that sessions are handed
    /// out as.
    pub(crate) session: Py<PyType>,
    pub(crate) redis_session: Py<PyType>,
    pub(crate) async_redis_session: Py<PyType>,
}

static PYTHON_HALF: PyOnceLock<PythonHalf> = PyOnceLock::new();

/// Takes the package's half; the package calls it once, when it is imported (a later call, from a reload,
/// changes nothing).
#[pyfunction(pass_module)]
#[pyo3(signature = (*, errors, status, progress_entry, guarded_stream, run_until_cancelled, run_cancel_handler, session, redis_session, async_redis_session))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _bind_python_half(
    native: &Bound<'_, PyModule>,
    errors: Bound<'_, PyModule>,
    status: Bound<'_, PyAny>,
    progress_entry: Py<PyAny>,
    guarded_stream: Py<PyAny>,
    run_until_cancelled: Py<PyAny>,
    run_cancel_handler: Py<PyAny>,
    session: Bound<'_, PyType>,
    redis_session: Bound<'_, PyType>,
    async_redis_session: Bound<'_, PyType>,
) -> PyResult<()> {
    let py = errors.py();
    // The native classes by name, from the module itself: this file stays below the classes it hands out.
    for (class, native_name) in [
        (&session, "Session"),
        (&redis_session, "RedisSession"),
        (&async_redis_session, "AsyncRedisSession"),
    ] {
        if !class.is_subclass(&native.getattr(native_name)?)? {
            return Err(PyTypeError::new_err(format!(
                "{} must be a subclass of {native_name}",
                class.name()?
            )));
        }
    }
    let status_members = SubagentStatus::ALL
        .iter()
        .map(|member| Ok(status.call1((member.as_str(),))?.unbind()))
        .collect::<PyResult<_>>()?;
    let _first = PYTHON_HALF.set(
        py,
        PythonHalf {
            errors: errors.unbind(),
            status_members,
            progress_entry,
            guarded_stream,
            run_until_cancelled,
            run_cancel_handler,
            session: session.unbind(),
            redis_session: redis_session.unbind(),
            async_redis_session: async_redis_session.unbind(),
        },
    );
    Ok(())
}

/// The package's half.
pub(crate) fn python_half(py: Python<'_>) -> PyResult<&PythonHalf> {
    PYTHON_HALF.get(py).ok_or_else(|| {
        PyRuntimeError::new_err(
            "subagent_tracker._native works inside the subagent_tracker package: import it",
        )
    })
}

/// An exception class of `subagent_tracker._errors`.
pub(crate) fn error_class<'py>(
    py: Python<'py>,
    name: &'static str,
) -> PyResult<Bound<'py, PyType>> {
    Ok(python_half(py)?
        .errors
        .bind(py)
        .getattr(name)?
        .cast_into::<PyType>()?)
}

/// The member of the Python `SubagentStatus` enum for a core status.
pub(crate) fn status_member(py: Python<'_>, status: SubagentStatus) -> PyResult<Py<PyAny>> {
    let index = SubagentStatus::ALL
        .iter()
        .position(|member| *member == status)
        .unwrap_or_default();
    Ok(python_half(py)?.status_members[index].clone_ref(py))
}

/// `subagent_tracker.ProgressEntry`, the entries of a snapshot's progress log.
pub(crate) fn progress_entry_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    Ok(python_half(py)?.progress_entry.bind(py))
}
