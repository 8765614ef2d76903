//! `TaskWatch`: what `Session.wait_subagent_task` awaits.

use pyo3::prelude::*;

use crate::asyncio_waker::future_for;
use crate::python_types::PyValue;
use crate::snapshot::SubagentTask;

/// Follows one run of a task until it finishes, even if it is evicted meanwhile.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct TaskWatch {
    watch: subagent_tracker::TaskWatch<PyValue>,
}

impl TaskWatch {
    pub(crate) fn new(watch: subagent_tracker::TaskWatch<PyValue>) -> TaskWatch {
        TaskWatch { watch }
    }
}

#[pymethods]
impl TaskWatch {
    /// `None` once the run has finished; otherwise a future of the running loop that completes when it does.
    fn finished_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.watch.is_finished() {
            return Ok(None);
        }
        future_for(py, |context| self.watch.poll_finished(context))
    }

    /// A snapshot of the run now.
    fn snapshot(&self) -> SubagentTask {
        SubagentTask::new(self.watch.snapshot())
    }
}
