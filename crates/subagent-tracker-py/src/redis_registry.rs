//! `RedisRegistry` and `RedisSession`: sessions kept in Redis, shared by every process that connects to it.
//!
//! Each call blocks on the process's runtime with the interpreter released. Metadata and results cross
//! processes as JSON.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use subagent_tracker::{SubagentTaskSnapshot, TaskStart, TrackerConfig};
use subagent_tracker_redis::{
    RedisOptions, RedisRegistry as CoreRegistry, RedisSession as CoreSession,
};

use crate::arguments::{
    self, from_json_text, json_text, ClaimTimeoutArgument, EpochDeadline, Id, JsonMetadata,
    LeaseArgument, ParentIdArgument, ReconcileIntervalArgument, Seconds, SessionIdArgument,
    SessionTtlArgument, TaskIdArgument, TimeoutArgument, WorkerIdArgument,
};
use crate::errors::redis_error;
use crate::package_imports::{event_stream_class, spawn_function};
use crate::python_types::PyValue;
use crate::redis_events::RedisEventReader;
use crate::redis_handle::RedisTaskHandle;
use crate::runtime::{asyncio_future, block_on, MadeIn};
use crate::snapshot::SubagentTask;
use crate::token::Tokens;

/// Sessions kept in Redis; this process is one worker among those connected. Raises `ValueError` for what
/// retrying cannot fix (a URL that is not Redis's, a database the server lacks, a password it wants or refuses,
/// a key prefix used by other data, another build of the server functions).
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct RedisRegistry {
    registry: CoreRegistry,
    made_in: MadeIn,
}

/// A session kept in Redis, seen from this process: one incarnation of its id. Once that incarnation has ended,
/// its transitions, and its queries once its keys are gone, raise `SessionClosedError`. Metadata and results
/// cross processes as JSON: mappings with str keys, lists, tuples, str, int, float, bool or None.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct RedisSession {
    session: CoreSession,
    made_in: MadeIn,
}

#[pymethods]
impl RedisRegistry {
    #[new]
    // One parameter per Python keyword argument: the signature is the Python API.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        url, *, worker_id=None, lease=None, reconcile_interval=None, timeout=None, session_ttl=None,
        key_prefix=None
    ))]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        worker_id: Option<Id<WorkerIdArgument>>,
        lease: Option<Seconds<LeaseArgument>>,
        reconcile_interval: Option<Seconds<ReconcileIntervalArgument>>,
        timeout: Option<Seconds<TimeoutArgument>>,
        session_ttl: Option<Seconds<SessionTtlArgument>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<RedisRegistry> {
        let url = arguments::string(url, "url")?.to_str()?.to_owned();
        let mut options = RedisOptions::default();
        if let Some(worker_id) = worker_id {
            options = options.with_worker_id(&*worker_id.0);
        }
        if let Some(lease) = lease {
            options = options.with_lease(lease.0.max(Duration::from_millis(3)));
        }
        if let Some(interval) = reconcile_interval {
            options = options.with_reconcile_interval(interval.0.max(Duration::from_millis(1)));
        }
        if let Some(timeout) = timeout {
            options = options.with_timeout(timeout.0.max(Duration::from_millis(1)));
        }
        if let Some(session_ttl) = session_ttl {
            options = options.with_session_ttl(session_ttl.0);
        }
        if let Some(prefix) = arguments::optional_string(key_prefix, "key_prefix")? {
            options = options.with_key_prefix(prefix);
        }
        let made_in = MadeIn::here();
        let registry = block_on(py, made_in, CoreRegistry::connect(&url, options))?
            .map_err(|error| redis_error(py, error))?;
        Ok(RedisRegistry { registry, made_in })
    }

    /// This process's worker id.
    #[getter]
    fn worker_id(&self) -> &str {
        self.registry.worker_id()
    }

    /// The session `session_id`, created if no process has made it.
    #[pyo3(signature = (session_id=None, *, max_finished_tasks=None, event_buffer=None))]
    fn session(
        &self,
        py: Python<'_>,
        session_id: Option<Id<SessionIdArgument>>,
        max_finished_tasks: Option<&Bound<'_, PyAny>>,
        event_buffer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<RedisSession> {
        let config: TrackerConfig = arguments::tracker_config(max_finished_tasks, event_buffer)?;
        let session_id = session_id.map(|id| id.0);
        let session = block_on(
            py,
            self.made_in,
            self.registry.session(session_id.as_deref(), config),
        )?
        .map_err(|error| redis_error(py, error))?;
        Ok(RedisSession {
            session,
            made_in: self.made_in,
        })
    }

    /// The live session `session_id`, or None; never creates one.
    fn get_session(
        &self,
        py: Python<'_>,
        session_id: Id<SessionIdArgument>,
    ) -> PyResult<Option<RedisSession>> {
        let session = block_on(py, self.made_in, self.registry.get_session(&session_id.0))?
            .map_err(|error| redis_error(py, error))?;
        Ok(session.map(|session| RedisSession {
            session,
            made_in: self.made_in,
        }))
    }

    /// The ids of the live sessions.
    fn sessions(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        block_on(py, self.made_in, self.registry.sessions())?
            .map_err(|error| redis_error(py, error))
    }

    fn __repr__(&self) -> String {
        format!("RedisRegistry(worker_id={:?})", self.registry.worker_id())
    }
}

