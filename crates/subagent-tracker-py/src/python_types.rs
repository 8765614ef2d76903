//! Python values held by the core (task metadata and results), and how they are shown.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

/// A Python object held by the core as task metadata or result.
///
/// The core clones it freely (an `Arc`); the one Python reference inside is owned by the session that holds
/// the task, which shows it to the garbage collector and can clear it to break a reference cycle.
#[derive(Clone)]
pub(crate) struct PyValue(Arc<Mutex<Option<Py<PyAny>>>>);

impl PyValue {
    pub(crate) fn new(value: Py<PyAny>) -> PyValue {
        PyValue(Arc::new(Mutex::new(Some(value))))
    }

    /// A new reference to the value (`None` once cleared).
    pub(crate) fn get(&self, py: Python<'_>) -> Py<PyAny> {
        self.0
            .lock()
            .as_ref()
            .map_or_else(|| py.None(), |value| value.clone_ref(py))
    }

    pub(crate) fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(self.0.lock().as_ref())
    }

    /// Takes the reference out, for the caller to drop with no lock held (dropping it may run a finalizer);
    /// only for a session that the garbage collector is clearing.
    pub(crate) fn take(&self) -> Option<Py<PyAny>> {
        self.0.lock().take()
    }
}

/// `text` as Python's `repr` would show a `str | None`, for `__repr__` methods.
pub(crate) fn python_repr(text: Option<&str>) -> String {
    match text {
        None => "None".to_owned(),
        Some(text) => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
    }
}
