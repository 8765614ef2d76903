//! Sessions built as the package's classes. The package subclasses the native session classes to add what is
//! best written in Python (a spawned subagent's asyncio task, the event stream's async iteration) and hands its
//! subclasses over (`python_half`); every session a registry makes is built as one of them, around the state
//! that only the binding passes.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use subagent_tracker::InMemorySubagentTaskTracker;

use crate::python_half::{python_half, PythonHalf};
use crate::python_types::PyValue;
use crate::redis_calls::SessionCalls as RedisCalls;

/// What a session is built around: a native session class's constructor takes it as `_state`, which only the
/// binding passes.
#[pyclass(frozen, module = "subagent_tracker._native", name = "_SessionState")]
pub(crate) struct SessionState(pub(crate) SessionOfStore);

/// A session of one store.
pub(crate) enum SessionOfStore {
    /// An in-memory session, and the registry object that listed it, if one did.
    Memory(InMemorySubagentTaskTracker<PyValue>, Option<Py<PyAny>>),
    Redis(RedisCalls),
}

/// The session `state`, as the package's class that `class` picks.
pub(crate) fn session_object(
    py: Python<'_>,
    class: fn(&PythonHalf) -> &Py<PyType>,
    state: SessionOfStore,
) -> PyResult<Py<PyAny>> {
    let classes = python_half(py)?;
    let keywords = PyDict::new(py);
    keywords.set_item("_state", SessionState(state))?;
    Ok(class(classes).bind(py).call((), Some(&keywords))?.unbind())
}

/// The Redis session that `state` holds, for the constructor of a Redis session class.
pub(crate) fn redis_calls(state: &SessionState) -> PyResult<RedisCalls> {
    match &state.0 {
        SessionOfStore::Redis(calls) => Ok(calls.clone()),
        SessionOfStore::Memory(..) => Err(PyTypeError::new_err(
            "a Redis session is built around a Redis session",
        )),
    }
}
