//! `CancellationToken`: the runner's view of a cancel, for sync and async Python code.

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use subagent_tracker::SubagentTaskToken;

use crate::arguments;
use crate::asyncio_waker::future_for;
use crate::errors::task_cancelled_error;
use crate::python_types::{python_repr, PyValue};
use crate::ready::Ready;

/// How long a blocking wait sleeps between checks for Python signals (so Ctrl-C still works).
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Fires when its task becomes cancelled, and never after the task completed or failed.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct CancellationToken {
    token: SubagentTaskToken<PyValue>,
}

impl CancellationToken {
    pub(crate) fn new(token: SubagentTaskToken<PyValue>) -> CancellationToken {
        CancellationToken { token }
    }
}

#[pymethods]
impl CancellationToken {
    /// The id of the task this token belongs to.
    #[getter]
    fn task_id(&self) -> &str {
        self.token.task_id()
    }

    /// True once the task is cancelled. One atomic load; takes no lock.
    #[getter]
    fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The reason of the cancel, once cancelled; `None` before.
    #[getter]
    fn reason(&self) -> Option<String> {
        self.token.reason().map(|reason| reason.to_string())
    }

    /// Raises `TaskCancelledError` if the task is cancelled.
    fn raise_if_cancelled(&self, py: Python<'_>) -> PyResult<()> {
        if !self.token.is_cancelled() {
            return Ok(());
        }
        let reason = self
            .token
            .reason()
            .unwrap_or_else(|| subagent_tracker::DEFAULT_CANCEL_REASON.into());
        Err(task_cancelled_error(py, self.token.task_id(), &reason))
    }

    /// An awaitable that completes once the task is cancelled (at once if it already is).
    fn cancelled(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.token.is_cancelled() {
            return Ok(Py::new(py, Ready::new(py.None()))?.into_any());
        }
        match future_for(py, |context| self.token.poll_cancelled(context))? {
            Some(future) => Ok(future),
            None => Ok(Py::new(py, Ready::new(py.None()))?.into_any()),
        }
    }

    /// Blocks until the task is cancelled (True) or `timeout` seconds pass (False), releasing the GIL.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let timeout = arguments::timeout(timeout)?;
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            let slice = match deadline {
                Some(deadline) => deadline
                    .saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK_INTERVAL),
                None => SIGNAL_CHECK_INTERVAL,
            };
            if py.detach(|| self.token.wait_blocking(Some(slice))) {
                return Ok(true);
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(false);
            }
            py.check_signals()?;
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "CancellationToken(task_id={}, is_cancelled={})",
            python_repr(Some(self.token.task_id())),
            if self.token.is_cancelled() {
                "True"
            } else {
                "False"
            }
        )
    }
}
