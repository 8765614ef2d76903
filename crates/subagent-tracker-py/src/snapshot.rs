//! `SubagentTask`: the immutable snapshot Python code reads.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::PyTraverseError;
use subagent_tracker::SubagentTaskSnapshot;

use crate::python_half::{progress_entry_class, status_member};
use crate::python_types::{python_repr, PyValue};

/// An immutable snapshot of one subagent task, taken atomically. It owns its references to the metadata and
/// result, so it is unaffected by what happens to the session afterwards.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct SubagentTask {
    snapshot: SubagentTaskSnapshot<Py<PyAny>>,
}

impl SubagentTask {
    pub(crate) fn new(py: Python<'_>, snapshot: SubagentTaskSnapshot<PyValue>) -> SubagentTask {
        SubagentTask {
            snapshot: snapshot.map_values(|value| value.get(py)),
        }
    }
}

fn owned(py: Python<'_>, value: Option<&Py<PyAny>>) -> Py<PyAny> {
    value.map_or_else(|| py.None(), |value| value.clone_ref(py))
}

fn epoch(time: std::time::SystemTime) -> f64 {
    subagent_tracker::epoch_seconds(time)
}

#[pymethods]
impl SubagentTask {
    #[getter]
    fn task_id(&self) -> &str {
        &self.snapshot.task_id
    }

    #[getter]
    fn session_id(&self) -> &str {
        &self.snapshot.session_id
    }

    #[getter]
    fn parent_id(&self) -> Option<&str> {
        self.snapshot.parent_id.as_deref()
    }

    #[getter]
    fn agent(&self) -> Option<&str> {
        self.snapshot.agent.as_deref()
    }

    #[getter]
    fn description(&self) -> Option<&str> {
        self.snapshot.description.as_deref()
    }

    #[getter]
    fn metadata(&self, py: Python<'_>) -> Py<PyAny> {
        owned(py, self.snapshot.metadata.as_ref())
    }

    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        status_member(py, self.snapshot.status)
    }

    #[getter]
    fn finished(&self) -> bool {
        self.snapshot.finished
    }

    #[getter]
    fn started_at(&self) -> f64 {
        epoch(self.snapshot.started_at)
    }

    #[getter]
    fn queued_at(&self) -> Option<f64> {
        self.snapshot.queued_at.map(epoch)
    }

    #[getter]
    fn claimed_at(&self) -> Option<f64> {
        self.snapshot.claimed_at.map(epoch)
    }

    #[getter]
    fn cancelled_at(&self) -> Option<f64> {
        self.snapshot.cancelled_at.map(epoch)
    }

    #[getter]
    fn ended_at(&self) -> Option<f64> {
        self.snapshot.ended_at.map(epoch)
    }

    #[getter]
    fn cancel_reason(&self) -> Option<&str> {
        self.snapshot.cancel_reason.as_deref()
    }

    #[getter]
    fn cancel_origin(&self) -> Option<&str> {
        self.snapshot.cancel_origin.as_deref()
    }

    #[getter]
    fn cancel_cause(&self) -> Option<&'static str> {
        self.snapshot
            .cancel_cause
            .map(subagent_tracker::CancelCause::as_str)
    }

    /// Why the runner paused the task: while it is paused, and on a task that ended while paused.
    #[getter]
    fn pause_reason(&self) -> Option<&str> {
        self.snapshot.pause_reason.as_deref()
    }

    #[getter]
    fn deadline(&self) -> Option<f64> {
        self.snapshot.deadline.map(epoch)
    }

    #[getter]
    fn detached(&self) -> bool {
        self.snapshot.detached
    }

    #[getter]
    fn escalated(&self) -> bool {
        self.snapshot.escalated
    }

    #[getter]
    fn progress(&self) -> Option<&str> {
        self.snapshot.progress.as_deref()
    }

    #[getter]
    fn progress_count(&self) -> u64 {
        self.snapshot.progress_count
    }

    /// The latest progress reports, oldest first, as `ProgressEntry(at, message, data)` tuples.
    #[getter]
    fn progress_log<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let entry_class = progress_entry_class(py)?;
        let entries = self
            .snapshot
            .progress_log
            .iter()
            .map(|entry| {
                entry_class.call1((
                    epoch(entry.at),
                    &*entry.message,
                    owned(py, entry.data.as_ref()),
                ))
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, entries)
    }

    #[getter]
    fn result(&self, py: Python<'_>) -> Py<PyAny> {
        owned(py, self.snapshot.result.as_ref())
    }

    #[getter]
    fn error(&self) -> Option<&str> {
        self.snapshot.error.as_deref()
    }

    /// The failure's type, when the runner gave one (an exception's class name by default).
    #[getter]
    fn error_type(&self) -> Option<&str> {
        self.snapshot.error_type.as_deref()
    }

    /// The failure's code, when the runner gave one.
    #[getter]
    fn error_code(&self) -> Option<&str> {
        self.snapshot.error_code.as_deref()
    }

    /// The worker whose runner runs the task (Redis sessions); None in memory.
    #[getter]
    fn worker(&self) -> Option<&str> {
        self.snapshot.worker.as_deref()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.snapshot.metadata)?;
        for entry in &self.snapshot.progress_log {
            visit.call(&entry.data)?;
        }
        visit.call(&self.snapshot.result)
    }

    fn __repr__(&self) -> String {
        let snapshot = &self.snapshot;
        let error = match &snapshot.error {
            Some(error) => format!(", error={}", python_repr(Some(error))),
            None => String::new(),
        };
        format!(
            "SubagentTask(task_id={}, status='{}', finished={}, parent_id={}, cancel_reason={}{error})",
            python_repr(Some(&snapshot.task_id)),
            snapshot.status.as_str(),
            if snapshot.finished { "True" } else { "False" },
            python_repr(snapshot.parent_id.as_deref()),
            python_repr(snapshot.cancel_reason.as_deref()),
        )
    }
}
