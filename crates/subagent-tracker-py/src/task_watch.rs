//! `TaskWatch`: what `Session.wait_subagent_task` awaits.

use parking_lot::Mutex;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use subagent_tracker::WaitForFinish;

use crate::asyncio_waker::future_for;
use crate::python_types::PyValue;
use crate::snapshot::SubagentTask;

/// Follows one run of a task until it finishes, even if it is evicted meanwhile. Keeps its session's Python
/// object alive, as a handle does.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct TaskWatch {
    watch: subagent_tracker::TaskWatch<PyValue>,
    session: Py<PyAny>,
    /// The registration behind the latest `finished_future`, released with the watch.
    wait: Mutex<Option<WaitForFinish>>,
}

impl TaskWatch {
    pub(crate) fn new(
        watch: subagent_tracker::TaskWatch<PyValue>,
        session: Py<PyAny>,
    ) -> TaskWatch {
        TaskWatch {
            watch,
            session,
            wait: Mutex::new(None),
        }
    }
}

#[pymethods]
impl TaskWatch {
    /// `None` once the run has finished; otherwise a future of the running loop that completes when it does.
    fn finished_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.watch.is_finished() {
            return Ok(None);
        }
        let pending = future_for(py, self.watch.wait_finished(), |wait, context| {
            wait.poll_finished(context)
        })?;
        Ok(pending.map(|(future, wait)| {
            let replaced = self.wait.lock().replace(wait);
            drop(replaced);
            future
        }))
    }

    /// A snapshot of the run now.
    fn snapshot(&self, py: Python<'_>) -> SubagentTask {
        SubagentTask::new(py, self.watch.snapshot())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.session)
    }
}
