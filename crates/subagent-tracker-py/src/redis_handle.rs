//! `RedisTaskHandle`: the runner's side of a task kept in Redis, as a context manager.

use pyo3::prelude::*;
use subagent_tracker_redis::{RedisSession, RedisTaskHandle as CoreHandle};

use crate::arguments;
use crate::errors::{redis_error, runner_exit, RunnerExit};
use crate::python_types::python_repr;
use crate::ready::Ready;
use crate::redis_registry::snapshot;
use crate::runtime::{block_on, MadeIn};
use crate::snapshot::SubagentTask;
use crate::token::CancellationToken;

/// Held by the code that runs a task kept in Redis. Its token fires in this process when the task is cancelled
/// from any process.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct RedisTaskHandle {
    /// Locked while a call to Redis reports through it (with the interpreter released).
    handle: tokio::sync::Mutex<CoreHandle>,
    session: RedisSession,
    task_id: String,
    session_id: String,
    token: Py<CancellationToken>,
    made_in: MadeIn,
}

impl RedisTaskHandle {
    pub(crate) fn new(
        handle: CoreHandle,
        session: RedisSession,
        made_in: MadeIn,
    ) -> PyResult<RedisTaskHandle> {
        Python::attach(|py| {
            Ok(RedisTaskHandle {
                task_id: handle.task_id().to_owned(),
                session_id: handle.session_id().to_owned(),
                token: Py::new(py, CancellationToken::new(handle.token()))?,
                handle: tokio::sync::Mutex::new(handle),
                session,
                made_in,
            })
        })
    }

    /// Reports the end; `result` is the completion's JSON, if any.
    fn end(&self, py: Python<'_>, ending: RunnerExit, result: Option<String>) -> PyResult<bool> {
        let outcome = block_on(py, self.made_in, async {
            let mut handle = self.handle.lock().await;
            match &ending {
                RunnerExit::Completed => handle.complete(result.as_deref()).await,
                RunnerExit::Failed(error) => handle.fail(error).await,
                RunnerExit::Stopped(reason) => handle.stopped(reason.as_deref()).await,
            }
        })?;
        outcome.map_err(|error| redis_error(py, error))
    }
}

#[pymethods]
impl RedisTaskHandle {
    #[getter]
    fn task_id(&self) -> &str {
        &self.task_id
    }

    #[getter]
    fn session_id(&self) -> &str {
        &self.session_id
    }

    #[getter]
    fn token(&self, py: Python<'_>) -> Py<CancellationToken> {
        self.token.clone_ref(py)
    }

    fn progress(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<bool> {
        let message = arguments::string(message, "message")?.to_str()?.to_owned();
        block_on(py, self.made_in, async {
            self.handle.lock().await.progress(&message).await
        })?
        .map_err(|error| redis_error(py, error))
    }

    #[pyo3(signature = (result=None))]
    fn complete(&self, py: Python<'_>, result: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let result = match result.filter(|result| !result.is_none()) {
            Some(result) => Some(crate::arguments::json_text(result, "result")?),
            None => None,
        };
        self.end(py, RunnerExit::Completed, result)
    }

    fn fail(&self, py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<bool> {
        let text = arguments::error_text(error)?;
        self.end(py, RunnerExit::Failed(text), None)
    }

    /// Records that the runner did not stop within its grace period after a cancel and is being stopped by
    /// force; snapshots show it as `escalated`.
    fn record_escalation(&self, py: Python<'_>) -> PyResult<()> {
        block_on(py, self.made_in, async {
            self.handle.lock().await.record_escalation().await
        })?
        .map(drop)
        .map_err(|error| redis_error(py, error))
    }

    fn snapshot(&self, py: Python<'_>) -> PyResult<Option<SubagentTask>> {
        block_on(py, self.made_in, self.session.get(&self.task_id))?
            .map_err(|error| redis_error(py, error))?
            .map(|task| snapshot(py, task))
            .transpose()
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
        self.end(py, runner_exit(py, exception)?, None)?;
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
        self.end(py, runner_exit(py, exception)?, None)?;
        Ready::exited(py)
    }

    fn __traverse__(&self, visit: pyo3::gc::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.token)
    }

    fn __repr__(&self) -> String {
        format!(
            "RedisTaskHandle(task_id={}, session_id={})",
            python_repr(Some(&self.task_id)),
            python_repr(Some(&self.session_id)),
        )
    }
}
