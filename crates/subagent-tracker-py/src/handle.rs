//! `SubagentTaskHandle`: the runner's side, as a sync and async context manager.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::arguments::{self, Seconds, TimeoutArgument};
use crate::asyncio_waker::with_wake_batch;
use crate::package_imports::pause_function;
use crate::python_types::{python_repr, PyValue};
use crate::ready::Ready;
use crate::resume_wait::{resumption_for_python, wait_for_resume, ResumeWait};
use crate::runner_exit::{runner_exit, RunnerExit};
use crate::snapshot::SubagentTask;
use crate::token::CancellationToken;

/// Held by the code that runs a task. Closing it (garbage collection included) while the task still runs
/// fails the task, so a runner that disappears never leaves it unfinished.
///
/// It keeps its session's Python object alive (the session owns the task's metadata and result), and caches
/// the task's one token object, which owns the callbacks registered through it.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct SubagentTaskHandle {
    handle: subagent_tracker::SubagentTaskHandle<PyValue>,
    session: Py<PyAny>,
    // Made on first access, then the same object every time.
    // (A std `OnceLock`, readable without the interpreter, as `__traverse__` must.)
    token: std::sync::OnceLock<Py<CancellationToken>>,
    resume_wait: ResumeWait,
}

impl SubagentTaskHandle {
    /// The core's handle of the run.
    pub(crate) fn core(&self) -> &subagent_tracker::SubagentTaskHandle<PyValue> {
        &self.handle
    }

    pub(crate) fn new(
        handle: subagent_tracker::SubagentTaskHandle<PyValue>,
        session: Py<PyAny>,
    ) -> SubagentTaskHandle {
        SubagentTaskHandle {
            handle,
            session,
            token: std::sync::OnceLock::new(),
            resume_wait: ResumeWait::default(),
        }
    }

    /// Ends the task as the outcome of a `with` block: success, failure, or a stop on cancellation.
    fn exit(&self, py: Python<'_>, exception: &Bound<'_, PyAny>) -> PyResult<()> {
        match runner_exit(py, exception)? {
            RunnerExit::Completed => with_wake_batch(py, || self.handle.complete(None)).map(drop),
            RunnerExit::Stopped(reason) => {
                with_wake_batch(py, || self.handle.stop_cancelled(reason.as_deref())).map(drop)
            }
            RunnerExit::Failed(failure) => {
                with_wake_batch(py, || self.handle.fail_with(failure)).map(drop)
            }
        }
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
        if let Some(token) = self.token.get() {
            return Ok(token.clone_ref(py));
        }
        let token = Py::new(py, CancellationToken::new(self.handle.token()))?;
        // Holding the interpreter, no other thread can have set it meanwhile.
        Ok(self.token.get_or_init(|| token).clone_ref(py))
    }

    /// Records a progress milestone, with `data` (kept read-only) in the task's progress log; False (and
    /// nothing recorded) once the task has finished.
    #[pyo3(signature = (message, *, data=None))]
    fn progress(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let message = arguments::string(message, "message")?;
        let message = arguments::text(&message, "message")?;
        let data = data
            .filter(|data| !data.is_none())
            .map(|data| arguments::frozen_copy(data, "data"))
            .transpose()?;
        with_wake_batch(py, || match data {
            Some(data) => self.handle.progress_with(message, PyValue::new(data)),
            None => self.handle.progress(message),
        })
    }

    /// Reports success; True exactly when this moved the task from running to completed.
    #[pyo3(signature = (result=None))]
    fn complete(&self, py: Python<'_>, result: Option<Py<PyAny>>) -> PyResult<bool> {
        let result = result
            .filter(|result| !result.is_none(py))
            .map(PyValue::new);
        with_wake_batch(py, || self.handle.complete(result))
    }

    /// Reports failure with a message or an exception, and the failure's type and code if given (an exception's
    /// type defaults to its class name); True exactly when this moved the task to failed.
    #[pyo3(signature = (error, *, error_type=None, error_code=None))]
    fn fail(
        &self,
        py: Python<'_>,
        error: &Bound<'_, PyAny>,
        error_type: Option<&Bound<'_, PyAny>>,
        error_code: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let failure = arguments::failure(error, error_type, error_code)?;
        with_wake_batch(py, || self.handle.fail_with(failure))
    }

    /// Pauses the running task (to wait for a person's approval, say): running becomes paused, which is
    /// pending, so a cancel or a deadline still reaches it. Snapshots show `reason` as `pause_reason`. False if
    /// the task is not running.
    #[pyo3(signature = (reason=None))]
    fn pause(&self, py: Python<'_>, reason: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let reason = arguments::optional_string(reason, "reason")?;
        with_wake_batch(py, || self.handle.pause(reason.as_deref()))
    }

    /// `await handle.resumed()`: waits while the task is paused and returns the value the session resumed it
    /// with; raises `TaskCancelledError` if the task is cancelled while paused.
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
        self.resume_wait
            .future(py, self.handle.resume_watch().wait_for_resume())
    }

    #[pyo3(signature = (timeout))]
    fn _wait_for_resume(
        &self,
        py: Python<'_>,
        timeout: Option<Seconds<TimeoutArgument>>,
    ) -> PyResult<bool> {
        wait_for_resume(
            py,
            &self.handle.resume_watch(),
            timeout.map(|timeout| timeout.0),
        )
    }

    fn _resumption(&self, py: Python<'_>) -> PyResult<(&'static str, Py<PyAny>)> {
        resumption_for_python(py, self.handle.resumption(), |value| Ok(value.get(py)))
    }

    /// Records that the runner was stopped by force after its grace period (shown as `escalated`).
    fn record_escalation(&self) {
        self.handle.record_escalation();
    }

    /// A snapshot of the task now.
    fn snapshot(&self, py: Python<'_>) -> SubagentTask {
        SubagentTask::new(py, self.handle.snapshot())
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
        self.exit(py, exception)?;
        Ok(false)
    }

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
        self.exit(py, exception)?;
        Ready::exited(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.session)?;
        visit.call(self.token.get())
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

impl Drop for SubagentTaskHandle {
    /// A handle dropped before its task ended warns, as Python warns for a file that was never closed; the
    /// core's handle then ends the task (`DROPPED_HANDLE_ERROR`), so nothing stays running with no runner.
    fn drop(&mut self) {
        if self.handle.is_finished() {
            return;
        }
        Python::try_attach(|py| {
            // A handle is often dropped while an exception propagates (the temporary of a call that raised,
            // as `session.start_subagent_task("a").progress(bad)`): that exception must survive the warning,
            // as CPython's own destructors keep it, or the caller gets a `SystemError` instead.
            let propagating = PyErr::take(py);
            let message = format!(
                "subagent task {:?} of session {:?} was never ended: its handle was dropped while the task was {}, \
                 so the task is marked finished ({})",
                self.handle.task_id(),
                self.handle.session_id(),
                self.handle.status(),
                subagent_tracker::DROPPED_HANDLE_ERROR,
            );
            let category = py.get_type::<pyo3::exceptions::PyResourceWarning>();
            // Ids may hold NUL characters, which a C string cannot.
            let message = std::ffi::CString::new(message.replace('\0', "\\0")).unwrap_or_default();
            if let Err(error) = PyErr::warn(py, &category, &message, 1) {
                // Warnings turned into errors have nowhere to go from a destructor.
                error.write_unraisable(py, None);
            }
            if let Some(propagating) = propagating {
                propagating.restore(py);
            }
        });
    }
}
