//! The Python classes that sessions are handed out as.
//!
//! The package subclasses the native session classes to add what is best written in Python (a spawned
//! subagent's asyncio task, the event stream's async iteration), and hands its subclasses over once, when it is
//! imported (`_hand_out_sessions_as`). Every session a registry makes is built as one of them: a call goes from
//! Python into the binding and stays there, and the binding imports no module of the package to make a session.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use subagent_tracker::InMemorySubagentTaskTracker;

use crate::async_redis::AsyncRedisSession;
use crate::python_types::PyValue;
use crate::redis_calls::SessionCalls as RedisCalls;
use crate::redis_registry::RedisSession;
use crate::session::Session;

/// What a session is built around: a native session class's constructor takes it as `_state`, which only the
/// binding passes.
#[pyclass(frozen, module = "subagent_tracker._native", name = "_SessionState")]
pub(crate) struct SessionState(pub(crate) SessionOfStore);

/// A session of one store.
pub(crate) enum SessionOfStore {
    Memory(InMemorySubagentTaskTracker<PyValue>),
    Redis(RedisCalls),
}

/// The package's subclass of each native session class that registries hand out.
pub(crate) struct HandedOut {
    pub(crate) memory: Py<PyType>,
    pub(crate) redis: Py<PyType>,
    pub(crate) async_redis: Py<PyType>,
}

static HANDED_OUT: PyOnceLock<HandedOut> = PyOnceLock::new();

/// Hands sessions out as these subclasses of `Session`, `RedisSession` and `AsyncRedisSession` from now on; the
/// package calls it once, when it is imported (a second call, from a reload, changes nothing).
#[pyfunction]
pub(crate) fn _hand_out_sessions_as(
    memory: Bound<'_, PyType>,
    redis: Bound<'_, PyType>,
    async_redis: Bound<'_, PyType>,
) -> PyResult<()> {
    let py = memory.py();
    for (class, native) in [
        (&memory, py.get_type::<Session>()),
        (&redis, py.get_type::<RedisSession>()),
        (&async_redis, py.get_type::<AsyncRedisSession>()),
    ] {
        if !class.is_subclass(&native)? {
            return Err(PyTypeError::new_err(format!(
                "{} must be a subclass of {}",
                class.name()?,
                native.name()?
            )));
        }
    }
    let _first = HANDED_OUT.set(
        py,
        HandedOut {
            memory: memory.unbind(),
            redis: redis.unbind(),
            async_redis: async_redis.unbind(),
        },
    );
    Ok(())
}

/// The session `state`, as the package's class that `class` picks.
pub(crate) fn session_object(
    py: Python<'_>,
    class: fn(&HandedOut) -> &Py<PyType>,
    state: SessionOfStore,
) -> PyResult<Py<PyAny>> {
    let classes = HANDED_OUT.get(py).ok_or_else(|| {
        PyRuntimeError::new_err(
            "subagent_tracker._native is used through the subagent_tracker package: import it",
        )
    })?;
    let keywords = PyDict::new(py);
    keywords.set_item("_state", SessionState(state))?;
    Ok(class(classes).bind(py).call((), Some(&keywords))?.unbind())
}

/// The Redis session that `state` holds, for the constructor of a Redis session class.
pub(crate) fn redis_calls(state: &SessionState) -> PyResult<RedisCalls> {
    match &state.0 {
        SessionOfStore::Redis(calls) => Ok(calls.clone()),
        SessionOfStore::Memory(_) => Err(PyTypeError::new_err(
            "a Redis session is built around a Redis session",
        )),
    }
}
