//! The Python classes of a family of Redis classes, declared once: [`redis_classes!`] writes a registry, a session
//! and a runner's handle for one [`Delivery`], and the blocking family (`redis_registry`) and the asyncio family
//! (`async_redis`) each instantiate it with their class names and the few methods that differ between them. Every
//! method here only reads its arguments and hands them to `redis_calls`, which decides what the call does.

use std::hash::{Hash, Hasher};

use crate::python_types::python_repr;
use crate::redis_calls::{HandleCalls, SessionCalls};
use crate::session_store::{HandleStore, SessionStore};

/// Declares `$registry`, `$session` and `$handle`, the classes of one family, and `$delivery`, the
/// [`Delivery`](crate::redis_calls::Delivery) that makes its sessions and handles. `$handed_out` names the
/// package's subclass of `$session` that sessions are handed out as (`session_classes`); `$handle_description` is
/// how `end_subagent_tasks` names the handle it expects. Each `{ ... }` block adds the methods only that class of the family has (the registry's
/// constructor, `with`, `async with`).
macro_rules! redis_classes {
    (
        delivery: $delivery:ident = $waiting:expr;
        $(#[$registry_meta:meta])* registry $registry:ident { $($registry_methods:tt)* }
        $(#[$session_meta:meta])* session $session:ident {
            handed_out_as: $handed_out:ident, handle_description: $handle_description:literal;
            $($session_methods:tt)*
        }
        $(#[$handle_meta:meta])* handle $handle:ident $($with:ident)? { $($handle_methods:tt)* }
    ) => {
        /// How this family hands back the outcome of a call, and which of its classes wrap sessions and handles.
        pub(crate) const $delivery: $crate::redis_calls::Delivery = $crate::redis_calls::Delivery {
            waiting: $waiting,
            session_class: $session::into_object,
            handle_class: $handle::into_object,
        };

        $(#[$registry_meta])*
        #[pyclass(frozen, module = "subagent_tracker._native")]
        pub(crate) struct $registry {
            calls: $crate::redis_calls::RegistryCalls,
        }

        $(#[$session_meta])*
        #[pyclass(subclass, frozen, module = "subagent_tracker._native")]
        pub(crate) struct $session {
            store: $crate::redis_calls::SessionCalls,
        }

        impl $session {
            fn into_object(
                py: Python<'_>,
                calls: $crate::redis_calls::SessionCalls,
            ) -> PyResult<Py<PyAny>> {
                $crate::session_classes::session_object(
                    py,
                    |classes| &classes.$handed_out,
                    $crate::session_classes::SessionOfStore::Redis(calls),
                )
            }
        }

        $(#[$handle_meta])*
        #[pyclass(frozen, module = "subagent_tracker._native")]
        pub(crate) struct $handle {
            calls: $crate::redis_calls::HandleCalls,
        }

        impl $handle {
            /// The handle as a batch of ends names it.
            fn batch_handle(handle: &Bound<'_, $handle>) -> subagent_tracker_redis::SharedTaskHandle {
                handle.get().calls.batch_handle()
            }

            fn into_object(
                py: Python<'_>,
                calls: $crate::redis_calls::HandleCalls,
            ) -> PyResult<Py<PyAny>> {
                Py::new(py, $handle { calls }).map(Py::into_any)
            }
        }

        #[pymethods]
        impl $registry {
            $($registry_methods)*

            /// This process's worker id.
            #[getter]
            fn worker_id(&self) -> &str {
                self.calls.registry.worker_id()
            }

            /// The session `session_id`, created with these settings (`SessionOptions`) if no process has made
            /// it (a session that exists keeps its own).
            #[pyo3(signature = (session_id=None, **options))]
            fn session<'py>(
                &self,
                py: Python<'py>,
                session_id: Option<$crate::arguments::Id<$crate::arguments::SessionIdArgument>>,
                options: Option<&Bound<'_, pyo3::types::PyDict>>,
            ) -> $crate::session_store::Answer<'py> {
                let config = $crate::keyword_options::session_config(
                    options,
                    concat!(stringify!($registry), ".session"),
                )?;
                self.calls
                    .session(py, session_id.map(|id| id.0.to_string()), config)
            }

            /// The live session `session_id`, or None; never creates one.
            fn get_session<'py>(
                &self,
                py: Python<'py>,
                session_id: $crate::arguments::Id<$crate::arguments::SessionIdArgument>,
            ) -> $crate::session_store::Answer<'py> {
                self.calls.get_session(py, session_id.0.to_string())
            }

            /// The ids of the live sessions.
            fn sessions<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                self.calls.sessions(py)
            }

            fn __repr__(&self) -> String {
                format!(
                    concat!(stringify!($registry), "(worker_id={:?})"),
                    self.calls.registry.worker_id()
                )
            }
        }

        $crate::session_methods::session_methods! {
            $session, $handle, $handle_description, {
                $($session_methods)*

                /// Only the binding builds a session (`session_classes`).
                #[new]
                #[pyo3(signature = (*, _state))]
                fn new(_state: PyRef<'_, $crate::session_classes::SessionState>) -> PyResult<Self> {
                    let store = $crate::session_classes::redis_calls(&_state)?;
                    Ok($session { store })
                }

                /// Subscribes to the session's lifecycle events, whichever process makes them, from this call on:
                /// what the package's `events()` reads (on the asyncio classes, awaiting this call subscribes).
                fn _subscribe<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                    self.store.subscribe(py)
                }

                fn __hash__(&self) -> u64 {
                    $crate::redis_classes::session_hash(&self.store)
                }

                fn __repr__(&self) -> String {
                    format!(
                        concat!(stringify!($session), "(session_id={:?})"),
                        $crate::session_store::SessionStore::session_id(&self.store)
                    )
                }
            }
        }

        $crate::handle_methods::handle_methods! {
            $handle, $($with,)? {
                $($handle_methods)*

                fn __repr__(&self) -> String {
                    $crate::redis_classes::handle_repr(stringify!($handle), &self.calls)
                }
            }
        }
    };
}

pub(crate) use redis_classes;

/// `Class(task_id='…', session_id='…')`.
pub(crate) fn handle_repr(class: &str, calls: &HandleCalls) -> String {
    format!(
        "{class}(task_id={}, session_id={})",
        python_repr(Some(calls.task_id())),
        python_repr(Some(calls.session_id())),
    )
}

/// A session's hash: its id's (equal sessions share an id).
pub(crate) fn session_hash(store: &SessionCalls) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    store.session_id().hash(&mut hasher);
    hasher.finish()
}
