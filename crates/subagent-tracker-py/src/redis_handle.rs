//! `RedisTaskHandle`: the runner's side of a task kept in Redis, as a context manager, with calls that block the
//! calling thread. `AsyncRedisTaskHandle` is the asyncio twin.

use pyo3::prelude::*;

use crate::arguments::{self, Seconds, TimeoutArgument};
use crate::package_imports::pause_function;
use crate::python_types::python_repr;
use crate::ready::Ready;
use crate::redis_calls::HandleCalls;
use crate::runner_exit::runner_exit;
use crate::token::CancellationToken;

/// Held by the code that runs a task kept in Redis. Its token fires in this process when the task is cancelled
/// from any process.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct RedisTaskHandle {
    calls: HandleCalls,
}

impl RedisTaskHandle {
    pub(crate) fn new(calls: HandleCalls) -> RedisTaskHandle {
        RedisTaskHandle { calls }
    }

    pub(crate) fn calls(&self) -> &HandleCalls {
        &self.calls
    }
}

#[pymethods]
impl RedisTaskHandle {
    #[getter]
    fn task_id(&self) -> &str {
        &self.calls.task_id
    }

    #[getter]
    fn session_id(&self) -> &str {
        &self.calls.session_id
    }

    #[getter]
    fn token(&self, py: Python<'_>) -> Py<CancellationToken> {
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

    /// Reports failure with a message or an exception, and the failure's type and code if given (an exception's
    /// type defaults to its class name).
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

    /// Pauses the running task (to wait for a person's approval, say), in Redis for every process and here for
    /// the runner; snapshots show `reason` as `pause_reason`. False if the task is not running.
    #[pyo3(signature = (reason=None))]
    fn pause<'py>(
        &self,
        py: Python<'py>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reason = arguments::optional_string(reason, "reason")?;
        self.calls.pause(py, reason)
    }

    /// `await handle.resumed()`: waits while the task is paused and returns the value the session resumed it
    /// with, from any process; raises `TaskCancelledError` if the task is cancelled while paused.
    fn resumed<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        pause_function(slf.py(), "resumed")?.call1((slf,))
    }

    /// The blocking form of `resumed()`, for threads; raises `TimeoutError` if `timeout` seconds pass first.
    #[pyo3(signature = (timeout=None))]
    fn wait_resumed<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        pause_function(slf.py(), "wait_resumed")?.call1((slf, timeout))
    }

    fn _resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.calls.resume_future(py)
    }

    #[pyo3(signature = (timeout))]
    fn _wait_for_resume(
        &self,
        py: Python<'_>,
        timeout: Option<Seconds<TimeoutArgument>>,
    ) -> PyResult<bool> {
        self.calls
            .wait_for_resume(py, timeout.map(|timeout| timeout.0))
    }

    fn _resumption(&self, py: Python<'_>) -> PyResult<(&'static str, Py<PyAny>)> {
        self.calls.resumption(py)
    }

    /// Records that the runner did not stop within its grace period after a cancel and is being stopped by
    /// force; snapshots show it as `escalated`.
    fn record_escalation<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.record_escalation(py)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.snapshot(py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_exception_type, exception, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exception_type: &Bound<'_, PyAny>,
        exception: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.calls.end(py, runner_exit(py, exception)?, None)?;
        Ok(false)
    }

    /// `async with handle:` ends the task as `with` does (the end is one short call to Redis).
    fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Ready>> {
        Ready::entered(py, slf.into_any())
    }

    #[pyo3(signature = (_exception_type, exception, _traceback))]
    fn __aexit__(
        &self,
        py: Python<'_>,
        _exception_type: &Bound<'_, PyAny>,
        exception: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<Py<Ready>> {
        self.calls.end(py, runner_exit(py, exception)?, None)?;
        Ready::exited(py)
    }

    fn __traverse__(&self, visit: pyo3::gc::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.calls.token)
    }

    fn __repr__(&self) -> String {
        handle_repr("RedisTaskHandle", &self.calls)
    }
}

/// `Class(task_id='…', session_id='…')`.
pub(crate) fn handle_repr(class: &str, calls: &HandleCalls) -> String {
    format!(
        "{class}(task_id={}, session_id={})",
        python_repr(Some(&calls.task_id)),
        python_repr(Some(&calls.session_id)),
    )
}
