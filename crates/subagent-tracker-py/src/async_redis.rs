//! `AsyncRedisRegistry`, `AsyncRedisSession` and `AsyncRedisTaskHandle`: the asyncio twins of the Redis classes,
//! as `redis.asyncio` is redis-py's. Each call that touches the network returns an awaitable at once and never
//! blocks the event loop; its semantics and errors are the blocking twin's.
//!
//! Cancelling the coroutine that awaits a call abandons the wait, never the call: the call runs to its end on
//! the runtime, so no transition is left half made. A start or claim whose awaiter was cancelled leaves a
//! handle that nobody received; it is dropped, which ends the task as any dropped handle does (`FAILED` with
//! `DROPPED_HANDLE_ERROR`, or finished if it was cancelled meanwhile). Waits stop.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use subagent_tracker::TrackerConfig;
use subagent_tracker_redis::RedisRegistry as CoreRegistry;

use crate::arguments::{
    self, ClaimTimeoutArgument, EarlyCancelTtlArgument, EpochDeadline, Id, LeaseArgument,
    MaxFinishedAgeArgument, OlderThanArgument, ParentIdArgument, ReconcileIntervalArgument,
    Seconds, SessionIdArgument, SessionTtlArgument, TaskIdArgument, TimeoutArgument,
    WorkerIdArgument,
};
use crate::batch_arguments::batch_starts;
use crate::end_arguments::batch_ends;
use crate::errors::redis_error;
use crate::event_arguments::recorded_event;
use crate::filter_arguments::FilterArguments;
use crate::package_imports::{deferred_function, pause_function, snapshots_function};
use crate::ready::Ready;
use crate::redis_calls::{Delivery, HandleCalls, RegistryCalls, SessionCalls, Waiting};
use crate::redis_handle::handle_repr;
use crate::redis_registry::{connect_options, session_hash, spawn, BLOCKING};
use crate::runner_exit::runner_exit;
use crate::runtime::MadeIn;
use crate::snapshot_arguments::restored_snapshots;
use crate::start_arguments::StartArguments;
use crate::token::{CancellationToken, Tokens};

/// The asyncio family: calls return asyncio futures, and sessions and handles are `AsyncRedisSession` and
/// `AsyncRedisTaskHandle`.
const ASYNCIO: Delivery = Delivery {
    waiting: Waiting::Asyncio,
    session_class: asyncio_session,
    handle_class: asyncio_handle,
};

fn asyncio_session(py: Python<'_>, calls: SessionCalls) -> PyResult<Py<PyAny>> {
    Py::new(py, AsyncRedisSession::new(calls)).map(Py::into_any)
}

fn asyncio_handle(py: Python<'_>, calls: HandleCalls) -> PyResult<Py<PyAny>> {
    Py::new(py, AsyncRedisTaskHandle::new(calls)).map(Py::into_any)
}

/// Sessions kept in Redis, for asyncio programs: `registry = await AsyncRedisRegistry.connect(url, ...)`, with
/// the options of `RedisRegistry`. This process is one worker among those connected, and may also hold a
/// `RedisRegistry` for its threads.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct AsyncRedisRegistry {
    calls: RegistryCalls,
}

/// A session kept in Redis, for asyncio programs: the `RedisSession` whose calls are awaited.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct AsyncRedisSession {
    calls: SessionCalls,
}

impl AsyncRedisSession {
    pub(crate) fn new(calls: SessionCalls) -> AsyncRedisSession {
        AsyncRedisSession { calls }
    }
}

/// Held by the code that runs a task kept in Redis, in an asyncio program: `async with handle:` ends the task
/// from how the block exits, and its reports are awaited.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct AsyncRedisTaskHandle {
    calls: HandleCalls,
}

impl AsyncRedisTaskHandle {
    pub(crate) fn new(calls: HandleCalls) -> AsyncRedisTaskHandle {
        AsyncRedisTaskHandle { calls }
    }
}

