//! The Python classes of a family of Redis classes, declared once: [`redis_classes!`] writes a registry, a session
//! and a runner's handle for one [`Delivery`], and the blocking family (`redis_registry`) and the asyncio family
//! (`async_redis`) each instantiate it with their class names and the few methods that differ between them. Every
//! method here only reads its arguments and hands them to `redis_calls`, which decides what the call does.

use pyo3::prelude::*;

use crate::arguments::{
    self, Id, LeaseArgument, ReconcileIntervalArgument, Seconds, SessionTtlArgument,
    TimeoutArgument, WorkerIdArgument,
};
use crate::python_types::python_repr;
use crate::redis_calls::HandleCalls;
use subagent_tracker_redis::RedisOptions;

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

            /// The session `session_id`, created if no process has made it.
            // One parameter per Python keyword argument: the signature is the Python API.
            #[allow(clippy::too_many_arguments)]
            #[pyo3(signature = (
                session_id=None, *, max_finished_tasks=None, event_buffer=None, max_finished_age=None,
                early_cancel_ttl=None, progress_log_size=None
            ))]
            fn session<'py>(
                &self,
                py: Python<'py>,
                session_id: Option<$crate::arguments::Id<$crate::arguments::SessionIdArgument>>,
                max_finished_tasks: Option<&Bound<'_, PyAny>>,
                event_buffer: Option<&Bound<'_, PyAny>>,
                max_finished_age: Option<
                    $crate::arguments::Seconds<$crate::arguments::MaxFinishedAgeArgument>,
                >,
                early_cancel_ttl: Option<
                    $crate::arguments::Seconds<$crate::arguments::EarlyCancelTtlArgument>,
                >,
                progress_log_size: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let config = $crate::arguments::tracker_config(
                    max_finished_tasks,
                    event_buffer,
                    max_finished_age,
                    early_cancel_ttl,
                    progress_log_size,
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

/// The URL and options of a registry, from the keyword arguments of `RedisRegistry(...)` and
/// `AsyncRedisRegistry.connect(...)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_options(
    url: &Bound<'_, PyAny>,
    worker_id: Option<Id<WorkerIdArgument>>,
    lease: Option<Seconds<LeaseArgument>>,
    reconcile_interval: Option<Seconds<ReconcileIntervalArgument>>,
    timeout: Option<Seconds<TimeoutArgument>>,
    session_ttl: Option<Seconds<SessionTtlArgument>>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    cluster: Option<bool>,
    wait_for_replicas: Option<&Bound<'_, PyAny>>,
    allow_eviction: Option<bool>,
) -> PyResult<(String, RedisOptions)> {
    let url = arguments::text(&arguments::string(url, "url")?, "url")?.to_owned();
    let mut options = RedisOptions::default();
    if let Some(worker_id) = worker_id {
        options = options.with_worker_id(&*worker_id.0);
    }
    if let Some(lease) = lease {
        options = options.with_lease(lease.0);
    }
    if let Some(interval) = reconcile_interval {
        options = options.with_reconcile_interval(interval.0);
    }
    if let Some(timeout) = timeout {
        options = options.with_timeout(timeout.0);
    }
    if let Some(session_ttl) = session_ttl {
        options = options.with_session_ttl(session_ttl.0);
    }
    if let Some(prefix) = arguments::optional_string(key_prefix, "key_prefix")? {
        options = options.with_key_prefix(prefix);
    }
    if let Some(replicas) = wait_for_replicas {
        options = options.with_wait_for_replicas(arguments::count(replicas, "wait_for_replicas")?);
    }
    if let Some(cluster) = cluster {
        options = options.with_cluster(cluster);
    }
    if let Some(allowed) = allow_eviction {
        options = options.with_eviction_allowed(allowed);
    }
    Ok((url, options))
}

/// `Class(task_id='…', session_id='…')`.
pub(crate) fn handle_repr(class: &str, calls: &HandleCalls) -> String {
    format!(
        "{class}(task_id={}, session_id={})",
        python_repr(Some(&calls.task_id)),
        python_repr(Some(&calls.session_id)),
    )
}
