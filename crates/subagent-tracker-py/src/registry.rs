//! `Registry`: sessions looked up by id, backed by the core's in-memory registry.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::critical_section::with_critical_section;
use pyo3::types::{PyDict, PyWeakrefReference};
use pyo3::PyTraverseError;
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
    /// The Python object of each session handed out, by its session key, as a weak reference: a session has one
    /// object at a time, which alone shows its values to the garbage collector once the registry no longer does
    /// (`Session.__traverse__`). A dict of plain weak references rather than a `weakref.WeakValueDictionary`,
    /// whose methods are Python code: see `session_object`.
    handed_out: Py<PyDict>,
    /// How many entries `handed_out` had after its last sweep of references to objects gone.
    swept_size: AtomicUsize,
}

impl Registry {
    /// The `subagent_tracker.Session` object of a session of the registry: the one already handed out, if it is
    /// alive.
    ///
    /// Concurrent first calls for one session return one object. Building an object may run Python code (a
    /// collection it sets off runs finalizers), so another thread may come in meanwhile; but from the second
    /// look to the insert nothing runs Python code (the keys are ints, the references have no callback, and
    /// what the insert replaces is a reference to an object gone), so under the GIL no thread comes between
    /// them, and the first object inserted is the one every caller gets. Without a GIL (a free-threaded build)
    /// the dict's critical section holds them together.
    fn session_object(
        slf: &Bound<'_, Self>,
        tracker: InMemorySubagentTaskTracker<PyValue>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let handed_out = slf.get().handed_out.bind(py);
        let key = tracker.session_key();
        if let Some(found) = live_object(handed_out, key)? {
            return Ok(found);
        }
        let object = session_classes::session_object(
            py,
            |classes| &classes.session,
            SessionOfStore::Memory(tracker, Some(slf.clone().into_any().unbind())),
        )?;
        let reference = PyWeakrefReference::new(object.bind(py))?;
        let found = with_critical_section(handed_out.as_any(), || {
            let found = live_object(handed_out, key)?;
            if found.is_none() {
                handed_out.set_item(key, reference)?;
            }
            PyResult::Ok(found)
        })?;
        if let Some(found) = found {
            return Ok(found);
        }
        slf.get().sweep_if_grown(handed_out)?;
        Ok(object)
    }

    /// Drops the references to objects gone once the entries have doubled since the last sweep, so that the
    /// sweeps cost O(1) a session and the dict stays within twice the objects alive (and 64).
    fn sweep_if_grown(&self, handed_out: &Bound<'_, PyDict>) -> PyResult<()> {
        if handed_out.len() < 2 * self.swept_size.load(Ordering::Relaxed).max(32) {
            return Ok(());
        }
        let mut gone = Vec::new();
        for (key, reference) in handed_out.iter() {
            if reference.cast::<PyWeakrefReference>()?.upgrade().is_none() {
                gone.push(key);
            }
        }
        for key in gone {
            handed_out.del_item(key)?;
        }
        self.swept_size.store(handed_out.len(), Ordering::Relaxed);
        Ok(())
    }
}

/// The object handed out for the session `key`, if it is alive. The key is the session's address, which the
/// object found keeps alive: it is this session's.
fn live_object(handed_out: &Bound<'_, PyDict>, key: usize) -> PyResult<Option<Py<PyAny>>> {
    Ok(match handed_out.get_item(key)? {
        Some(reference) => reference
            .cast::<PyWeakrefReference>()?
            .upgrade()
            .map(Bound::unbind),
        None => None,
    })
}

#[pymethods]
impl Registry {
    #[new]
    fn new(py: Python<'_>) -> Registry {
        Registry {
            registry: InMemoryRegistry::with_metadata_merge(metadata_merge()),
            handed_out: PyDict::new(py).unbind(),
            swept_size: AtomicUsize::new(0),
        }
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
