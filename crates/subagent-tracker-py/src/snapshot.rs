//! `SubagentTask`: the immutable snapshot Python code reads.

use pyo3::prelude::*;
use subagent_tracker::SubagentTaskSnapshot;

use crate::python_types::{epoch_seconds, python_repr, status_member, PyValue};

/// An immutable snapshot of one subagent task, taken atomically.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct SubagentTask {
    snapshot: SubagentTaskSnapshot<PyValue>,
}

impl SubagentTask {
    pub(crate) fn new(snapshot: SubagentTaskSnapshot<PyValue>) -> SubagentTask {
        SubagentTask { snapshot }
    }
}

fn value(py: Python<'_>, value: &Option<PyValue>) -> Py<PyAny> {
    value
        .as_ref()
        .map_or_else(|| py.None(), |value| value.clone_ref(py))
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
        value(py, &self.snapshot.metadata)
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
        epoch_seconds(self.snapshot.started_at)
    }

    #[getter]
    fn cancelled_at(&self) -> Option<f64> {
        self.snapshot.cancelled_at.map(epoch_seconds)
    }

    #[getter]
    fn ended_at(&self) -> Option<f64> {
        self.snapshot.ended_at.map(epoch_seconds)
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
        self.snapshot.cancel_cause.map(|cause| cause.as_str())
    }

    #[getter]
    fn deadline(&self) -> Option<f64> {
        self.snapshot.deadline.map(epoch_seconds)
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

    #[getter]
    fn result(&self, py: Python<'_>) -> Py<PyAny> {
        value(py, &self.snapshot.result)
    }

    #[getter]
    fn error(&self) -> Option<&str> {
        self.snapshot.error.as_deref()
    }

    fn __repr__(&self) -> String {
        let snapshot = &self.snapshot;
        format!(
            "SubagentTask(task_id={}, status='{}', finished={}, parent_id={}, cancel_reason={})",
            python_repr(Some(&snapshot.task_id)),
            snapshot.status.as_str(),
            if snapshot.finished { "True" } else { "False" },
            python_repr(snapshot.parent_id.as_deref()),
            python_repr(snapshot.cancel_reason.as_deref()),
        )
    }
}
