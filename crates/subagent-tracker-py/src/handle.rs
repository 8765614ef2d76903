//! `SubagentTaskHandle`: the runner's side in memory, as a sync and async context manager.

use pyo3::prelude::*;

use crate::awaitable::AwaitableTaskHandle;
use crate::handle_methods::handle_methods;
use crate::memory_calls::HandleCalls;
use crate::python_types::{python_repr, PyValue};

/// Held by the code that runs a task. Closing it (garbage collection included) while the task still runs
/// fails the task, so a runner that disappears never leaves it unfinished (`HandleCalls`'s `Drop`). Its methods
/// are every handle's (`handle_methods!`).
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct SubagentTaskHandle {
    calls: HandleCalls,
}

impl SubagentTaskHandle {
    pub(crate) fn new(calls: HandleCalls) -> SubagentTaskHandle {
        SubagentTaskHandle { calls }
    }

    /// The core's handle of the run.
    pub(crate) fn core(&self) -> &subagent_tracker::SubagentTaskHandle<PyValue> {
        &self.calls.handle
    }

    /// The handle as a batch of ends names it.
    pub(crate) fn batch_handle(handle: &Bound<'_, SubagentTaskHandle>) -> Py<PyAny> {
        handle.clone().into_any().unbind()
    }
}

/// The core's handle of an in-memory handle object of either class; `TypeError` for anything else.
pub(crate) fn core_handle<'a>(
    handle: &'a Bound<'_, PyAny>,
) -> PyResult<&'a subagent_tracker::SubagentTaskHandle<PyValue>> {
    if let Ok(awaited) = handle.cast::<AwaitableTaskHandle>() {
        return Ok(awaited.get().core());
    }
    Ok(handle.cast::<SubagentTaskHandle>()?.get().core())
}

handle_methods! {
    SubagentTaskHandle, with, {
        fn __repr__(&self) -> String {
            handle_repr("SubagentTaskHandle", self.core())
        }
    }
}

/// `Class(task_id='…', session_id='…', status='…')`.
pub(crate) fn handle_repr(
    class: &str,
    handle: &subagent_tracker::SubagentTaskHandle<PyValue>,
) -> String {
    format!(
        "{class}(task_id={}, session_id={}, status='{}')",
        python_repr(Some(handle.task_id())),
        python_repr(Some(handle.session_id())),
        handle.status()
    )
}