#[pymethods]
impl AsyncRedisRegistry {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        Err(PyTypeError::new_err(
            "connecting to Redis is awaited: use `await AsyncRedisRegistry.connect(url, ...)`",
        ))
    }

    /// Connects to Redis; the coroutine gives the registry. Bad arguments raise at the call, as for
    /// `RedisRegistry(...)`; the connection starts once the coroutine is awaited, so no loop need run at the
    /// call (`asyncio.run(AsyncRedisRegistry.connect(url))` works).
    #[staticmethod]
    // One parameter per Python keyword argument: the signature is the Python API.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        url, *, worker_id=None, lease=None, reconcile_interval=None, timeout=None, session_ttl=None,
        key_prefix=None, cluster=None, wait_for_replicas=None, allow_eviction=None
    ))]
    fn connect<'py>(
        py: Python<'py>,
        url: &Bound<'_, PyAny>,
        worker_id: Option<Id<WorkerIdArgument>>,
        lease: Option<Seconds<LeaseArgument>>,
        reconcile_interval: Option<Seconds<ReconcileIntervalArgument>>,
        timeout: Option<Seconds<TimeoutArgument>>,
        session_ttl: Option<Seconds<SessionTtlArgument>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        cluster: Option<bool>,
        wait_for_replicas: Option<&Bound<'_, PyAny>>,
        allow_eviction: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (url, options) = connect_options(
            url,
            worker_id,
            lease,
            reconcile_interval,
            timeout,
            session_ttl,
            key_prefix,
            cluster,
            wait_for_replicas,
            allow_eviction,
        )?;
        let start = PyCFunction::new_closure(py, None, None, move |arguments, _| {
            let py = arguments.py();
            let (url, options) = (url.clone(), options.clone());
            let made_in = MadeIn::here();
            ASYNCIO
                .deliver(
                    py,
                    made_in,
                    async move { CoreRegistry::connect(&url, options).await },
                    move |py, registry| {
                        let registry = registry.map_err(|error| redis_error(py, error))?;
                        let calls = RegistryCalls {
                            registry,
                            made_in,
                            delivery: ASYNCIO,
                        };
                        Ok(Py::new(py, AsyncRedisRegistry { calls })?.into_any())
                    },
                )
                .map(Bound::unbind)
        })?;
        deferred_function(py)?.call1((start,))
    }

    /// This process's worker id.
    #[getter]
    fn worker_id(&self) -> &str {
        self.calls.registry.worker_id()
    }

    /// The session `session_id`, created if no process has made it.
    // One parameter per Python keyword argument: the signature is the Python API.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (session_id=None, *, max_finished_tasks=None, event_buffer=None, max_finished_age=None, early_cancel_ttl=None, progress_log_size=None))]
    fn session<'py>(
        &self,
        py: Python<'py>,
        session_id: Option<Id<SessionIdArgument>>,
        max_finished_tasks: Option<&Bound<'_, PyAny>>,
        event_buffer: Option<&Bound<'_, PyAny>>,
        max_finished_age: Option<Seconds<MaxFinishedAgeArgument>>,
        early_cancel_ttl: Option<Seconds<EarlyCancelTtlArgument>>,
        progress_log_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let config: TrackerConfig = arguments::tracker_config(
            max_finished_tasks,
            event_buffer,
            max_finished_age,
            early_cancel_ttl,
            progress_log_size,
        )?;
        self.calls
            .session(py, session_id.map(|id| id.0.to_string()), config)
    }

    /// The live session `session_id`, or None; never creates one.
    fn get_session<'py>(
        &self,
        py: Python<'py>,
        session_id: Id<SessionIdArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.get_session(py, session_id.0.to_string())
    }

    /// The ids of the live sessions.
    fn sessions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.sessions(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "AsyncRedisRegistry(worker_id={:?})",
            self.calls.registry.worker_id()
        )
    }
}

