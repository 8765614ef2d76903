//! `TaskWatch`: what `Session.wait_subagent_task` awaits.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::asyncio_waker::future_for;
use crate::python_types::PyValue;
use crate::snapshot::SubagentTask;

/// Follows one run of a task until it finishes, even if it is evicted meanwhile. Keeps its session's Python
/// object alive, as a handle does.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct TaskWatch {
    watch: subagent_tracker::TaskWatch<PyValue>,
    session: Py<PyAny>,
}

impl TaskWatch {
    pub(crate) fn new(
        watch: subagent_tracker::TaskWatch<PyValue>,
        session: Py<PyAny>,
    ) -> TaskWatch {
        TaskWatch { watch, session }
    }
}

#[pymethods]
impl TaskWatch {
    /// `None` once the run has finished; otherwise a future of the running loop that completes when it does.
    fn finished_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.watch.is_finished() {
            return Ok(None);
        }
        future_for(py, self.watch.wait_finished(), |wait, context| {
            wait.poll_finished(context)
        })
    }

    /// A snapshot of the run now.
    fn snapshot(&self, py: Python<'_>) -> SubagentTask {
        SubagentTask::new(py, self.watch.snapshot())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.session)
    }
}
