//! `SubagentTaskHandle`: the runner's side in memory, as a sync and async context manager.

use pyo3::prelude::*;

use crate::handle_methods::handle_methods;
use crate::memory_calls::HandleCalls;
use crate::python_types::{python_repr, PyValue};

/// Held by the code that runs a task. Closing it (garbage collection included) while the task still runs
/// fails the task, so a runner that disappears never leaves it unfinished. Its methods are every handle's
/// (`handle_methods!`).
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
    pub(crate) fn batch_handle(handle: &Bound<'_, SubagentTaskHandle>) -> Py<SubagentTaskHandle> {
        handle.clone().unbind()
    }
}

handle_methods! {
    SubagentTaskHandle, with, {
        fn __repr__(&self) -> String {
            let handle = self.core();
            format!(
                "SubagentTaskHandle(task_id={}, session_id={}, status='{}')",
                python_repr(Some(handle.task_id())),
                python_repr(Some(handle.session_id())),
                handle.status()
            )
        }
    }
}

impl Drop for SubagentTaskHandle {
    /// A handle dropped before its task ended warns, as Python warns for a file that was never closed; the
    /// core's handle then ends the task (`DROPPED_HANDLE_ERROR`), so nothing stays running with no runner.
    fn drop(&mut self) {
        let handle = self.core();
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