#[pymethods]
impl AsyncRedisSession {
    #[getter]
    fn session_id(&self) -> &str {
        self.calls.session_id()
    }

    /// Starts a task that this process runs, and returns the runner's handle.
    #[pyo3(signature = (
        task_id=None, *, parent_id=None, agent=None, description=None, metadata=None, timeout=None,
        deadline=None, detached=false, structured=false, linked=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn start_subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Option<Id<TaskIdArgument>>,
        parent_id: Option<Id<ParentIdArgument>>,
        agent: Option<&Bound<'_, PyAny>>,
        description: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        timeout: Option<Seconds<TimeoutArgument>>,
        deadline: Option<EpochDeadline>,
        detached: bool,
        structured: bool,
        linked: Option<Tokens>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (start, _) = StartArguments {
            task_id,
            parent_id,
            agent: agent.cloned(),
            description: description.cloned(),
            metadata: metadata.cloned(),
            timeout,
            deadline,
            detached,
            structured,
            linked,
            claim_timeout: None,
        }
        .into_start()?;
        self.calls.start(py, start)
    }

    /// Reserves a task for a runner in any process to claim, and returns its id.
    #[pyo3(signature = (
        task_id=None, *, parent_id=None, agent=None, description=None, metadata=None, timeout=None,
        deadline=None, detached=false, structured=false, linked=None, claim_timeout=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn reserve_subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Option<Id<TaskIdArgument>>,
        parent_id: Option<Id<ParentIdArgument>>,
        agent: Option<&Bound<'_, PyAny>>,
        description: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        timeout: Option<Seconds<TimeoutArgument>>,
        deadline: Option<EpochDeadline>,
        detached: bool,
        structured: bool,
        linked: Option<Tokens>,
        claim_timeout: Option<Seconds<ClaimTimeoutArgument>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (start, claim_timeout) = StartArguments {
            task_id,
            parent_id,
            agent: agent.cloned(),
            description: description.cloned(),
            metadata: metadata.cloned(),
            timeout,
            deadline,
            detached,
            structured,
            linked,
            claim_timeout,
        }
        .into_start()?;
        self.calls.reserve(py, start, claim_timeout)
    }

    /// Starts every task of `tasks` (mappings of `start_subagent_task`'s keyword arguments), or none (contract
    /// §22: one call up to 32 tasks, checked and then opened in parts beyond), and returns their handles in order.
    /// A task may name as parent one earlier in the batch.
    fn start_subagent_tasks<'py>(
        &self,
        py: Python<'py>,
        tasks: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let starts = batch_starts::<String>(tasks, false)?
            .into_iter()
            .map(|(start, _)| start)
            .collect();
        self.calls.start_batch(py, starts)
    }

    /// Reserves every task of `tasks` (mappings of `reserve_subagent_task`'s keyword arguments), or none, as
    /// `start_subagent_tasks` starts them, and returns their ids in order; a task without a `claim_timeout` takes
    /// the call's.
    #[pyo3(signature = (tasks, *, claim_timeout=None))]
    fn reserve_subagent_tasks<'py>(
        &self,
        py: Python<'py>,
        tasks: &Bound<'_, PyAny>,
        claim_timeout: Option<Seconds<ClaimTimeoutArgument>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let default = claim_timeout.map(|seconds| seconds.0);
        let reservations = batch_starts::<String>(tasks, true)?
            .into_iter()
            .map(|(start, own)| (start, own.or(default)))
            .collect();
        self.calls.reserve_batch(py, reservations)
    }

    /// Claims a reserved task for a runner in this process.
    fn claim_subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.claim(py, task_id)
    }

    /// Cancels a pending task and its pending descendants, wherever they run. With `before_start=True` and no
    /// pending task of that id, the cancel is recorded instead: the next start or reservation of the id begins
    /// cancelled.
    #[pyo3(signature = (task_id, reason=None, *, before_start=false))]
    fn cancel_subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        reason: Option<&Bound<'_, PyAny>>,
        before_start: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reason = arguments::optional_string(reason, "reason")?;
        self.calls.cancel_task(py, task_id, reason, before_start)
    }

    /// Fills the session with the tasks `export_snapshots()` exported, as `Session.restore_snapshots` does, in
    /// one call to Redis.
    fn restore_snapshots<'py>(
        &self,
        py: Python<'py>,
        snapshots: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session_id: std::sync::Arc<str> = std::sync::Arc::from(self.calls.session_id());
        self.calls
            .restore(py, restored_snapshots::<String>(snapshots, &session_id)?)
    }

    /// The session's tasks as JSON-serialisable mappings, in start order, for `restore_snapshots`.
    fn export_snapshots<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        snapshots_function(slf.py(), "export_snapshots_async")?.call1((slf,))
    }

    /// Records one event of another runtime's stream, as `Session.record_event` does; a task it starts names no
    /// worker process, so its end comes as an event, from any process.
    fn record_event<'py>(
        &self,
        py: Python<'py>,
        event: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls
            .record_event(py, recorded_event::<String>(event)?)
    }

    /// Resumes the task `task_id`, which its runner paused, handing the runner `value` (JSON-serialisable)
    /// wherever it runs. True exactly when this call resumed it: false for an unknown id or a task not paused.
    #[pyo3(signature = (task_id, value=None))]
    fn resume_subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        value: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = value
            .filter(|value| !value.is_none())
            .map(|value| arguments::json_text(value, "value"))
            .transpose()?;
        self.calls.resume_task(py, task_id, value)
    }

    /// Ends every task of `ends` (mappings naming a task by `handle` or `task_id`, with `end_subagent_task`'s
    /// keyword arguments) in one round trip, in order and each on its own; gives per end whether it moved its
    /// task.
    fn end_subagent_tasks<'py>(
        &self,
        py: Python<'py>,
        ends: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ends = batch_ends(
            ends,
            |handle| {
                let handle = handle.cast::<AsyncRedisTaskHandle>().ok()?;
                Some(handle.get().calls.batch_handle())
            },
            "an AsyncRedisTaskHandle",
            |result| arguments::json_text(result, "result"),
        )?;
        self.calls.end_batch(py, ends)
    }

    /// Records the end of a task without its handle: `error` fails it (with `error_type` and `error_code`, if
    /// given), otherwise it completes with `result`.
    #[pyo3(signature = (task_id, *, result=None, error=None, error_type=None, error_code=None))]
    fn end_subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        result: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        error_type: Option<&Bound<'_, PyAny>>,
        error_code: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ended = arguments::end_outcome(result, error, error_type, error_code, |result| {
            arguments::json_text(result, "result")
        })?;
        self.calls.end_task(py, task_id, ended)
    }

    /// Cancels the pending tasks that match every filter given (`metadata`: a mapping whose every key the
    /// task's metadata holds with an equal JSON value), each with its pending descendants, wherever they run;
    /// returns the ids of the matching tasks it moved to cancelled, in start order.
    #[pyo3(signature = (*, agent=None, status=None, metadata=None, reason=None))]
    fn cancel_subagent_tasks<'py>(
        &self,
        py: Python<'py>,
        agent: Option<&Bound<'py, PyAny>>,
        status: Option<&Bound<'py, PyAny>>,
        metadata: Option<&Bound<'py, PyAny>>,
        reason: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = FilterArguments::new(agent, status, metadata, reason)?;
        self.calls.cancel_matching(py, &arguments)
    }

    /// Cancels every pending task of the session; returns how many moved.
    #[pyo3(signature = (reason=None))]
    fn cancel<'py>(
        &self,
        py: Python<'py>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reason = arguments::optional_string(reason, "reason")?;
        self.calls.cancel_all(py, reason)
    }

    /// Cancels every pending task and refuses new starts, in every process.
    #[pyo3(signature = (reason=None))]
    fn close<'py>(
        &self,
        py: Python<'py>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reason = arguments::optional_string(reason, "reason")?;
        self.calls.close(py, reason)
    }

    /// How many finished tasks the session keeps (a session that existed keeps its own bound). Fixed for
    /// the incarnation: reading it never touches the network.
    #[getter]
    fn max_finished_tasks(&self) -> usize {
        self.calls.max_finished_tasks()
    }

    /// An awaitable of whether the session is closed, by any process, or its incarnation has ended.
    fn is_closed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.is_closed(py)
    }

    /// The cancellation token of the retained task `task_id`, wherever it runs: it fires in this process when
    /// the task is cancelled; raises `UnknownTaskError` when no such task is retained.
    fn token<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.token(py, task_id)
    }

    /// A snapshot of one retained task, or None.
    fn subagent_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.task(py, task_id)
    }

    /// Snapshots of every retained task, in start order.
    fn subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.tasks(py)
    }

    /// One page of the session's retained tasks (with `pending`, of its pending tasks), at most `limit` (and
    /// at most 100) from `cursor` (None for the first page): the tasks, and the cursor of the next page (None
    /// once done). Unfinished tasks come in start order, then finished ones in the order they finished.
    #[pyo3(signature = (cursor=None, *, limit=None, pending=false))]
    fn subagent_tasks_page<'py>(
        &self,
        py: Python<'py>,
        cursor: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        pending: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cursor = arguments::optional_string(cursor, "cursor")?;
        self.calls
            .tasks_page(py, pending, cursor, arguments::page_limit(limit)?)
    }

    /// Forgets the finished tasks that ended at least `older_than` seconds ago, as the bound on finished tasks
    /// evicts them, and returns how many it forgot. Pending tasks are never forgotten.
    fn forget_finished<'py>(
        &self,
        py: Python<'py>,
        older_than: Seconds<OlderThanArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.forget_finished(py, older_than.0)
    }

    /// Snapshots of the pending tasks, in start order.
    fn pending_subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.pending(py)
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
        self.calls
            .wait_task(py, task_id, timeout.map(|timeout| timeout.0))
    }

    /// Cancels the task as `cancel_subagent_task` does, then waits until its runner has ended and every
    /// `on_cancel` handler of the task and of its descendants, in whichever process runs them, has finished;
    /// an asyncio future of the final snapshot. `TimeoutError` names what still runs.
    #[pyo3(signature = (task_id, reason=None, *, timeout=None))]
    fn cancel_subagent_task_and_wait<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        reason: Option<&Bound<'_, PyAny>>,
        timeout: Option<Seconds<TimeoutArgument>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reason = arguments::optional_string(reason, "reason")?;
        self.calls
            .cancel_and_wait_task(py, task_id, reason, timeout.map(|timeout| timeout.0))
    }

    /// Starts a task, then runs `await function(handle)` as an asyncio task of the running loop, as
    /// `Session.spawn_subagent_task` does; awaiting this call gives the `SpawnedSubagent` once the task has
    /// started.
    #[pyo3(signature = (*args, **kwargs))]
    fn spawn_subagent_task<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        spawn(slf.as_any(), args, kwargs, "_spawn_subagent_task_async")
    }

    /// An async iterator of the session's lifecycle events from the subscription on, whichever process makes
    /// them: awaiting this call subscribes and gives the `EventStream` that in-memory sessions hand out.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.events(py)
    }

    /// The same session with calls that block: for the few steps a framework makes synchronous (entering a
    /// streamed run that its API returns at once). Shares this session's connection.
    fn _blocking(&self) -> crate::redis_registry::RedisSession {
        crate::redis_registry::RedisSession::new(self.calls.with_delivery(BLOCKING))
    }

    /// Two `AsyncRedisSession` objects are equal when they are the same incarnation of a session seen through the
    /// same registry.
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<AsyncRedisSession>()
            .is_ok_and(|other| other.get().calls.same_session(&self.calls))
    }

    fn __hash__(&self) -> u64 {
        session_hash(&self.calls)
    }

    fn __repr__(&self) -> String {
        format!(
            "AsyncRedisSession(session_id={:?})",
            self.calls.session_id()
        )
    }
}