/// The description of a task to start or reserve, with its metadata as JSON.
#[allow(clippy::too_many_arguments)]
fn task_start(
    task_id: Option<Id<TaskIdArgument>>,
    parent_id: Option<Id<ParentIdArgument>>,
    agent: Option<&Bound<'_, PyAny>>,
    description: Option<&Bound<'_, PyAny>>,
    metadata: Option<&Bound<'_, PyAny>>,
    timeout: Option<Seconds<TimeoutArgument>>,
    deadline: Option<EpochDeadline>,
    detached: bool,
    linked: Option<Tokens>,
) -> PyResult<TaskStart<String>> {
    let metadata = metadata
        .filter(|metadata| !metadata.is_none())
        .map(|metadata| {
            metadata
                .extract::<JsonMetadata>()
                .map(|metadata| metadata.0)
        })
        .transpose()?;
    crate::session::task_start(
        task_id,
        parent_id,
        agent,
        description,
        metadata,
        timeout,
        deadline,
        detached,
        linked,
    )
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
    let mut decoded = snapshot.map_values(|text| match from_json_text(py, &text, false) {
        Ok(value) => PyValue::new(value),
        Err(error) => {
            failure.get_or_insert(error);
            PyValue::new(py.None())
        }
    });
    decoded.metadata = metadata.map(PyValue::new);
    match failure {
        Some(error) => Err(error),
        None => Ok(SubagentTask::new(py, decoded)),
    }
}

fn snapshots<'py>(
    py: Python<'py>,
    listed: Vec<SubagentTaskSnapshot<String>>,
) -> PyResult<Bound<'py, PyList>> {
    let converted = listed
        .into_iter()
        .map(|task| snapshot(py, task))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, converted)
}

#[pymethods]
impl RedisSession {
    #[getter]
    fn session_id(&self) -> &str {
        self.session.session_id()
    }

