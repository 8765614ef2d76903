//! Translation of core errors into the package's Python exception classes.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use pyo3::PyErrArguments;
use subagent_tracker::TrackerError;

use crate::python_half::error_class;

/// `_quoted(text)`: `text` as the core's messages quote an id (`{:?}`: in double quotes, with quotes,
/// backslashes and every character that does not print escaped), so that the Python layer's messages quote ids
/// by the same rule and a direction override in an id can neither hide in a message nor reorder it.
#[pyfunction]
pub(crate) fn _quoted(text: &str) -> String {
    format!("{text:?}")
}

/// The message of the `RuntimeError` raised by a second concurrent `__anext__` on one event stream, in memory
/// and on Redis.
pub(crate) const EVENT_STREAM_BUSY: &str =
    "this event stream is already being iterated by another coroutine; \
     call session.events() once per consumer";

/// The Python exception for a core error, with the core's message.
pub(crate) fn tracker_error(py: Python<'_>, error: TrackerError) -> PyErr {
    let class_name = match &error {
        TrackerError::DuplicateTask { .. } | TrackerError::NotClaimable { .. } => {
            "DuplicateTaskError"
        }
        TrackerError::UnknownTask { .. }
        | TrackerError::NotReserved { .. }
        | TrackerError::ParentFinished { .. } => "UnknownTaskError",
        TrackerError::SessionClosed { .. } => "SessionClosedError",
        _ => return PyValueError::new_err(error.to_string()),
    };
    package_error(py, class_name, error.to_string())
}

/// The Python exception for an error of the Redis store.
pub(crate) fn redis_error(
    py: Python<'_>,
    error: subagent_tracker_redis::RedisTrackerError,
) -> PyErr {
    use subagent_tracker_redis::RedisTrackerError;
    let class_name = match error {
        RedisTrackerError::Tracker(error) => return tracker_error(py, error),
        RedisTrackerError::Unavailable { .. } => "RegistryUnavailableError",
        RedisTrackerError::InvalidOption(_) => return PyValueError::new_err(error.to_string()),
        RedisTrackerError::NotReplicated { .. } => "ReplicationTimeoutError",
        RedisTrackerError::SessionLost { .. } => "SessionLostError",
        _ => "RegistryProtocolError",
    };
    package_error(py, class_name, error.to_string())
}

/// `TaskCancelledError(task_id, reason)`.
pub(crate) fn task_cancelled_error(py: Python<'_>, task_id: &str, reason: &str) -> PyErr {
    package_error(
        py,
        "TaskCancelledError",
        (task_id.to_owned(), reason.to_owned()),
    )
}

/// The package's exception `class_name` with `arguments`, or the error of finding the class (the package's
/// Python half not yet handed over).
fn package_error(
    py: Python<'_>,
    class_name: &'static str,
    arguments: impl PyErrArguments + 'static,
) -> PyErr {
    match error_class(py, class_name) {
        Ok(class) => PyErr::from_type(class, arguments),
        Err(error) => error,
    }
}

/// True when `error` is a `TaskCancelledError` or an `asyncio.CancelledError`.
pub(crate) fn is_cancellation(py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<bool> {
    static CANCELLED_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let asyncio_cancelled = CANCELLED_ERROR.import(py, "asyncio", "CancelledError")?;
    Ok(error.is_instance(asyncio_cancelled)?
        || error.is_instance(error_class(py, "TaskCancelledError")?.as_any())?)
}
