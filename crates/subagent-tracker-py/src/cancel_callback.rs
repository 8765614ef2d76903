//! `token.on_cancel(callback)`: Python callbacks run by the core when a token fires.

use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::PyTraverseError;

use parking_lot::Mutex;
use subagent_tracker::HandlerDone;

use crate::asyncio_waker::{defer_interrupt, flush_wake_batch, running_loop, WakeTarget};
use crate::interpreter::with_python;
use crate::python_half::python_half;

/// A registered cancel callback; `remove()` unregisters it if it has not run.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct CancelCallbackRegistration {
    registration: subagent_tracker::CancelCallback,
}

#[pymethods]
impl CancelCallbackRegistration {
    /// Unregisters the callback; True if it was still waiting (it will now never run).
    fn remove(&self) -> bool {
        self.registration.remove()
    }
}

impl CancelCallbackRegistration {
    pub(crate) fn new(
        registration: subagent_tracker::CancelCallback,
    ) -> CancelCallbackRegistration {
        CancelCallbackRegistration { registration }
    }
}

/// A Python callable, and for a coroutine function the event loop that registered it.
pub(crate) struct PythonCallback {
    callable: Py<PyAny>,
    event_loop: Option<Py<PyAny>>,
    _counted: WakeTarget,
}

impl PythonCallback {
    /// Checks `callable`; a coroutine function is bound to the running event loop.
    pub(crate) fn new(callable: &Bound<'_, PyAny>) -> PyResult<PythonCallback> {
        let py = callable.py();
        if !callable.is_callable() {
            let type_name = callable.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "callback must be callable, got {type_name}"
            )));
        }
        static IS_COROUTINE_FUNCTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let is_coroutine_function = IS_COROUTINE_FUNCTION
            .import(py, "inspect", "iscoroutinefunction")?
            .call1((callable,))?
            .is_truthy()?;
        let event_loop = if is_coroutine_function {
            let running = running_loop(py).map_err(|_| {
                PyRuntimeError::new_err(
                    "a coroutine function callback must be registered from a running event loop, which will run it",
                )
            })?;
            Some(running.unbind())
        } else {
            None
        };
        Ok(PythonCallback {
            callable: callable.clone().unbind(),
            event_loop,
            _counted: WakeTarget::new(),
        })
    }

    /// Shows the garbage collector the callable and its loop.
    pub(crate) fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.callable)?;
        visit.call(&self.event_loop)
    }

    /// Calls the callable; a coroutine is scheduled on its loop, to finish `done` when it ends. `done` is
    /// finished here otherwise, or handed back when the call failed.
    fn call(&self, py: Python<'_>, done: HandlerDone) -> Result<(), (PyErr, HandlerDone)> {
        let outcome = match self.callable.call0(py) {
            Ok(outcome) => outcome,
            Err(error) => return Err((error, done)),
        };
        let Some(event_loop) = &self.event_loop else {
            done.finish();
            return Ok(());
        };
        let scheduled = (|| {
            let completion = Py::new(py, HandlerCompletion(Mutex::new(None)))?;
            let tracked = python_half(py)?
                .run_cancel_handler
                .bind(py)
                .call1((outcome.bind(py), completion.bind(py)))?;
            let create_task = event_loop.getattr(py, "create_task")?;
            event_loop.call_method1(py, "call_soon_threadsafe", (create_task, &tracked))?;
            Ok::<_, PyErr>((completion, tracked))
        })();
        match scheduled {
            Ok((completion, _)) => {
                *completion.get().0.lock() = Some(done);
                Ok(())
            }
            Err(error) => {
                // The loop is closed: close the coroutine so Python does not warn that it was never awaited.
                if let Err(close_error) = outcome.call_method0(py, "close") {
                    return Err((close_error, done));
                }
                Err((error, done))
            }
        }
    }
}

/// The mark of an async cancel handler's work, finished by `run_cancel_handler` (in `_checkpoints`) when the
/// handler's coroutine ends, for a canceller that waits for the handlers.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct HandlerCompletion(Mutex<Option<HandlerDone>>);

#[pymethods]
impl HandlerCompletion {
    /// The handler's work has ended.
    fn finish(&self) {
        let done = self.0.lock().take();
        if let Some(done) = done {
            done.finish();
        }
    }
}

impl subagent_tracker::OnCancel for PythonCallback {
    fn on_cancel(self: Box<Self>) {
        self.on_cancel_with(HandlerDone::untracked());
    }

    /// Calls the callback (or schedules its coroutine on its loop) after the wake-ups collected so far, and
    /// keeps `done` until its work has ended. An exception is logged, never raised into the canceller;
    /// `KeyboardInterrupt` and `SystemExit` are raised by the cancelling call once every callback has run.
    fn on_cancel_with(self: Box<Self>, done: HandlerDone) {
        with_python(|py| {
            flush_wake_batch(py);
            let Err((error, done)) = self.call(py, done) else {
                return;
            };
            done.finish();
            if error.is_instance_of::<PyException>(py) {
                log_callback_error(py, error);
            } else if let Some(error) = defer_interrupt(error) {
                // No Python call is waiting for it (a deadline's delivery thread): report it.
                error.write_unraisable(py, None);
            }
        });
    }
}

fn log_callback_error(py: Python<'_>, error: PyErr) {
    let logged = py.import("logging").and_then(|logging| {
        let logger = logging.call_method1("getLogger", ("subagent_tracker",))?;
        let keywords = pyo3::types::PyDict::new(py);
        keywords.set_item("exc_info", error.value(py))?;
        logger.call_method("error", ("a cancel callback raised",), Some(&keywords))
    });
    if logged.is_err() {
        error.write_unraisable(py, None);
    }
}
