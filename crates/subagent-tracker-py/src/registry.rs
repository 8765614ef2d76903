//! `Registry`: sessions looked up by id, backed by the core's in-memory registry.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{intern, PyTraverseError};
use subagent_tracker::{InMemoryRegistry, InMemorySubagentTaskTracker};

use crate::arguments::{Id, SessionIdArgument};
use crate::errors::tracker_error;
use crate::keyword_options::session_config;
use crate::python_types::{metadata_merge, PyValue, ValueVisit};
use crate::session_classes::{self, SessionOfStore};

/// The live sessions of this process, by id.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct Registry {
    registry: InMemoryRegistry<PyValue>,
    /// The Python object of each session handed out and still alive, by its session key (a
    /// `weakref.WeakValueDictionary`): a session has one object at a time, which alone shows its values to the
    /// garbage collector once the registry no longer does (`Session.__traverse__`).
    handed_out: Py<PyAny>,
}

impl Registry {
    /// The `subagent_tracker.Session` object of a session of the registry: the one already handed out, if it is
    /// alive.
    fn session_object(
        slf: &Bound<'_, Self>,
        tracker: InMemorySubagentTaskTracker<PyValue>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let handed_out = slf.get().handed_out.bind(py);
        let key = tracker.session_key();
        // The key is the session's address, which the object found keeps alive: it is this session's.
        let found = handed_out.call_method1(intern!(py, "get"), (key,))?;
        if !found.is_none() {
            return Ok(found.unbind());
        }
        let object = session_classes::session_object(
            py,
            |classes| &classes.session,
            SessionOfStore::Memory(tracker, Some(slf.clone().into_any().unbind())),
        )?;
        // Two threads that both found none may each get their own (`setdefault` is Python code): equal
        // objects of one listed session, which show its registry, not its values.
        Ok(handed_out
            .call_method1(intern!(py, "setdefault"), (key, object))?
            .unbind())
    }
}

#[pymethods]
impl Registry {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Registry> {
        Ok(Registry {
            registry: InMemoryRegistry::with_metadata_merge(metadata_merge()),
            handed_out: py
                .import(intern!(py, "weakref"))?
                .call_method0(intern!(py, "WeakValueDictionary"))?
                .unbind(),
        })
    }

    /// The live session `session_id`, created with these settings (`SessionOptions`) if there is none.
    #[pyo3(signature = (session_id=None, **options))]
    fn session(
        slf: &Bound<'_, Self>,
        session_id: Option<Id<SessionIdArgument>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let config = session_config(options, "Registry.session")?;
        let tracker = slf
            .get()
            .registry
            .session(session_id.as_ref().map(|id| &*id.0), config)
            .map_err(|error| tracker_error(slf.py(), error))?;
        Registry::session_object(slf, tracker)
    }

    /// The live session `session_id`, or None; never creates one.
    fn get_session(
        slf: &Bound<'_, Self>,
        session_id: Id<SessionIdArgument>,
    ) -> PyResult<Option<Py<PyAny>>> {
        slf.get()
            .registry
            .get_session(&session_id.0)
            .map(|tracker| Registry::session_object(slf, tracker))
            .transpose()
    }

    /// The ids of the live sessions.
    fn sessions(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .registry
            .sessions()
            .iter()
            .map(ToString::to_string)
            .collect();
        ids.sort_unstable();
        ids
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.handed_out)?;
        let mut values = ValueVisit::new(&visit);
        self.registry
            .visit_sessions(|session| session.visit_values(|value| values.value(value)));
        values.outcome()
    }

    fn __clear__(&self) {
        self.registry.clear();
    }

    fn __repr__(&self) -> String {
        format!("Registry(sessions={})", self.registry.sessions().len())
    }
}
