//! `CancellationToken`: the runner's view of a cancel, for sync and async Python code.

use parking_lot::Mutex;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;
use subagent_tracker::{SubagentTaskToken, WaitForCancel};

use pyo3::exceptions::PyTypeError;

use crate::arguments::{type_name, Seconds, TimeoutArgument};
use crate::asyncio_waker::future_for;
use crate::blocking_wait::wait_interruptibly;
use crate::cancel_callback::{CancelCallbackRegistration, PythonCallback};
use crate::errors::task_cancelled_error;
use crate::python_half::python_half;
use crate::python_types::python_repr;

/// Fires when its task becomes cancelled, and never after the task completed or failed.
///
/// Each signal has one Python token object (a handle caches its token; `any()` makes one), which shows the
/// garbage collector the callbacks registered through it.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct CancellationToken {
    token: SubagentTaskToken,
    /// The `cancelled()` futures that may still be waiting, each with its registration on the signal. Pruned
    /// of the done ones (resolved by a cancel, or cancelled or resolved by their caller) whenever the list
    /// has doubled, so abandoned waits cost amortized constant time and no memory, and resolving a future
    /// costs no extra callback.
    waits: Mutex<PendingWaits>,
}

/// A `cancelled()` future with its registration on the signal.
type PendingFuture = (Py<PyAny>, WaitForCancel);

#[derive(Default)]
struct PendingWaits {
    futures: Vec<PendingFuture>,
    prune_at: usize,
}

/// The fewest pending futures a token keeps before it first looks for done ones.
const FIRST_PRUNE: usize = 16;

impl CancellationToken {
    /// `TaskCancelledError` (with the cancel's reason) if the task is cancelled.
    pub(crate) fn check(&self, py: Python<'_>) -> PyResult<()> {
        if !self.token.is_cancelled() {
            return Ok(());
        }
        let reason = self
            .token
            .reason()
            .unwrap_or_else(|| subagent_tracker::DEFAULT_CANCEL_REASON.into());
        let task_id = self
            .token
            .task_id()
            .cloned()
            .or_else(|| self.token.origin())
            .unwrap_or_default();
        Err(task_cancelled_error(py, &task_id, &reason))
    }

    pub(crate) fn new(token: SubagentTaskToken) -> CancellationToken {
        CancellationToken {
            token,
            waits: Mutex::new(PendingWaits::default()),
        }
    }

    pub(crate) fn core(&self) -> &SubagentTaskToken {
        &self.token
    }
}

#[pymethods]
impl CancellationToken {
    /// The id of the task this token belongs to; None for a token made by `any()`.
    #[getter]
    fn task_id(&self) -> Option<&str> {
        self.token.task_id().map(|task_id| &**task_id)
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
        self.check(py)
    }

    /// An asyncio future that completes once the task is cancelled (already done if it is).
    fn cancelled(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match future_for(py, self.token.cancelled(), |wait, context| {
            wait.poll_cancelled(context)
        })? {
            Some((future, wait)) => {
                let due = {
                    let mut waits = self.waits.lock();
                    waits.futures.push((future.clone_ref(py), wait));
                    if waits.futures.len() >= waits.prune_at {
                        std::mem::take(&mut waits.futures)
                    } else {
                        Vec::new()
                    }
                };
                if !due.is_empty() {
                    // Asking futures whether they are done runs Python (and maybe the collector), so it happens
                    // with no lock of ours held; dropping a done wait takes back its registration.
                    let (done, pending) = split_done(py, due);
                    let mut waits = self.waits.lock();
                    waits.futures.extend(pending);
                    waits.prune_at = (waits.futures.len() * 2).max(FIRST_PRUNE);
                    drop(waits);
                    drop(done);
                }
                Ok(future)
            }
            None => {
                let future =
                    crate::asyncio_waker::running_loop(py)?.call_method0("create_future")?;
                future.call_method1("set_result", (py.None(),))?;
                Ok(future.unbind())
            }
        }
    }

