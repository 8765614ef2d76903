//! `RedisRegistry` and `RedisSession`: sessions kept in Redis, shared by every process that connects to it, with
//! calls that block the calling thread (with the interpreter released). `AsyncRedisRegistry` is the asyncio
//! twin.
//!
//! Metadata and results cross processes as JSON.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use subagent_tracker::TrackerConfig;
use subagent_tracker_redis::{RedisOptions, RedisRegistry as CoreRegistry};

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
use crate::package_imports::{snapshots_function, spawn_function};
use crate::redis_calls::{Delivery, HandleCalls, RegistryCalls, SessionCalls, Waiting};
use crate::redis_handle::RedisTaskHandle;
use crate::runtime::{block_on_interruptibly, MadeIn};
use crate::snapshot_arguments::restored_snapshots;
use crate::start_arguments::StartArguments;
use crate::token::Tokens;

/// The blocking family: the calling thread waits, and sessions and handles are `RedisSession` and
/// `RedisTaskHandle`.
pub(crate) const BLOCKING: Delivery = Delivery {
    waiting: Waiting::Blocking,
    session_class: blocking_session,
    handle_class: blocking_handle,
};

fn blocking_session(py: Python<'_>, calls: SessionCalls) -> PyResult<Py<PyAny>> {
    Py::new(py, RedisSession::new(calls)).map(Py::into_any)
}

fn blocking_handle(py: Python<'_>, calls: HandleCalls) -> PyResult<Py<PyAny>> {
    Py::new(py, RedisTaskHandle::new(calls)).map(Py::into_any)
}

/// Sessions kept in Redis; this process is one worker among those connected. Raises `ValueError` for what
/// retrying cannot fix (a lease shorter than 3 ms, a reconcile interval or timeout shorter than 1 ms, a URL that
/// is not Redis's, a database the server lacks, a password it wants or refuses, a key prefix used by other data,
/// another build of the server functions).
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct RedisRegistry {
    calls: RegistryCalls,
}

/// A session kept in Redis, seen from this process: one incarnation of its id. Once that incarnation has ended,
/// its transitions, and its queries once its keys are gone, raise `SessionClosedError`. Metadata and results
/// cross processes as JSON: mappings with str keys, lists, tuples, str, int, float, bool or None.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct RedisSession {
    calls: SessionCalls,
}

impl RedisSession {
    pub(crate) fn new(calls: SessionCalls) -> RedisSession {
        RedisSession { calls }
    }
}

/// The URL and options of a registry, from `RedisRegistry`'s keyword arguments.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_options(
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
) -> PyResult<(String, RedisOptions)> {
    let url = arguments::text(&arguments::string(url, "url")?, "url")?.to_owned();
    let mut options = RedisOptions::default();
    if let Some(worker_id) = worker_id {
        options = options.with_worker_id(&*worker_id.0);
    }
    if let Some(lease) = lease {
        options = options.with_lease(lease.0);
    }
    if let Some(interval) = reconcile_interval {
        options = options.with_reconcile_interval(interval.0);
    }
    if let Some(timeout) = timeout {
        options = options.with_timeout(timeout.0);
    }
    if let Some(session_ttl) = session_ttl {
        options = options.with_session_ttl(session_ttl.0);
    }
    if let Some(prefix) = arguments::optional_string(key_prefix, "key_prefix")? {
        options = options.with_key_prefix(prefix);
    }
    if let Some(replicas) = wait_for_replicas {
        options = options.with_wait_for_replicas(arguments::count(replicas, "wait_for_replicas")?);
    }
    if let Some(cluster) = cluster {
        options = options.with_cluster(cluster);
    }
    if let Some(allowed) = allow_eviction {
        options = options.with_eviction_allowed(allowed);
    }
    Ok((url, options))
}

#[pymethods]
impl RedisRegistry {
    #[new]
    // One parameter per Python keyword argument: the signature is the Python API.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        url, *, worker_id=None, lease=None, reconcile_interval=None, timeout=None, session_ttl=None,
        key_prefix=None, cluster=None, wait_for_replicas=None, allow_eviction=None
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
        cluster: Option<bool>,
        wait_for_replicas: Option<&Bound<'_, PyAny>>,
        allow_eviction: Option<bool>,
    ) -> PyResult<RedisRegistry> {
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
        let made_in = MadeIn::here();
        // Connecting waits up to the timeout (and the check of the URL's scheme): Ctrl-C stops the wait.
        let connecting = async move { CoreRegistry::connect(&url, options).await };
        let registry = block_on_interruptibly(py, made_in, connecting)?
            .map_err(|error| redis_error(py, error))?;
        Ok(RedisRegistry {
            calls: RegistryCalls {
                registry,
                made_in,
                delivery: BLOCKING,
            },
        })
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
            "RedisRegistry(worker_id={:?})",
            self.calls.registry.worker_id()
        )
    }
}

#[pymethods]
impl RedisSession {
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
        snapshots_function(slf.py(), "export_snapshots")?.call1((slf,))
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
                let handle = handle.cast::<RedisTaskHandle>().ok()?;
                Some(handle.get().calls().batch_handle())
            },
            "a RedisTaskHandle",
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

    /// Whether the session is closed, by any process, or its incarnation has ended. One round trip.
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

    /// Starts a task and runs `await function(handle)` as an asyncio task of the running loop, as
    /// `Session.spawn_subagent_task` does (the same code runs both).
    #[pyo3(signature = (*args, **kwargs))]
    fn spawn_subagent_task<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        spawn(slf.as_any(), args, kwargs, "_spawn_subagent_task")
    }

    /// An async iterator of the session's lifecycle events from this call on, whichever process makes them:
    /// the `EventStream` that in-memory sessions hand out, reading from Redis.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.calls.events(py)
    }

    /// Two `RedisSession` objects are equal when they are the same incarnation of a session seen through the
    /// same registry.
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<RedisSession>()
            .is_ok_and(|other| other.get().calls.same_session(&self.calls))
    }

    fn __hash__(&self) -> u64 {
        session_hash(&self.calls)
    }

    fn __repr__(&self) -> String {
        format!("RedisSession(session_id={:?})", self.calls.session_id())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving `with session:` closes nothing: other processes share the session, so only `close()` closes
    /// it, for all of them.
    #[pyo3(signature = (_exception_type, _exception, _traceback))]
    fn __exit__(
        &self,
        _exception_type: &Bound<'_, PyAny>,
        _exception: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> bool {
        false
    }
}

/// `function(session, *args, **kwargs)`, a spawn function of `subagent_tracker._session` that both kinds of
/// session share with in-memory ones.
pub(crate) fn spawn<'py>(
    session: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
    function: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let py = session.py();
    let mut arguments = vec![session.clone()];
    arguments.extend(args.iter());
    let arguments = PyTuple::new(py, arguments)?;
    spawn_function(py, function)?.call(arguments, kwargs)
}

/// A session's hash: its id's (equal sessions share an id).
pub(crate) fn session_hash(calls: &SessionCalls) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    calls.session_id().hash(&mut hasher);
    hasher.finish()
}
