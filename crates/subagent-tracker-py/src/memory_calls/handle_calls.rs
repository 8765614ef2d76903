//! A runner's handle's calls in memory: every [`HandleStore`] call answered by the core's handle.

use std::sync::OnceLock;
use std::time::Duration;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use super::answer;
use crate::asyncio_waker::with_wake_batch;
use crate::python_types::PyValue;
use crate::ready::Ready;
use crate::resume_wait::{resumed_value, wait_for_resume, ResumeWait};
use crate::runner_exit::RunnerExit;
use crate::session_store::{Answer, HandleStore};
use crate::snapshot::SubagentTask;
use crate::token::CancellationToken;

/// The core's handle of a run, with the session's Python object, which it keeps alive (the session owns the
/// task's metadata and result), and the task's one token object, which owns the callbacks registered through it.
pub(crate) struct HandleCalls {
    pub(crate) handle: subagent_tracker::SubagentTaskHandle<PyValue>,
    session: Py<PyAny>,
    // Made on first access, then the same object every time.
    // (A std `OnceLock`, readable without the interpreter, as `__traverse__` must.)
    token: OnceLock<Py<CancellationToken>>,
    resume_wait: ResumeWait,
    /// Whether the class that calls is seen through awaits (`AwaitableTaskHandle`).
    awaited: bool,
}

impl HandleCalls {
    pub(crate) fn new(
        handle: subagent_tracker::SubagentTaskHandle<PyValue>,
        session: Py<PyAny>,
        awaited: bool,
    ) -> HandleCalls {
        HandleCalls {
            handle,
            session,
            token: OnceLock::new(),
            resume_wait: ResumeWait::default(),
            awaited,
        }
    }
}

impl HandleStore for HandleCalls {
    type Value = PyValue;

    fn task_id(&self) -> &str {
        self.handle.task_id()
    }

    fn session_id(&self) -> &str {
        self.handle.session_id()
    }

    fn token(&self, py: Python<'_>) -> PyResult<Py<CancellationToken>> {
        if let Some(token) = self.token.get() {
            return Ok(token.clone_ref(py));
        }
        let token = Py::new(py, CancellationToken::new(self.handle.token()))?;
        // Holding the interpreter, no other thread can have set it meanwhile.
        Ok(self.token.get_or_init(|| token).clone_ref(py))
    }

    fn progress<'py>(&self, py: Python<'py>, message: &str, data: Option<PyValue>) -> Answer<'py> {
        let recorded = with_wake_batch(py, || match data {
            Some(data) => self.handle.progress_with(message, data),
            None => self.handle.progress(message),
        })?;
        answer(py, self.awaited, recorded)
    }

    fn end<'py>(
        &self,
        py: Python<'py>,
        ending: RunnerExit,
        result: Option<PyValue>,
    ) -> Answer<'py> {
        let ended = with_wake_batch(py, || match ending {
            RunnerExit::Completed => self.handle.complete(result),
            RunnerExit::Failed(failure) => self.handle.fail_with(failure),
            RunnerExit::Stopped(reason) => self.handle.stop_cancelled(reason.as_deref()),
        })?;
        answer(py, self.awaited, ended)
    }

    fn end_async_block<'py>(&self, py: Python<'py>, ending: RunnerExit) -> Answer<'py> {
        self.end(py, ending, None)?;
        Ok(Ready::exited(py)?.into_bound(py).into_any())
    }

    fn pause<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py> {
        answer(
            py,
            self.awaited,
            with_wake_batch(py, || self.handle.pause(reason.as_deref()))?,
        )
    }

    fn resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.resume_wait
            .future(py, self.handle.resume_watch().wait_for_resume())
    }

    fn wait_for_resume(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<bool> {
        wait_for_resume(py, &self.handle.resume_watch(), timeout)
    }

    fn resumed_value(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let token = self.token(py)?;
        resumed_value(py, self.handle.resumption(), token.get(), |value| {
            Ok(value.get(py))
        })
    }

    fn record_escalation<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.handle.record_escalation();
        answer(py, self.awaited, py.None())
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Answer<'py> {
        answer(
            py,
            self.awaited,
            SubagentTask::new(py, self.handle.snapshot()),
        )
    }

    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.session)?;
        visit.call(self.token.get())
    }
}

impl Drop for HandleCalls {
    /// A handle dropped before its task ended warns, as Python warns for a file that was never closed; the
    /// core's handle then ends the task (`DROPPED_HANDLE_ERROR`), so nothing stays running with no runner.
    fn drop(&mut self) {
        let handle = &self.handle;
        if handle.is_finished() {
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
                handle.task_id(),
                handle.session_id(),
                handle.status(),
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