    /// Blocks until the task is cancelled (True) or `timeout` seconds pass (False), releasing the GIL.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<Seconds<TimeoutArgument>>) -> PyResult<bool> {
        wait_interruptibly(py, timeout.map(|timeout| timeout.0), |slice| {
            self.token.wait_blocking(Some(slice))
        })
    }

    /// Runs `callback()` once when the task is cancelled (at once if it already is); a coroutine function is
    /// scheduled on the event loop that registered it. Exceptions are logged, never raised to the canceller.
    fn on_cancel(
        &self,
        py: Python<'_>,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<CancelCallbackRegistration> {
        let callback = PythonCallback::new(callback)?;
        let registration =
            crate::asyncio_waker::with_wake_batch(py, || self.token.on_cancel(callback))?;
        Ok(CancelCallbackRegistration::new(registration))
    }

    /// `async for chunk in token.guard(stream)`: passes chunks through until the token fires, racing each
    /// chunk against it; then closes the stream and raises `TaskCancelledError` carrying `.partial`.
    fn guard<'py>(
        slf: &Bound<'py, Self>,
        stream: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        python_half(slf.py())?
            .guarded_stream
            .bind(slf.py())
            .call1((slf, stream))
    }

    /// `await token.run(awaitable)`: its result, unless the token fires first; then it is cancelled and
    /// `TaskCancelledError` is raised.
    fn run<'py>(
        slf: &Bound<'py, Self>,
        awaitable: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        python_half(slf.py())?
            .run_until_cancelled
            .bind(slf.py())
            .call1((slf, awaitable))
    }

    /// A token that fires when any of `tokens` fires, with that token's reason. It belongs to no task
    /// (`task_id` is None), and lives while it is held or a task is linked to it.
    #[staticmethod]
    #[pyo3(signature = (*tokens))]
    fn any(py: Python<'_>, tokens: Tokens) -> PyResult<CancellationToken> {
        let combined =
            crate::asyncio_waker::with_wake_batch(py, || SubagentTaskToken::any(tokens.0))?;
        Ok(CancellationToken::new(combined))
    }

    /// How many callbacks and links wait on this token (registered, not yet run, not removed).
    #[getter]
    fn callback_count(&self) -> usize {
        self.token.callback_count()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // The lock is never held while Python runs, so it is free here; `try_lock` keeps that from being a
        // deadlock if that ever changed (skipping the futures would only delay their collection).
        if let Some(waits) = self.waits.try_lock() {
            for (future, _) in &waits.futures {
                visit.call(future)?;
            }
        }
        // The callbacks are this object's to show only while it owns them: a task's token object lives exactly
        // as long as the handle whose task holds them, but a combined token's signal outlives its object when
        // a task is linked to it, and callbacks shown then could be cleared while that task still runs them.
        if self.token.task_id().is_none() && !self.token.is_only_holder() {
            return Ok(());
        }
        let mut outcome = Ok(());
        self.token.visit_callbacks(|callback: &PythonCallback| {
            if outcome.is_ok() {
                outcome = callback.visit(&visit);
            }
        });
        outcome
    }

    fn __repr__(&self) -> String {
        format!(
            "CancellationToken(task_id={}, is_cancelled={})",
            python_repr(self.token.task_id().map(|task_id| &**task_id)),
            if self.token.is_cancelled() {
                "True"
            } else {
                "False"
            }
        )
    }
}

/// An iterable of `CancellationToken`s.
pub(crate) struct Tokens(pub(crate) Vec<SubagentTaskToken>);

/// Splits pending futures (with their waits) into the done ones and the rest.
fn split_done(
    py: Python<'_>,
    futures: Vec<PendingFuture>,
) -> (Vec<PendingFuture>, Vec<PendingFuture>) {
    futures.into_iter().partition(|(future, _)| {
        future
            .call_method0(py, pyo3::intern!(py, "done"))
            .and_then(|done| done.is_truthy(py))
            .unwrap_or(true)
    })
}

impl<'a, 'py> FromPyObject<'a, 'py> for Tokens {
    type Error = PyErr;

    fn extract(value: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let iterator = value.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "expected an iterable of CancellationToken, got {}",
                type_name(&value)
            ))
        })?;
        iterator
            .map(|item| {
                let item = item?;
                let token = item
                    .cast::<crate::token::CancellationToken>()
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "expected CancellationToken objects, got {}",
                            type_name(&item)
                        ))
                    })?;
                Ok(token.get().core().clone())
            })
            .collect::<PyResult<Vec<_>>>()
            .map(Tokens)
    }
}
