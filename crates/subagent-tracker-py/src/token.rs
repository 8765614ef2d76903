//! `CancellationToken`: the runner's view of a cancel, for sync and async Python code.

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use subagent_tracker::SubagentTaskToken;

use crate::arguments;
use crate::asyncio_waker::future_for;
use crate::cancel_callback::{CancelCallbackRegistration, PythonCallback};
use crate::errors::task_cancelled_error;
use crate::python_types::{python_repr, PyValue};
use crate::ready::Ready;

/// The Python module that holds the async checkpoints (async code is best written in Python).
fn checkpoints(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
    Ok(MODULE
        .get_or_try_init(py, || {
            py.import("subagent_tracker._checkpoints")
                .map(Bound::unbind)
        })?
        .bind(py))
}

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

    pub(crate) fn core(&self) -> &SubagentTaskToken<PyValue> {
        &self.token
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

    /// Runs `callback()` once when the task is cancelled (at once if it already is); a coroutine function is
    /// scheduled on the event loop that registered it. Exceptions are logged, never raised to the canceller.
    fn on_cancel(&self, callback: &Bound<'_, PyAny>) -> PyResult<CancelCallbackRegistration> {
        let callback = PythonCallback::new(callback)?;
        Ok(CancelCallbackRegistration::new(
            self.token.on_cancel(move || callback.invoke()),
        ))
    }

    /// `async for chunk in token.guard(stream)`: passes chunks through until the token fires, racing each
    /// chunk against it; then closes the stream and raises `TaskCancelledError` carrying `.partial`.
    fn guard<'py>(
        slf: &Bound<'py, Self>,
        stream: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        checkpoints(slf.py())?
            .getattr("GuardedStream")?
            .call1((slf, stream))
    }

    /// `await token.run(awaitable)`: its result, unless the token fires first; then it is cancelled and
    /// `TaskCancelledError` is raised.
    fn run<'py>(
        slf: &Bound<'py, Self>,
        awaitable: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        checkpoints(slf.py())?
            .getattr("run_until_cancelled")?
            .call1((slf, awaitable))
    }

    /// A token that fires when any of `tokens` fires, with that token's reason. It belongs to no task; its
    /// registrations on the sources go away when it fires or is garbage-collected.
    #[staticmethod]
    #[pyo3(signature = (*tokens))]
    fn any(tokens: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<CancellationToken> {
        let tokens = arguments::tokens(Some(tokens.as_any()), "tokens")?;
        Ok(CancellationToken::new(SubagentTaskToken::any(tokens)))
    }

    /// How many callbacks wait on this token (registered, not yet run, not removed).
    #[getter]
    fn callback_count(&self) -> usize {
        self.token.callback_count()
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
