//! The methods of a Redis session class, declared once for both families: [`redis_session_methods!`] writes them
//! for the session class that [`redis_classes!`](crate::redis_classes::redis_classes) declares. Each only reads
//! its arguments and hands them to `redis_calls`, which decides what the call does.

use std::hash::{Hash, Hasher};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::package_imports::spawn_function;
use crate::redis_calls::SessionCalls;

/// `#[pymethods]` of `$session`: `$extra` (what only this family's session has), then every method both families
/// share. `$handle` is the family's handle class (for `end_subagent_tasks`), `$export` and `$spawn` the package
/// functions that export snapshots and spawn a task for the family.
macro_rules! redis_session_methods {
    (
        $session:ident, $handle:ident, $export:literal, $spawn:literal, $handle_description:literal,
        { $($extra:tt)* }
    ) => {
        #[pymethods]
        impl $session {
            $($extra)*

            #[getter]
            fn session_id(&self) -> &str {
                self.calls.session_id()
            }

            /// Starts a task that this process runs, and returns the runner's handle; `options` are
            /// `StartOptions`.
            #[pyo3(signature = (task_id=None, **options))]
            fn start_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: Option<$crate::arguments::Id<$crate::arguments::TaskIdArgument>>,
                options: Option<&Bound<'_, pyo3::types::PyDict>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let (start, _) = $crate::start_arguments::StartArguments::from_keywords(
                    task_id,
                    options,
                    false,
                    concat!(stringify!($session), ".start_subagent_task"),
                )?
                .into_start()?;
                self.calls.start(py, start)
            }

            /// Reserves a task for a runner in any process to claim, and returns its id; `options` are
            /// `StartOptions` and `claim_timeout`.
            #[pyo3(signature = (task_id=None, **options))]
            fn reserve_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: Option<$crate::arguments::Id<$crate::arguments::TaskIdArgument>>,
                options: Option<&Bound<'_, pyo3::types::PyDict>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let (start, claim_timeout) = $crate::start_arguments::StartArguments::from_keywords(
                    task_id,
                    options,
                    true,
                    concat!(stringify!($session), ".reserve_subagent_task"),
                )?
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
                $crate::redis_session_methods::spawn(slf.as_any(), args, kwargs, $spawn)
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
                $crate::redis_session_methods::session_hash(&self.calls)
            }

            fn __repr__(&self) -> String {
                format!(
                    concat!(stringify!($session), "(session_id={:?})"),
                    self.calls.session_id()
                )
            }
        }
    };
}

pub(crate) use redis_session_methods;

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
