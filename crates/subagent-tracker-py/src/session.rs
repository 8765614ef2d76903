//! `Session`: one scope of subagent tasks, backed by the core's in-memory tracker. Its methods are every
//! session's (`session_methods!`); this file holds what only an in-memory session has.

use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::PyTraverseError;
use subagent_tracker::InMemorySubagentTaskTracker;

use crate::arguments::{Id, SessionIdArgument};
use crate::events::EventSubscription;
use crate::handle::SubagentTaskHandle;
use crate::keyword_options::session_config;
use crate::memory_calls::SessionCalls;
use crate::python_types::{metadata_merge, python_repr, PyValue, ValueVisit};
use crate::session_classes::{SessionOfStore, SessionState};
use crate::session_methods::session_methods;

/// A scope that owns subagent tasks. The Python `subagent_tracker.Session` adds what is best written in Python
/// (`session_classes`).
///
/// It owns the Python references its tasks hold (metadata and results), unless a registry lists it: it shows
/// them to the garbage collector, and clears them when the collector finds it unreachable in a cycle. Handles
/// keep it alive, so nothing reachable ever sees them cleared.
// `weakref`: a registry hands out one object per session while it lives (`Registry::session_object`).
#[pyclass(subclass, frozen, weakref, module = "subagent_tracker._native")]
pub(crate) struct Session {
    store: SessionCalls,
    /// The registry object that handed this session out, kept alive while the session object is: the registry
    /// shows the values of the sessions it lists, and the collector must see that this object reaches them.
    registry: Mutex<Option<Py<PyAny>>>,
}

impl Session {
    /// The core's tracker of this session.
    pub(crate) fn tracker(&self) -> &InMemorySubagentTaskTracker<PyValue> {
        &self.store.tracker
    }
}

session_methods! {
    Session, SubagentTaskHandle, "a SubagentTaskHandle", {
        /// `options` are `SessionOptions`; `_state` is what `Registry.session` builds the session around.
        #[new]
        #[pyo3(signature = (session_id=None, *, _state=None, **options))]
        // What `help(Session)` shows: the core's defaults, and not `_state`, which only `Registry.session` passes
        // (a test holds these names to `SESSION_OPTIONS`).
        #[pyo3(
            text_signature = "(session_id=None, *, max_finished_tasks=10_000, event_buffer=4096, max_finished_age=None, early_cancel_ttl=60, progress_log_size=16)"
        )]
        fn new(
            py: Python<'_>,
            session_id: Option<Id<SessionIdArgument>>,
            _state: Option<PyRef<'_, SessionState>>,
            options: Option<&Bound<'_, PyDict>>,
        ) -> PyResult<Session> {
            let (tracker, registry) = match _state.as_deref() {
                Some(SessionState(SessionOfStore::Memory(tracker, registry))) => (
                    tracker.clone(),
                    registry.as_ref().map(|registry| registry.clone_ref(py)),
                ),
                Some(_) => return Err(PyTypeError::new_err("a Session is built around an in-memory session")),
                None => {
                    let config = session_config(options, "Session")?;
                    let tracker = InMemorySubagentTaskTracker::with_config(
                        session_id.as_ref().map(|id| &*id.0),
                        config,
                    );
                    tracker.set_metadata_merge(metadata_merge());
                    (tracker, None)
                }
            };
            Ok(Session {
                store: SessionCalls {
                    tracker,
                    awaited: false,
                },
                registry: Mutex::new(registry),
            })
        }

        /// True once `close()` has been called.
        #[getter]
        fn closed(&self) -> bool {
            self.store.tracker.is_closed()
        }

        /// Subscribes to lifecycle events from this call on.
        fn _subscribe(&self) -> EventSubscription {
            EventSubscription::new(self.store.tracker.subscribe())
        }

        /// The values of a session that a registry lists are the registry's to show (`Registry.__traverse__`),
        /// and this object shows the registry; each value is one reference, shown by one owner.
        fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
            // Never waits: `__clear__` holds the lock only to take the reference out.
            if let Some(registry) = self.registry.try_lock() {
                visit.call(registry.as_ref())?;
            }
            let tracker = &self.store.tracker;
            let mut values = ValueVisit::new(&visit);
            if !tracker.is_listed() {
                tracker.visit_values(|value| values.value(value));
            }
            values.outcome()
        }

        /// Only the values this object shows are its to clear: an object of a registry's session that the
        /// collector finds in a cycle leaves the registry's session whole.
        fn __clear__(&self) {
            let registry = self.registry.lock().take();
            drop(registry);
            let tracker = &self.store.tracker;
            if tracker.is_listed() {
                return;
            }
            // Taken under the tasks' locks, dropped after: dropping a value may run Python code.
            let mut taken = Vec::new();
            tracker.visit_values(|value| taken.extend(value.take()));
            drop(taken);
        }

        fn __hash__(&self) -> usize {
            self.store.tracker.session_key()
        }

        fn __repr__(&self) -> String {
            let tracker = &self.store.tracker;
            format!(
                "Session(session_id={}, retained={}, closed={})",
                python_repr(Some(tracker.session_id())),
                tracker.retained_count(),
                if tracker.is_closed() { "True" } else { "False" }
            )
        }
    }
}
