//! `CancelHandlers`: the cancel handlers of a cancelled subtree, for `cancel_subagent_task_and_wait` to wait for
//! (contract §3, cancel and wait). The wait itself is written in Python (`Session.cancel_subagent_task_and_wait`).

use parking_lot::Mutex;
use pyo3::prelude::*;
use subagent_tracker::{CancelWait, WaitForHandlers};

use crate::asyncio_waker::future_for;
use crate::python_types::PyValue;

#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct CancelHandlers {
    wait: CancelWait<PyValue>,
    /// The registration behind the latest `future()`, released with the next one or with this object.
    pending: Mutex<Option<WaitForHandlers>>,
}

impl CancelHandlers {
    pub(crate) fn new(wait: CancelWait<PyValue>) -> CancelHandlers {
        CancelHandlers {
            wait,
            pending: Mutex::new(None),
        }
    }
}

#[pymethods]
impl CancelHandlers {
    /// `None` once no handler of the subtree is at work; otherwise a future of the running loop that completes
    /// when none is.
    fn future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let pending = future_for(
            py,
            self.wait.wait_for_handlers(),
            WaitForHandlers::poll_handlers,
        )?;
        Ok(pending.map(|(future, wait)| {
            let replaced = self.pending.lock().replace(wait);
            drop(replaced);
            future
        }))
    }

    /// The ids of the tasks whose handlers are still at work, the cancelled task first.
    fn at_work(&self) -> Vec<String> {
        self.wait
            .handlers_at_work()
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}
