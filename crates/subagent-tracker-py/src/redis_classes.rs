//! The Python classes of a family of Redis classes, declared once: [`redis_classes!`] writes a registry, a session
//! and a runner's handle for one [`Delivery`], and the blocking family (`redis_registry`) and the asyncio family
//! (`async_redis`) each instantiate it with their class names and the few methods that differ between them. Every
//! method here only reads its arguments and hands them to `redis_calls`, which decides what the call does.

use crate::python_types::python_repr;
use crate::redis_calls::HandleCalls;

/// Declares `$registry`, `$session` and `$handle`, the classes of one family, and `$delivery`, the
/// [`Delivery`](crate::redis_calls::Delivery) that makes its sessions and handles. `$export` and `$spawn` name the
/// package functions that export snapshots and spawn a task for this family; `$handle_description` is how
/// `end_subagent_tasks` names the handle it expects. Each `{ ... }` block adds the methods only that class of the
/// family has (the registry's constructor, `with`, `async with`).
macro_rules! redis_classes {
    (
        delivery: $delivery:ident = $waiting:expr;
        $(#[$registry_meta:meta])* registry $registry:ident { $($registry_methods:tt)* }
        $(#[$session_meta:meta])* session $session:ident {
            export: $export:literal, spawn: $spawn:literal, handle_description: $handle_description:literal;
            $($session_methods:tt)*
        }
        $(#[$handle_meta:meta])* handle $handle:ident { $($handle_methods:tt)* }
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
        #[pyclass(frozen, module = "subagent_tracker._native")]
        pub(crate) struct $session {
            calls: $crate::redis_calls::SessionCalls,
        }

        impl $session {
            pub(crate) fn new(calls: $crate::redis_calls::SessionCalls) -> $session {
                $session { calls }
            }

            fn into_object(
                py: Python<'_>,
                calls: $crate::redis_calls::SessionCalls,
            ) -> PyResult<Py<PyAny>> {
                Py::new(py, $session::new(calls)).map(Py::into_any)
            }
        }

        $(#[$handle_meta])*
        #[pyclass(frozen, module = "subagent_tracker._native")]
        pub(crate) struct $handle {
            calls: $crate::redis_calls::HandleCalls,
        }

        impl $handle {
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
            ) -> PyResult<Bound<'py, PyAny>> {
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
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.get_session(py, session_id.0.to_string())
            }

            /// The ids of the live sessions.
            fn sessions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.sessions(py)
            }

            fn __repr__(&self) -> String {
                format!(
                    concat!(stringify!($registry), "(worker_id={:?})"),
                    self.calls.registry.worker_id()
                )
            }
        }

        $crate::redis_session_methods::redis_session_methods! {
            $session, $handle, $export, $spawn, $handle_description, { $($session_methods)* }
        }

        #[pymethods]
        impl $handle {
            $($handle_methods)*

            #[getter]
            fn task_id(&self) -> &str {
                &self.calls.task_id
            }

            #[getter]
            fn session_id(&self) -> &str {
                &self.calls.session_id
            }

            #[getter]
            fn token(&self, py: Python<'_>) -> Py<$crate::token::CancellationToken> {
                self.calls.token.clone_ref(py)
            }

            #[pyo3(signature = (message, *, data=None))]
            fn progress<'py>(
                &self,
                py: Python<'py>,
                message: &Bound<'_, PyAny>,
                data: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.progress(py, message, data)
            }

            #[pyo3(signature = (result=None))]
            fn complete<'py>(
                &self,
                py: Python<'py>,
                result: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.complete(py, result)
            }

            /// Reports failure with a message or an exception, and the failure's type and code if given (an
            /// exception's type defaults to its class name).
            #[pyo3(signature = (error, *, error_type=None, error_code=None))]
            fn fail<'py>(
                &self,
                py: Python<'py>,
                error: &Bound<'_, PyAny>,
                error_type: Option<&Bound<'_, PyAny>>,
                error_code: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.fail(py, error, error_type, error_code)
            }

            /// Pauses the running task (to wait for a person's approval, say), in Redis for every process and
            /// here for the runner; snapshots show `reason` as `pause_reason`. False if the task is not running.
            #[pyo3(signature = (reason=None))]
            fn pause<'py>(
                &self,
                py: Python<'py>,
                reason: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                self.calls.pause(py, reason)
            }

            /// `await handle.resumed()`: waits while the task is paused and returns the value the session
            /// resumed it with, from any process; raises `TaskCancelledError` if the task is cancelled while
            /// paused.
            fn resumed<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                $crate::package_imports::pause_function(slf.py(), "resumed")?.call1((slf,))
            }

            /// The blocking form of `resumed()`, for threads; raises `TimeoutError` if `timeout` seconds pass
            /// first.
            #[pyo3(signature = (timeout=None))]
            fn wait_resumed<'py>(
                slf: &Bound<'py, Self>,
                timeout: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::package_imports::pause_function(slf.py(), "wait_resumed")?.call1((slf, timeout))
            }

            fn _resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
                self.calls.resume_future(py)
            }

            #[pyo3(signature = (timeout))]
            fn _wait_for_resume(
                &self,
                py: Python<'_>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
            ) -> PyResult<bool> {
                self.calls
                    .wait_for_resume(py, timeout.map(|timeout| timeout.0))
            }

            fn _resumption(&self, py: Python<'_>) -> PyResult<(&'static str, Py<PyAny>)> {
                self.calls.resumption(py)
            }

            /// Records that the runner did not stop within its grace period after a cancel and is being stopped
            /// by force; snapshots show it as `escalated`.
            fn record_escalation<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.record_escalation(py)
            }

            fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.snapshot(py)
            }

            fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<$crate::ready::Ready>> {
                $crate::ready::Ready::entered(py, slf.into_any())
            }

            fn __traverse__(&self, visit: pyo3::gc::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
                visit.call(&self.calls.token)
            }

            fn __repr__(&self) -> String {
                $crate::redis_classes::handle_repr(stringify!($handle), &self.calls)
            }
        }
    };
}

pub(crate) use redis_classes;

/// `Class(task_id='…', session_id='…')`.
pub(crate) fn handle_repr(class: &str, calls: &HandleCalls) -> String {
    format!(
        "{class}(task_id={}, session_id={})",
        python_repr(Some(&calls.task_id)),
        python_repr(Some(&calls.session_id)),
    )
}
