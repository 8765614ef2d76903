//! `SubagentTaskHandle`: the runner's side, as a sync and async context manager.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::sync::Arc;

use crate::arguments;
use crate::asyncio_waker::with_wake_batch;
use crate::errors::is_cancellation;
use crate::python_types::{python_repr, PyValue};
use crate::ready::Ready;
use crate::snapshot::SubagentTask;
use crate::token::CancellationToken;

/// Held by the code that runs a task. Closing it (garbage collection included) while the task still runs
/// fails the task, so a runner that disappears never leaves it unfinished.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct SubagentTaskHandle {
    handle: subagent_tracker::SubagentTaskHandle<PyValue>,
    // Made on first access, then the same object every time.
    token: PyOnceLock<Py<CancellationToken>>,
}

impl SubagentTaskHandle {
    pub(crate) fn new(handle: subagent_tracker::SubagentTaskHandle<PyValue>) -> SubagentTaskHandle {
        SubagentTaskHandle {
            handle,
            token: PyOnceLock::new(),
        }
    }

    /// Ends the task as the outcome of a `with` block: success, failure, or a stop on cancellation.
    fn exit(&self, py: Python<'_>, error: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let Some(error) = error.filter(|error| !error.is_none()) else {
            with_wake_batch(py, || self.handle.complete(None));
            return Ok(());
        };
        if is_cancellation(py, error)? {
            let reason = error
                .getattr("reason")
                .ok()
                .and_then(|reason| reason.extract::<String>().ok());
            with_wake_batch(py, || self.handle.stop_cancelled(reason.as_deref()));
        } else {
            let text = arguments::error_text(error)?;
            with_wake_batch(py, || self.handle.fail(&text));
        }
        Ok(())
    }
}

#[pymethods]
impl SubagentTaskHandle {
    /// The task's id.
    #[getter]
    fn task_id(&self) -> &str {
        self.handle.task_id()
    }

    /// The id of the session that owns the task.
    #[getter]
    fn session_id(&self) -> &str {
        self.handle.session_id()
    }

    /// The task's cancellation token.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<Py<CancellationToken>> {
        self.token
            .get_or_try_init(py, || {
                Py::new(py, CancellationToken::new(self.handle.token()))
            })
            .map(|token| token.clone_ref(py))
    }

    /// Records a progress milestone; False (and nothing recorded) once the task has finished.
    fn progress(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<bool> {
        let message = arguments::string(message, "message")?;
        let message = message.to_str()?;
        Ok(with_wake_batch(py, || self.handle.progress(message)))
    }

    /// Reports success; True exactly when this moved the task from running to completed.
    #[pyo3(signature = (result=None))]
    fn complete(&self, py: Python<'_>, result: Option<Py<PyAny>>) -> bool {
        let result = result.filter(|result| !result.is_none(py)).map(Arc::new);
        with_wake_batch(py, || self.handle.complete(result))
    }

    /// Reports failure with a message or an exception; True exactly when this moved the task to failed.
    fn fail(&self, py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<bool> {
        let text = arguments::error_text(error)?;
        Ok(with_wake_batch(py, || self.handle.fail(&text)))
    }

    /// Records that the runner was stopped by force after its grace period (shown as `escalated`).
    fn record_escalation(&self) {
        self.handle.record_escalation();
    }

    /// A snapshot of the task now.
    fn snapshot(&self) -> SubagentTask {
        SubagentTask::new(self.handle.snapshot())
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
        self.exit(py, Some(exception))?;
        Ok(false)
    }

    fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Ready>> {
        Py::new(py, Ready::new(slf.into_any()))
    }

    #[pyo3(signature = (_exception_type, exception, _traceback))]
    fn __aexit__(
        &self,
        py: Python<'_>,
        _exception_type: &Bound<'_, PyAny>,
        exception: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<Py<Ready>> {
        self.exit(py, Some(exception))?;
        Py::new(
            py,
            Ready::new(false.into_pyobject(py)?.to_owned().into_any().unbind()),
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "SubagentTaskHandle(task_id={}, session_id={}, status='{}')",
            python_repr(Some(self.handle.task_id())),
            python_repr(Some(self.handle.session_id())),
            self.handle.status()
        )
    }
}
