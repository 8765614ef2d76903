//! The calls that Redis registries, sessions and runners' handles make, written once for both ways of handing
//! back their outcome: blocking (`RedisRegistry`) and asyncio (`AsyncRedisRegistry`).
//!
//! Every call builds one future for the runtime and one conversion of its outcome; [`Delivery`] decides whether
//! the calling thread waits for it or gets an asyncio future at once. The two families of classes only declare
//! the Python signatures and pick their delivery.

use std::future::Future;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::IntoPyObjectExt;
use subagent_tracker::{SubagentTaskSnapshot, TrackerConfig};
use subagent_tracker_redis::{
    RedisRegistry as CoreRegistry, RedisSession as CoreSession, RedisTrackerError,
};

use crate::arguments::from_json_text;
use crate::asyncio_waker::running_loop;
use crate::errors::redis_error;
use crate::loop_inbox::{asyncio_future, WhenAbandoned};
use crate::python_types::PyValue;
use crate::ready::Ready;
use crate::runtime::{block_on, MadeIn};
use crate::snapshot::SubagentTask;

mod handle_calls;
mod session_calls;

pub(crate) use handle_calls::HandleCalls;
pub(crate) use session_calls::SessionCalls;

/// How a family of Redis classes hands the outcome of a call to Python, and which of its classes wrap the
/// sessions and runners' handles that calls make. Each family declares its own (`BLOCKING` in
/// `redis_registry`, `ASYNCIO` in `async_redis`), so the calls here never name a class.
#[derive(Clone, Copy)]
pub(crate) struct Delivery {
    pub(crate) waiting: Waiting,
    pub(crate) session_class: fn(Python<'_>, SessionCalls) -> PyResult<Py<PyAny>>,
    pub(crate) handle_class: fn(Python<'_>, HandleCalls) -> PyResult<Py<PyAny>>,
}

/// Who waits for a call to Redis.
#[derive(Clone, Copy)]
pub(crate) enum Waiting {
    /// The calling thread waits, with the interpreter released: for threads and scripts.
    Blocking,
    /// The call returns an asyncio future of the running loop at once; the event loop never waits on Redis.
    /// Cancelling the awaiting coroutine abandons the wait, never the call: a transition always completes.
    Asyncio,
}

impl Delivery {
    /// Runs a call to Redis and hands over its value, converted by `convert`, or its error as Python's exception.
    pub(crate) fn call<'py, F, T>(
        self,
        py: Python<'py>,
        made_in: MadeIn,
        future: F,
        convert: impl FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = Result<T, RedisTrackerError>> + Send + 'static,
        T: Send + 'static,
    {
        let convert = move |py: Python<'_>, outcome: Result<T, RedisTrackerError>| {
            convert(py, outcome.map_err(|error| redis_error(py, error))?)
        };
        match self.waiting {
            Waiting::Blocking => {
                let outcome = block_on(py, made_in, future)?;
                Ok(convert(py, outcome)?.into_bound(py))
            }
            Waiting::Asyncio => asyncio_future(py, made_in, WhenAbandoned::Finish, future, convert),
        }
    }

    /// Hands over `value` at once, where the core answers without the network: the value itself for the
    /// blocking API, an awaitable already done for asyncio (no trip through the runtime and the loop), which
    /// still needs a running loop, as every call of the asyncio API does (contract §20).
    fn ready<'py>(self, py: Python<'py>, value: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match self.waiting {
            Waiting::Blocking => Ok(value.into_bound(py)),
            Waiting::Asyncio => {
                running_loop(py)?;
                Ok(Py::new(py, Ready::new(value))?.into_bound(py).into_any())
            }
        }
    }
}

/// A value as a Python object.
fn object<T: for<'py> IntoPyObject<'py>>(py: Python<'_>, value: T) -> PyResult<Py<PyAny>> {
    value.into_bound_py_any(py).map(Bound::unbind)
}

/// A registry's calls.
pub(crate) struct RegistryCalls {
    pub(crate) registry: CoreRegistry,
    pub(crate) made_in: MadeIn,
    pub(crate) delivery: Delivery,
}

impl RegistryCalls {
    pub(crate) fn session<'py>(
        &self,
        py: Python<'py>,
        session_id: Option<String>,
        config: TrackerConfig,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (registry, calls) = (self.registry.clone(), self.session_calls());
        self.delivery.call(
            py,
            self.made_in,
            async move { registry.session(session_id.as_deref(), config).await },
            move |py, session| calls(session).into_object(py),
        )
    }

    pub(crate) fn get_session<'py>(
        &self,
        py: Python<'py>,
        session_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (registry, calls) = (self.registry.clone(), self.session_calls());
        self.delivery.call(
            py,
            self.made_in,
            async move { registry.get_session(&session_id).await },
            move |py, session| match session {
                Some(session) => calls(session).into_object(py),
                None => Ok(py.None()),
            },
        )
    }

    pub(crate) fn sessions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let registry = self.registry.clone();
        self.delivery.call(
            py,
            self.made_in,
            async move { registry.sessions().await },
            object,
        )
    }

    /// The calls of a session this registry hands out.
    fn session_calls(&self) -> impl FnOnce(CoreSession) -> SessionCalls + Send + 'static {
        let (made_in, delivery) = (self.made_in, self.delivery);
        move |session| SessionCalls {
            session,
            made_in,
            delivery,
        }
    }
}

/// A snapshot of the store's task, with its metadata (read-only, as in memory) and result decoded from JSON.
pub(crate) fn snapshot(
    py: Python<'_>,
    mut snapshot: SubagentTaskSnapshot<String>,
) -> PyResult<SubagentTask> {
    let mut failure = None;
    let metadata = snapshot
        .metadata
        .take()
        .map(|text| from_json_text(py, &text, true))
        .transpose()?;
    // Read-only, as metadata is.
    let progress_data = snapshot
        .progress_log
        .iter_mut()
        .map(|entry| {
            entry
                .data
                .take()
                .map(|text| from_json_text(py, &text, true))
                .transpose()
        })
        .collect::<PyResult<Vec<_>>>()?;
    let mut decoded = snapshot.map_values(|text| match from_json_text(py, &text, false) {
        Ok(value) => PyValue::new(value),
        Err(error) => {
            failure.get_or_insert(error);
            PyValue::new(py.None())
        }
    });
    decoded.metadata = metadata.map(PyValue::new);
    for (entry, data) in decoded.progress_log.iter_mut().zip(progress_data) {
        entry.data = data.map(PyValue::new);
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(SubagentTask::new(py, decoded)),
    }
}

fn snapshots(py: Python<'_>, listed: Vec<SubagentTaskSnapshot<String>>) -> PyResult<Py<PyAny>> {
    let converted = listed
        .into_iter()
        .map(|task| snapshot(py, task))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, converted)?.into_any().unbind())
}

/// A snapshot of one retained task (of run `run` alone, when given), or None.
fn get_task<'py>(
    py: Python<'py>,
    session: &CoreSession,
    made_in: MadeIn,
    delivery: Delivery,
    task_id: Arc<str>,
    run: Option<Arc<str>>,
) -> PyResult<Bound<'py, PyAny>> {
    let session = session.clone();
    delivery.call(
        py,
        made_in,
        async move {
            match run {
                Some(run) => session.get_run(&task_id, &run).await,
                None => session.get(&task_id).await,
            }
        },
        |py, task| match task {
            Some(task) => Ok(Py::new(py, snapshot(py, task)?)?.into_any()),
            None => Ok(py.None()),
        },
    )
}