    /// Starts a task that this process runs, and returns the runner's handle.
    #[pyo3(signature = (
        task_id=None, *, parent_id=None, agent=None, description=None, metadata=None, timeout=None,
        deadline=None, detached=false, linked=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn start_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Option<Id<TaskIdArgument>>,
        parent_id: Option<Id<ParentIdArgument>>,
        agent: Option<&Bound<'_, PyAny>>,
        description: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        timeout: Option<Seconds<TimeoutArgument>>,
        deadline: Option<EpochDeadline>,
        detached: bool,
        linked: Option<Tokens>,
    ) -> PyResult<RedisTaskHandle> {
        let start = task_start(
            task_id,
            parent_id,
            agent,
            description,
            metadata,
            timeout,
            deadline,
            detached,
            linked,
        )?;
        let handle = block_on(py, self.made_in, self.session.start(start))?
            .map_err(|error| redis_error(py, error))?;
        RedisTaskHandle::new(handle, self.session.clone(), self.made_in)
    }

    /// Reserves a task for a runner in any process to claim, and returns its id.
    #[pyo3(signature = (
        task_id=None, *, parent_id=None, agent=None, description=None, metadata=None, timeout=None,
        deadline=None, detached=false, linked=None, claim_timeout=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn reserve_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Option<Id<TaskIdArgument>>,
        parent_id: Option<Id<ParentIdArgument>>,
        agent: Option<&Bound<'_, PyAny>>,
        description: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        timeout: Option<Seconds<TimeoutArgument>>,
        deadline: Option<EpochDeadline>,
        detached: bool,
        linked: Option<Tokens>,
        claim_timeout: Option<Seconds<ClaimTimeoutArgument>>,
    ) -> PyResult<String> {
        let start = task_start(
            task_id,
            parent_id,
            agent,
            description,
            metadata,
            timeout,
            deadline,
            detached,
            linked,
        )?;
        let task_id = block_on(
            py,
            self.made_in,
            self.session
                .reserve(start, claim_timeout.map(|timeout| timeout.0)),
        )?
        .map_err(|error| redis_error(py, error))?;
        Ok(task_id.to_string())
    }

    /// Claims a reserved task for a runner in this process.
    fn claim_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<RedisTaskHandle> {
        let handle = block_on(py, self.made_in, self.session.claim(&task_id.0))?
            .map_err(|error| redis_error(py, error))?;
        RedisTaskHandle::new(handle, self.session.clone(), self.made_in)
    }

    /// Cancels a pending task and its pending descendants, wherever they run.
    #[pyo3(signature = (task_id, reason=None))]
    fn cancel_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Id<TaskIdArgument>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let reason = arguments::optional_string(reason, "reason")?;
        block_on(
            py,
            self.made_in,
            self.session.cancel(&task_id.0, reason.as_deref()),
        )?
        .map_err(|error| redis_error(py, error))
    }

    /// Records the end of a task without its handle: `error` fails it, otherwise it completes with `result`.
    #[pyo3(signature = (task_id, *, result=None, error=None))]
    fn end_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Id<TaskIdArgument>,
        result: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let ended = arguments::end_outcome(result, error, |result| json_text(result, "result"))?;
        let outcome = match &ended {
            Ok(result) => Ok(result.as_deref()),
            Err(error) => Err(error.as_str()),
        };
        block_on(py, self.made_in, self.session.end(&task_id.0, outcome))?
            .map_err(|error| redis_error(py, error))
    }

    /// Cancels every pending task of the session; returns how many moved.
    #[pyo3(signature = (reason=None))]
    fn cancel(&self, py: Python<'_>, reason: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let reason = arguments::optional_string(reason, "reason")?;
        block_on(py, self.made_in, self.session.cancel_all(reason.as_deref()))?
            .map_err(|error| redis_error(py, error))
    }

    /// Cancels every pending task and refuses new starts, in every process.
    #[pyo3(signature = (reason=None))]
    fn close(&self, py: Python<'_>, reason: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let reason = arguments::optional_string(reason, "reason")?;
        block_on(py, self.made_in, self.session.close(reason.as_deref()))?
            .map_err(|error| redis_error(py, error))
    }

    /// A snapshot of one retained task, or None.
    fn subagent_task(
        &self,
        py: Python<'_>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<Option<SubagentTask>> {
        block_on(py, self.made_in, self.session.get(&task_id.0))?
            .map_err(|error| redis_error(py, error))?
            .map(|task| snapshot(py, task))
            .transpose()
    }

    /// Snapshots of every retained task, in start order.
    fn subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let listed = block_on(py, self.made_in, self.session.tasks())?
            .map_err(|error| redis_error(py, error))?;
        snapshots(py, listed)
    }

    /// Snapshots of the pending tasks, in start order.
    fn pending_subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let listed = block_on(py, self.made_in, self.session.pending())?
            .map_err(|error| redis_error(py, error))?;
        snapshots(py, listed)
    }

    /// Waits until the task has finished, in whatever process it runs, and returns its final snapshot; raises
    /// `TimeoutError` if `timeout` seconds pass first and `UnknownTaskError` for an unknown id.
    #[pyo3(signature = (task_id, timeout=None))]
    fn wait_subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        timeout: Option<Seconds<TimeoutArgument>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        let timeout = timeout.map(|timeout| timeout.0);
        let wait = async move {
            let finished = session.wait_finished(&task_id.0);
            match timeout {
                Some(timeout) => tokio::time::timeout(timeout, finished)
                    .await
                    .map_err(|_| (task_id.0.clone(), timeout)),
                None => Ok(finished.await),
            }
        };
        asyncio_future(py, self.made_in, wait, |py, outcome| match outcome {
            Ok(Ok(task)) => Ok(Py::new(py, snapshot(py, task)?)?.into_any()),
            Ok(Err(error)) => Err(redis_error(py, error)),
            Err((task_id, timeout)) => Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                "task {task_id:?} did not finish within {} seconds; its runner is still running",
                timeout.as_secs_f64()
            ))),
        })
    }

    /// Starts a task and runs `await function(handle)` as an asyncio task of the running loop, as
    /// `Session.spawn_subagent_task` does (the same code runs both).
    #[pyo3(signature = (*args, **kwargs))]
    fn spawn_subagent_task<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let mut arguments = vec![slf.as_any().clone()];
        arguments.extend(args.iter());
        let arguments = PyTuple::new(py, arguments)?;
        spawn_function(py)?.call(arguments, kwargs)
    }

    /// An async iterator of the session's lifecycle events from this call on, whichever process makes them:
    /// the `EventStream` that in-memory sessions hand out, reading from Redis.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let subscription = block_on(py, self.made_in, self.session.subscribe())?
            .map_err(|error| redis_error(py, error))?;
        let reader = RedisEventReader::start(subscription, self.made_in)?;
        event_stream_class(py)?.call1((reader,))
    }

    /// Two `RedisSession` objects are equal when they are the same incarnation of a session seen through the
    /// same registry.
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<RedisSession>()
            .is_ok_and(|other| other.get().session.same_session(&self.session))
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.session.session_id().hash(&mut hasher);
        hasher.finish()
    }

    fn __repr__(&self) -> String {
        format!(
            "RedisSession(session_id={:?})",
            &**self.session.session_id()
        )
    }
}
