//! `AwaitableSession` and `AwaitableTaskHandle`: an in-memory session and its runners' handles seen through the
//! asyncio API, so that code written against `AsyncSessionProtocol` runs on either store. Their methods are every
//! session's and handle's (`session_methods!`, `handle_methods!`) over the same in-memory calls, whose answers
//! here are awaitables already done: memory never waits.

use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::events::EventSubscription;
use crate::handle::handle_repr;
use crate::handle_methods::handle_methods;
use crate::memory_calls::{HandleCalls, SessionCalls};
use crate::python_types::PyValue;
use crate::session::Session;
use crate::session_methods::session_methods;

/// `AwaitableSession(session)`: the in-memory `session` with every call awaited, as an `AsyncRedisSession`'s
/// are. The calls complete at once.
#[pyclass(subclass, frozen, module = "subagent_tracker._native")]
pub(crate) struct AwaitableSession {
    store: SessionCalls,
    /// The `Session` object seen through awaits, for its blocking calls.
    session: Py<PyAny>,
}

/// An in-memory runner's handle seen through awaits: `await handle.complete(result)`; `async with` ends the
/// task as the blocking handle's `with` does.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct AwaitableTaskHandle {
    calls: HandleCalls,
}

impl AwaitableTaskHandle {
    pub(crate) fn new(calls: HandleCalls) -> AwaitableTaskHandle {
        AwaitableTaskHandle { calls }
    }

    pub(crate) fn core(&self) -> &subagent_tracker::SubagentTaskHandle<PyValue> {
        &self.calls.handle
    }

    /// The handle as a batch of ends names it.
    fn batch_handle(handle: &Bound<'_, AwaitableTaskHandle>) -> Py<PyAny> {
        handle.clone().into_any().unbind()
    }
}

session_methods! {
    AwaitableSession, AwaitableTaskHandle, "an AwaitableTaskHandle", {
        #[new]
        fn new(session: &Bound<'_, PyAny>) -> PyResult<AwaitableSession> {
            let native = session.cast::<Session>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "AwaitableSession wraps a subagent_tracker.Session, got {}",
                    crate::arguments::type_name(session)
                ))
            })?;
            Ok(AwaitableSession {
                store: SessionCalls {
                    tracker: native.get().tracker().clone(),
                    awaited: true,
                },
                session: session.clone().unbind(),
            })
        }

        /// The in-memory session, for its blocking calls.
        #[getter]
        fn session(&self, py: Python<'_>) -> Py<PyAny> {
            self.session.clone_ref(py)
        }

        /// The same session with calls that do not await (they never waited).
        fn _blocking(&self, py: Python<'_>) -> Py<PyAny> {
            self.session.clone_ref(py)
        }

        /// Subscribes to the session's lifecycle events from this call on: what the package's `events()` reads.
        fn _subscribe(&self) -> EventSubscription {
            EventSubscription::new(self.store.tracker.subscribe())
        }

        fn __hash__(&self) -> usize {
            self.store.tracker.session_key()
        }

        fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
            visit.call(&self.session)
        }

        fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
            Ok(format!("AwaitableSession({})", self.session.bind(py).repr()?))
        }
    }
}

handle_methods! {
    AwaitableTaskHandle, {
        fn __repr__(&self) -> String {
            handle_repr("AwaitableTaskHandle", self.core())
        }
    }
}
