//! Python values held by the core (task metadata and results), and how they are shown.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use pyo3::PyTraverseError;
use subagent_tracker::MetadataMerge;

use crate::interpreter::with_python;

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

    /// Takes the reference out, for the caller to drop with no lock held (dropping it may run a finalizer);
    /// only for a session that the garbage collector is clearing.
    pub(crate) fn take(&self) -> Option<Py<PyAny>> {
        self.0.lock().take()
    }
}

/// Shows the garbage collector each Python reference that sessions in memory own, once. Several runs of a session
/// may share one value (a child that has no metadata of its own shares its parent's): the value holds one
/// reference, so it is visited once. Visiting it for each run would report more references than it owns, which
/// the collector's count of outside references cannot survive (a debug build of `CPython` aborts on it).
pub(crate) struct ValueVisit<'a, 'py> {
    visit: &'a PyVisit<'py>,
    shared: HashSet<usize>,
    outcome: Result<(), PyTraverseError>,
}

impl<'a, 'py> ValueVisit<'a, 'py> {
    pub(crate) fn new(visit: &'a PyVisit<'py>) -> Self {
        ValueVisit {
            visit,
            shared: HashSet::new(),
            outcome: Ok(()),
        }
    }

    pub(crate) fn value(&mut self, value: &PyValue) {
        // Most values are held by one run alone: only a shared one is remembered.
        let shared = Arc::strong_count(&value.0) > 1;
        if self.outcome.is_err() || shared && !self.shared.insert(Arc::as_ptr(&value.0).addr()) {
            return;
        }
        self.outcome = self.visit.call(value.0.lock().as_ref());
    }

    pub(crate) fn outcome(self) -> Result<(), PyTraverseError> {
        self.outcome
    }
}

/// How sessions in memory merge a parent's metadata with a child's own (contract §5, inherited metadata): both
/// are read-only mappings, so the child's starts as a read-only copy of the parent's, updated with its own keys.
/// Should the merge fail (the interpreter is exiting), the child keeps its own.
pub(crate) fn metadata_merge() -> MetadataMerge<PyValue> {
    Arc::new(|parent: &PyValue, own: PyValue| {
        let merged = with_python(|py| -> PyResult<Py<PyAny>> {
            static MAPPING_PROXY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            let merged = PyDict::new(py);
            merged.call_method1("update", (parent.get(py),))?;
            merged.call_method1("update", (own.get(py),))?;
            Ok(MAPPING_PROXY
                .import(py, "types", "MappingProxyType")?
                .call1((merged,))?
                .unbind())
        });
        match merged {
            Some(Ok(merged)) => PyValue::new(merged),
            _ => own,
        }
    })
}

/// `text` as Python's `repr` would show a `str | None`, for `__repr__` methods.
pub(crate) fn python_repr(text: Option<&str>) -> String {
    match text {
        None => "None".to_owned(),
        Some(text) => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
    }
}