#[pymethods]
impl AsyncRedisTaskHandle {
    #[getter]
    fn task_id(&self) -> &str {
        &self.calls.task_id
    }

    #[getter]
    fn session_id(&self) -> &str {
        &self.calls.session_id
    }

    #[getter]
    fn token(&self, py: Python<'_>) -> Py<CancellationToken> {
        self.calls.token.clone_ref(py)
    }

    #[pyo3(signature = (message, *, data=None))]
    fn progress<'py>(
        &self,
        py: Python<'py>,
        message: &Bound<'_, PyAny>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.progress(py, message, data)
    }

    #[pyo3(signature = (result=None))]
    fn complete<'py>(
        &self,
        py: Python<'py>,
        result: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.complete(py, result)
    }

    /// Reports failure with a message or an exception, and the failure's type and code if given (an exception's
    /// type defaults to its class name).
    #[pyo3(signature = (error, *, error_type=None, error_code=None))]
    fn fail<'py>(
        &self,
        py: Python<'py>,
        error: &Bound<'_, PyAny>,
        error_type: Option<&Bound<'_, PyAny>>,
        error_code: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.fail(py, error, error_type, error_code)
    }

    /// Pauses the running task (to wait for a person's approval, say), in Redis for every process and here for
    /// the runner; snapshots show `reason` as `pause_reason`. False if the task is not running.
    #[pyo3(signature = (reason=None))]
    fn pause<'py>(
        &self,
        py: Python<'py>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reason = arguments::optional_string(reason, "reason")?;
        self.calls.pause(py, reason)
    }

    /// `await handle.resumed()`: waits while the task is paused and returns the value the session resumed it
    /// with, from any process; raises `TaskCancelledError` if the task is cancelled while paused.
    fn resumed<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        pause_function(slf.py(), "resumed")?.call1((slf,))
    }

    /// The blocking form of `resumed()`, for threads; raises `TimeoutError` if `timeout` seconds pass first.
    #[pyo3(signature = (timeout=None))]
    fn wait_resumed<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        pause_function(slf.py(), "wait_resumed")?.call1((slf, timeout))
    }

    fn _resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.calls.resume_future(py)
    }

    #[pyo3(signature = (timeout))]
    fn _wait_for_resume(
        &self,
        py: Python<'_>,
        timeout: Option<Seconds<TimeoutArgument>>,
    ) -> PyResult<bool> {
        self.calls
            .wait_for_resume(py, timeout.map(|timeout| timeout.0))
    }

    fn _resumption(&self, py: Python<'_>) -> PyResult<(&'static str, Py<PyAny>)> {
        self.calls.resumption(py)
    }

    /// Records that the runner did not stop within its grace period after a cancel and is being stopped by
    /// force; snapshots show it as `escalated`.
    fn record_escalation<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.record_escalation(py)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.snapshot(py)
    }

    fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Ready>> {
        Ready::entered(py, slf.into_any())
    }

    /// Ends the task from how the block exits, as the blocking handle's `with` does; the exception, if any,
    /// propagates.
    #[pyo3(signature = (_exception_type, exception, _traceback))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exception_type: &Bound<'_, PyAny>,
        exception: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.calls.exit(py, runner_exit(py, exception)?)
    }

    fn __traverse__(&self, visit: pyo3::gc::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.calls.token)
    }

    fn __repr__(&self) -> String {
        handle_repr("AsyncRedisTaskHandle", &self.calls)
    }
}
