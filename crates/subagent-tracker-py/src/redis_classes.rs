//! The Python classes of a family of Redis classes, declared once: [`redis_classes!`] writes a registry, a session
//! and a runner's handle for one [`Delivery`], and the blocking family (`redis_registry`) and the asyncio family
//! (`async_redis`) each instantiate it with their class names and the few methods that differ between them. Every
//! method here only reads its arguments and hands them to `redis_calls`, which decides what the call does.

use std::hash::{Hash, Hasher};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::arguments::{
    self, Id, LeaseArgument, ReconcileIntervalArgument, Seconds, SessionTtlArgument,
    TimeoutArgument, WorkerIdArgument,
};
use crate::package_imports::spawn_function;
use crate::python_types::python_repr;
use crate::redis_calls::{HandleCalls, SessionCalls};
use subagent_tracker_redis::RedisOptions;

/// Declares `$registry`, `$session` and `$handle`, the classes of one family, and `$delivery`, the
/// [`Delivery`](crate::redis_calls::Delivery) that makes its sessions and handles. `$export` and `$spawn` name the
/// package functions that export snapshots and spawn a task for this family; `$handle_description` is how
/// `end_subagent_tasks` names the handle it expects. Each `{ ... }` block adds the methods only that class of the
/// family has (the registry's constructor, `with`, `async with`).
macro_rules! redis_classes {
    (
        delivery: $delivery:ident = $waiting:expr;
        $(#[$registry_meta:meta])* registry $registry:ident { $($registry_methods:tt)* }
        $(#[$session_meta:meta])* session $session:ident {
            export: $export:literal, spawn: $spawn:literal, handle_description: $handle_description:literal;
            $($session_methods:tt)*
        }
        $(#[$handle_meta:meta])* handle $handle:ident { $($handle_methods:tt)* }
    ) => {
        /// How this family hands back the outcome of a call, and which of its classes wrap sessions and handles.
        pub(crate) const $delivery: $crate::redis_calls::Delivery = $crate::redis_calls::Delivery {
            waiting: $waiting,
            session_class: $session::into_object,
            handle_class: $handle::into_object,
        };

        $(#[$registry_meta])*
        #[pyclass(frozen, module = "subagent_tracker._native")]
        pub(crate) struct $registry {
            calls: $crate::redis_calls::RegistryCalls,
        }

        $(#[$session_meta])*
        #[pyclass(frozen, module = "subagent_tracker._native")]
        pub(crate) struct $session {
            calls: $crate::redis_calls::SessionCalls,
        }

        impl $session {
            pub(crate) fn new(calls: $crate::redis_calls::SessionCalls) -> $session {
                $session { calls }
            }

            fn into_object(
                py: Python<'_>,
                calls: $crate::redis_calls::SessionCalls,
            ) -> PyResult<Py<PyAny>> {
                Py::new(py, $session::new(calls)).map(Py::into_any)
            }
        }

        $(#[$handle_meta])*
        #[pyclass(frozen, module = "subagent_tracker._native")]
        pub(crate) struct $handle {
            calls: $crate::redis_calls::HandleCalls,
        }

        impl $handle {
            fn into_object(
                py: Python<'_>,
                calls: $crate::redis_calls::HandleCalls,
            ) -> PyResult<Py<PyAny>> {
                Py::new(py, $handle { calls }).map(Py::into_any)
            }
        }

        #[pymethods]
        impl $registry {
            $($registry_methods)*

            /// This process's worker id.
            #[getter]
            fn worker_id(&self) -> &str {
                self.calls.registry.worker_id()
            }

            /// The session `session_id`, created if no process has made it.
            // One parameter per Python keyword argument: the signature is the Python API.
            #[allow(clippy::too_many_arguments)]
            #[pyo3(signature = (
                session_id=None, *, max_finished_tasks=None, event_buffer=None, max_finished_age=None,
                early_cancel_ttl=None, progress_log_size=None
            ))]
            fn session<'py>(
                &self,
                py: Python<'py>,
                session_id: Option<$crate::arguments::Id<$crate::arguments::SessionIdArgument>>,
                max_finished_tasks: Option<&Bound<'_, PyAny>>,
                event_buffer: Option<&Bound<'_, PyAny>>,
                max_finished_age: Option<
                    $crate::arguments::Seconds<$crate::arguments::MaxFinishedAgeArgument>,
                >,
                early_cancel_ttl: Option<
                    $crate::arguments::Seconds<$crate::arguments::EarlyCancelTtlArgument>,
                >,
                progress_log_size: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let config = $crate::arguments::tracker_config(
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
                session_id: $crate::arguments::Id<$crate::arguments::SessionIdArgument>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.get_session(py, session_id.0.to_string())
            }

            /// The ids of the live sessions.
            fn sessions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.sessions(py)
            }

            fn __repr__(&self) -> String {
                format!(
                    concat!(stringify!($registry), "(worker_id={:?})"),
                    self.calls.registry.worker_id()
                )
            }
        }

        #[pymethods]
        impl $session {
            $($session_methods)*

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
                task_id: Option<$crate::arguments::Id<$crate::arguments::TaskIdArgument>>,
                parent_id: Option<$crate::arguments::Id<$crate::arguments::ParentIdArgument>>,
                agent: Option<&Bound<'_, PyAny>>,
                description: Option<&Bound<'_, PyAny>>,
                metadata: Option<&Bound<'_, PyAny>>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
                deadline: Option<$crate::arguments::EpochDeadline>,
                detached: bool,
                structured: bool,
                linked: Option<$crate::token::Tokens>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let (start, _) = $crate::start_arguments::StartArguments {
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
                task_id: Option<$crate::arguments::Id<$crate::arguments::TaskIdArgument>>,
                parent_id: Option<$crate::arguments::Id<$crate::arguments::ParentIdArgument>>,
                agent: Option<&Bound<'_, PyAny>>,
                description: Option<&Bound<'_, PyAny>>,
                metadata: Option<&Bound<'_, PyAny>>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
                deadline: Option<$crate::arguments::EpochDeadline>,
                detached: bool,
                structured: bool,
                linked: Option<$crate::token::Tokens>,
                claim_timeout: Option<
                    $crate::arguments::Seconds<$crate::arguments::ClaimTimeoutArgument>,
                >,
            ) -> PyResult<Bound<'py, PyAny>> {
                let (start, claim_timeout) = $crate::start_arguments::StartArguments {
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

            /// Starts every task of `tasks` (mappings of `start_subagent_task`'s keyword arguments), or none
            /// (contract §22: one call up to 32 tasks, checked and then opened in parts beyond), and returns their
            /// handles in order. A task may name as parent one earlier in the batch.
            fn start_subagent_tasks<'py>(
                &self,
                py: Python<'py>,
                tasks: &Bound<'_, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let starts = $crate::batch_arguments::batch_starts::<String>(tasks, false)?
                    .into_iter()
                    .map(|(start, _)| start)
                    .collect();
                self.calls.start_batch(py, starts)
            }

            /// Reserves every task of `tasks` (mappings of `reserve_subagent_task`'s keyword arguments), or none,
            /// as `start_subagent_tasks` starts them, and returns their ids in order; a task without a
            /// `claim_timeout` takes the call's.
            #[pyo3(signature = (tasks, *, claim_timeout=None))]
            fn reserve_subagent_tasks<'py>(
                &self,
                py: Python<'py>,
                tasks: &Bound<'_, PyAny>,
                claim_timeout: Option<
                    $crate::arguments::Seconds<$crate::arguments::ClaimTimeoutArgument>,
                >,
            ) -> PyResult<Bound<'py, PyAny>> {
                let default = claim_timeout.map(|seconds| seconds.0);
                let reservations = $crate::batch_arguments::batch_starts::<String>(tasks, true)?
                    .into_iter()
                    .map(|(start, own)| (start, own.or(default)))
                    .collect();
                self.calls.reserve_batch(py, reservations)
            }

            /// Claims a reserved task for a runner in this process.
            fn claim_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.claim(py, task_id)
            }

            /// Cancels a pending task and its pending descendants, wherever they run. With `before_start=True`
            /// and no pending task of that id, the cancel is recorded instead: the next start or reservation of
            /// the id begins cancelled.
            #[pyo3(signature = (task_id, reason=None, *, before_start=false))]
            fn cancel_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                reason: Option<&Bound<'_, PyAny>>,
                before_start: bool,
            ) -> PyResult<Bound<'py, PyAny>> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                self.calls.cancel_task(py, task_id, reason, before_start)
            }

            /// Fills the session with the tasks `export_snapshots()` exported, as `Session.restore_snapshots`
            /// does, in one call to Redis.
            fn restore_snapshots<'py>(
                &self,
                py: Python<'py>,
                snapshots: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let session_id: std::sync::Arc<str> = std::sync::Arc::from(self.calls.session_id());
                let restored =
                    $crate::snapshot_arguments::restored_snapshots::<String>(snapshots, &session_id)?;
                self.calls.restore(py, restored)
            }

            /// The session's tasks as JSON-serialisable mappings, in start order, for `restore_snapshots`.
            fn export_snapshots<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                $crate::package_imports::snapshots_function(slf.py(), $export)?.call1((slf,))
            }

            /// Records one event of another runtime's stream, as `Session.record_event` does; a task it starts
            /// names no worker process, so its end comes as an event, from any process.
            fn record_event<'py>(
                &self,
                py: Python<'py>,
                event: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls
                    .record_event(py, $crate::event_arguments::recorded_event::<String>(event)?)
            }

            /// Resumes the task `task_id`, which its runner paused, handing the runner `value`
            /// (JSON-serialisable) wherever it runs. True exactly when this call resumed it: false for an unknown
            /// id or a task not paused.
            #[pyo3(signature = (task_id, value=None))]
            fn resume_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                value: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let value = value
                    .filter(|value| !value.is_none())
                    .map(|value| $crate::arguments::json_text(value, "value"))
                    .transpose()?;
                self.calls.resume_task(py, task_id, value)
            }

            /// Ends every task of `ends` (mappings naming a task by `handle` or `task_id`, with
            /// `end_subagent_task`'s keyword arguments) in one round trip, in order and each on its own; gives per
            /// end whether it moved its task.
            fn end_subagent_tasks<'py>(
                &self,
                py: Python<'py>,
                ends: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let ends = $crate::end_arguments::batch_ends(
                    ends,
                    |handle| {
                        let handle = handle.cast::<$handle>().ok()?;
                        Some(handle.get().calls.batch_handle())
                    },
                    $handle_description,
                    |result| $crate::arguments::json_text(result, "result"),
                )?;
                self.calls.end_batch(py, ends)
            }

            /// Records the end of a task without its handle: `error` fails it (with `error_type` and
            /// `error_code`, if given), otherwise it completes with `result`.
            #[pyo3(signature = (task_id, *, result=None, error=None, error_type=None, error_code=None))]
            fn end_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                result: Option<&Bound<'_, PyAny>>,
                error: Option<&Bound<'_, PyAny>>,
                error_type: Option<&Bound<'_, PyAny>>,
                error_code: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let ended = $crate::arguments::end_outcome(
                    result,
                    error,
                    error_type,
                    error_code,
                    |result| $crate::arguments::json_text(result, "result"),
                )?;
                self.calls.end_task(py, task_id, ended)
            }

            /// Cancels the pending tasks that match every filter given (`metadata`: a mapping whose every key
            /// the task's metadata holds with an equal JSON value), each with its pending descendants, wherever
            /// they run; returns the ids of the matching tasks it moved to cancelled, in start order.
            #[pyo3(signature = (*, agent=None, status=None, metadata=None, reason=None))]
            fn cancel_subagent_tasks<'py>(
                &self,
                py: Python<'py>,
                agent: Option<&Bound<'py, PyAny>>,
                status: Option<&Bound<'py, PyAny>>,
                metadata: Option<&Bound<'py, PyAny>>,
                reason: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let arguments =
                    $crate::filter_arguments::FilterArguments::new(agent, status, metadata, reason)?;
                self.calls.cancel_matching(py, &arguments)
            }

            /// Cancels every pending task of the session; returns how many moved.
            #[pyo3(signature = (reason=None))]
            fn cancel<'py>(
                &self,
                py: Python<'py>,
                reason: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                self.calls.cancel_all(py, reason)
            }

            /// Cancels every pending task and refuses new starts, in every process.
            #[pyo3(signature = (reason=None))]
            fn close<'py>(
                &self,
                py: Python<'py>,
                reason: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                self.calls.close(py, reason)
            }

            /// How many finished tasks the session keeps (a session that existed keeps its own bound). Fixed
            /// for the incarnation: reading it never touches the network.
            #[getter]
            fn max_finished_tasks(&self) -> usize {
                self.calls.max_finished_tasks()
            }

            /// Whether the session is closed, by any process, or its incarnation has ended. One round trip.
            fn is_closed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.is_closed(py)
            }

            /// The cancellation token of the retained task `task_id`, wherever it runs: it fires in this
            /// process when the task is cancelled; raises `UnknownTaskError` when no such task is retained.
            fn token<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.token(py, task_id)
            }

            /// A snapshot of one retained task, or None.
            fn subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.task(py, task_id)
            }

            /// Snapshots of every retained task, in start order.
            fn subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.tasks(py)
            }

            /// One page of the session's retained tasks (with `pending`, of its pending tasks), at most `limit`
            /// (and at most 100) from `cursor` (None for the first page): the tasks, and the cursor of the next
            /// page (None once done). Unfinished tasks come in start order, then finished ones in the order they
            /// finished.
            #[pyo3(signature = (cursor=None, *, limit=None, pending=false))]
            fn subagent_tasks_page<'py>(
                &self,
                py: Python<'py>,
                cursor: Option<&Bound<'_, PyAny>>,
                limit: Option<&Bound<'_, PyAny>>,
                pending: bool,
            ) -> PyResult<Bound<'py, PyAny>> {
                let cursor = $crate::arguments::optional_string(cursor, "cursor")?;
                self.calls
                    .tasks_page(py, pending, cursor, $crate::arguments::page_limit(limit)?)
            }

            /// Forgets the finished tasks that ended at least `older_than` seconds ago, as the bound on finished
            /// tasks evicts them, and returns how many it forgot. Pending tasks are never forgotten.
            fn forget_finished<'py>(
                &self,
                py: Python<'py>,
                older_than: $crate::arguments::Seconds<$crate::arguments::OlderThanArgument>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls.forget_finished(py, older_than.0)
            }

            /// Snapshots of the pending tasks, in start order.
            fn pending_subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.pending(py)
            }

            /// Waits until the task has finished, in whatever process it runs, and returns its final snapshot;
            /// raises `TimeoutError` if `timeout` seconds pass first and `UnknownTaskError` for an unknown id.
            #[pyo3(signature = (task_id, timeout=None))]
            fn wait_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.calls
                    .wait_task(py, task_id, timeout.map(|timeout| timeout.0))
            }

            /// Cancels the task as `cancel_subagent_task` does, then waits until its runner has ended and every
            /// `on_cancel` handler of the task and of its descendants, in whichever process runs them, has
            /// finished, and gives the final snapshot. `TimeoutError` names what still runs.
            #[pyo3(signature = (task_id, reason=None, *, timeout=None))]
            fn cancel_subagent_task_and_wait<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                reason: Option<&Bound<'_, PyAny>>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                self.calls
                    .cancel_and_wait_task(py, task_id, reason, timeout.map(|timeout| timeout.0))
            }

            /// Starts a task and runs `await function(handle)` as an asyncio task of the running loop, as
            /// `Session.spawn_subagent_task` does (the same code runs both); on the asyncio classes, awaiting this
            /// call gives the `SpawnedSubagent` once the task has started.
            #[pyo3(signature = (*args, **kwargs))]
            fn spawn_subagent_task<'py>(
                slf: &Bound<'py, Self>,
                args: &Bound<'py, pyo3::types::PyTuple>,
                kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::redis_classes::spawn(slf.as_any(), args, kwargs, $spawn)
            }

            /// An async iterator of the session's lifecycle events from the subscription on, whichever process
            /// makes them: the `EventStream` that in-memory sessions hand out, reading from Redis (on the asyncio
            /// classes, awaiting this call subscribes and gives it).
            fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.events(py)
            }

            /// Two sessions of this class are equal when they are the same incarnation of a session seen through
            /// the same registry.
            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                other
                    .cast::<$session>()
                    .is_ok_and(|other| other.get().calls.same_session(&self.calls))
            }

            fn __hash__(&self) -> u64 {
                $crate::redis_classes::session_hash(&self.calls)
            }

            fn __repr__(&self) -> String {
                format!(
                    concat!(stringify!($session), "(session_id={:?})"),
                    self.calls.session_id()
                )
            }
        }

        #[pymethods]
        impl $handle {
            $($handle_methods)*

            #[getter]
            fn task_id(&self) -> &str {
                &self.calls.task_id
            }

            #[getter]
            fn session_id(&self) -> &str {
                &self.calls.session_id
            }

            #[getter]
            fn token(&self, py: Python<'_>) -> Py<$crate::token::CancellationToken> {
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

            /// Reports failure with a message or an exception, and the failure's type and code if given (an
            /// exception's type defaults to its class name).
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

            /// Pauses the running task (to wait for a person's approval, say), in Redis for every process and
            /// here for the runner; snapshots show `reason` as `pause_reason`. False if the task is not running.
            #[pyo3(signature = (reason=None))]
            fn pause<'py>(
                &self,
                py: Python<'py>,
                reason: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                self.calls.pause(py, reason)
            }

            /// `await handle.resumed()`: waits while the task is paused and returns the value the session
            /// resumed it with, from any process; raises `TaskCancelledError` if the task is cancelled while
            /// paused.
            fn resumed<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                $crate::package_imports::pause_function(slf.py(), "resumed")?.call1((slf,))
            }

            /// The blocking form of `resumed()`, for threads; raises `TimeoutError` if `timeout` seconds pass
            /// first.
            #[pyo3(signature = (timeout=None))]
            fn wait_resumed<'py>(
                slf: &Bound<'py, Self>,
                timeout: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::package_imports::pause_function(slf.py(), "wait_resumed")?.call1((slf, timeout))
            }

            fn _resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
                self.calls.resume_future(py)
            }

            #[pyo3(signature = (timeout))]
            fn _wait_for_resume(
                &self,
                py: Python<'_>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
            ) -> PyResult<bool> {
                self.calls
                    .wait_for_resume(py, timeout.map(|timeout| timeout.0))
            }

            fn _resumption(&self, py: Python<'_>) -> PyResult<(&'static str, Py<PyAny>)> {
                self.calls.resumption(py)
            }

            /// Records that the runner did not stop within its grace period after a cancel and is being stopped
            /// by force; snapshots show it as `escalated`.
            fn record_escalation<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.record_escalation(py)
            }

            fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.calls.snapshot(py)
            }

            fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<$crate::ready::Ready>> {
                $crate::ready::Ready::entered(py, slf.into_any())
            }

            fn __traverse__(&self, visit: pyo3::gc::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
                visit.call(&self.calls.token)
            }

            fn __repr__(&self) -> String {
                $crate::redis_classes::handle_repr(stringify!($handle), &self.calls)
            }
        }
    };
}

pub(crate) use redis_classes;

/// The URL and options of a registry, from the keyword arguments of `RedisRegistry(...)` and
/// `AsyncRedisRegistry.connect(...)`.
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
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    calls.session_id().hash(&mut hasher);
    hasher.finish()
}

/// `Class(task_id='…', session_id='…')`.
pub(crate) fn handle_repr(class: &str, calls: &HandleCalls) -> String {
    format!(
        "{class}(task_id={}, session_id={})",
        python_repr(Some(&calls.task_id)),
        python_repr(Some(&calls.session_id)),
    )
}
