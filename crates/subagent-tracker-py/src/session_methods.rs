//! The methods of every session class, declared once: [`session_methods!`] writes them for the in-memory
//! `Session` and for both families of Redis sessions. Each only reads its arguments and hands them to the
//! session's store through the seam ([`SessionStore`](crate::session_store::SessionStore)), which decides what
//! the call does; the waits go to the compositions of `waits`.

/// `#[pymethods]` of `$session`, whose `store` field is its [`SessionStore`](crate::session_store::SessionStore):
/// `$extra` (what only this class has), then every method all sessions share. `$handle` is the class of its
/// runners' handles, `$handle_description` how `end_subagent_tasks` names it.
macro_rules! session_methods {
    ($session:ident, $handle:ident, $handle_description:literal, { $($extra:tt)* }) => {
        #[pymethods]
        impl $session {
            $($extra)*

            /// The session's id.
            #[getter]
            fn session_id(&self) -> &str {
                $crate::session_store::SessionStore::session_id(&self.store)
            }

            /// How many finished tasks the session keeps (a Redis session that existed keeps its own bound).
            #[getter]
            fn max_finished_tasks(&self) -> usize {
                $crate::session_store::SessionStore::max_finished_tasks(&self.store)
            }

            /// Starts a task that this process runs, and returns the runner's handle; the keyword arguments are
            /// `StartOptions`, in the order of `start_arguments::START_OPTIONS`.
            #[pyo3(signature = (
                task_id=None,
                *,
                parent_id=None,
                agent=None,
                description=None,
                metadata=None,
                timeout=None,
                deadline=None,
                detached=$crate::start_arguments::FlagArgument::NotGiven,
                structured=$crate::start_arguments::FlagArgument::NotGiven,
                linked=None,
            ))]
            // As Python shows it: a flag's default is `False` (the signature's own is a "not given" marker).
            #[pyo3(text_signature = "($self, /, task_id=None, *, parent_id=None, agent=None, description=None, \
                metadata=None, timeout=None, deadline=None, detached=False, structured=False, linked=None)")]
            #[allow(clippy::too_many_arguments)]
            fn start_subagent_task<'py>(
                slf: &Bound<'py, Self>,
                task_id: Option<$crate::arguments::Id<$crate::arguments::TaskIdArgument>>,
                parent_id: Option<Bound<'py, PyAny>>,
                agent: Option<Bound<'py, PyAny>>,
                description: Option<Bound<'py, PyAny>>,
                metadata: Option<Bound<'py, PyAny>>,
                timeout: Option<Bound<'py, PyAny>>,
                deadline: Option<Bound<'py, PyAny>>,
                detached: $crate::start_arguments::FlagArgument<'py>,
                structured: $crate::start_arguments::FlagArgument<'py>,
                linked: Option<Bound<'py, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let options = $crate::start_arguments::StartKeywords {
                    parent_id,
                    agent,
                    description,
                    metadata,
                    timeout,
                    deadline,
                    detached,
                    structured,
                    linked,
                };
                let start = if options.are_defaults() {
                    // Every option is absent: there is nothing to drop.
                    std::mem::forget(options);
                    $crate::start_arguments::StartArguments::bare_start(task_id)
                } else {
                    options.into_start(task_id)?
                };
                $crate::session_store::SessionStore::start(&slf.get().store, slf.as_any(), start)
            }

            /// Reserves a task for a runner to claim later (in any process, on Redis) and returns its id; the
            /// task is queued until then. `options` are `StartOptions` and `claim_timeout`.
            #[pyo3(signature = (task_id=None, **options))]
            fn reserve_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: Option<$crate::arguments::Id<$crate::arguments::TaskIdArgument>>,
                options: Option<&Bound<'_, pyo3::types::PyDict>>,
            ) -> $crate::session_store::Answer<'py> {
                let (start, claim_timeout) = $crate::start_arguments::StartArguments::from_keywords(
                    task_id,
                    options,
                    true,
                    concat!(stringify!($session), ".reserve_subagent_task"),
                )?
                .into_start()?;
                $crate::session_store::SessionStore::reserve(&self.store, py, start, claim_timeout)
            }

            /// Starts every task of `tasks` (mappings of `start_subagent_task`'s keyword arguments), or none
            /// (contract §22: on Redis, one call up to 32 tasks, checked and then opened in parts beyond), and
            /// returns their handles in order. A task may name as parent one earlier in the batch.
            fn start_subagent_tasks<'py>(
                slf: &Bound<'py, Self>,
                tasks: &Bound<'_, PyAny>,
            ) -> $crate::session_store::Answer<'py> {
                let starts = $crate::batch_arguments::batch_starts(tasks, false)?
                    .into_iter()
                    .map(|(start, _)| start)
                    .collect();
                $crate::session_store::SessionStore::start_batch(&slf.get().store, slf.as_any(), starts)
            }

            /// Reserves every task of `tasks` (mappings of `reserve_subagent_task`'s keyword arguments), or none,
            /// and returns their ids in order; a task without a `claim_timeout` of its own takes the call's.
            #[pyo3(signature = (tasks, *, claim_timeout=None))]
            fn reserve_subagent_tasks<'py>(
                &self,
                py: Python<'py>,
                tasks: &Bound<'_, PyAny>,
                claim_timeout: Option<
                    $crate::arguments::Seconds<$crate::arguments::ClaimTimeoutArgument>,
                >,
            ) -> $crate::session_store::Answer<'py> {
                let default = claim_timeout.map(|seconds| seconds.0);
                let reservations = $crate::batch_arguments::batch_starts(tasks, true)?
                    .into_iter()
                    .map(|(start, own)| (start, own.or(default)))
                    .collect();
                $crate::session_store::SessionStore::reserve_batch(&self.store, py, reservations)
            }

            /// Claims a reserved task for a runner in this process and returns the handle; a reservation
            /// cancelled before its claim gives a handle whose token has fired.
            fn claim_subagent_task<'py>(
                slf: &Bound<'py, Self>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
            ) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::claim(&slf.get().store, slf.as_any(), task_id)
            }

            /// Cancels a pending task and its pending descendants, wherever they run; True exactly when this call
            /// moved the task. With `before_start=True` and no pending task of that id, the cancel is recorded
            /// instead: the next start or reservation of the id begins cancelled.
            #[pyo3(signature = (task_id, reason=None, *, before_start=false))]
            fn cancel_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                reason: Option<&Bound<'_, PyAny>>,
                before_start: bool,
            ) -> $crate::session_store::Answer<'py> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                $crate::session_store::SessionStore::cancel_task(&self.store, py, task_id, reason, before_start)
            }

            /// Fills the session with the tasks `export_snapshots()` exported from another, in order, and returns
            /// how many it restored: finished tasks as they were, pending ones failed (no runner came back with
            /// them). Refuses, restoring nothing, a list that repeats an id or names one this session retains.
            fn restore_snapshots<'py>(
                &self,
                py: Python<'py>,
                snapshots: &Bound<'py, PyAny>,
            ) -> $crate::session_store::Answer<'py> {
                let session_id = std::sync::Arc::from(
                    $crate::session_store::SessionStore::session_id(&self.store),
                );
                let restored = $crate::snapshot_arguments::restored_snapshots(snapshots, &session_id)?;
                $crate::session_store::SessionStore::restore(&self.store, py, restored)
            }

            /// The session's retained tasks, in start order, as records of JSON's types (as far as their metadata
            /// and results are), which `restore_snapshots` takes back: in another session, process or store.
            fn export_snapshots<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::export(&self.store, py)
            }

            /// Records one event of another runtime's stream (a mapping with `kind` and `task_id`): `"started"`
            /// (with `parent_id`, `agent`, `description`, `metadata`), `"progress"` (`message`, `data`) or
            /// `"ended"` (`success`, and `result` or `error`). True when it changed the session: a repeat, an
            /// event of a finished task, or another kind changes nothing. An end seen before its start records
            /// the finished task. On Redis, a task it starts names no worker process, so its end comes as an
            /// event, from any process.
            fn record_event<'py>(
                &self,
                py: Python<'py>,
                event: &Bound<'py, PyAny>,
            ) -> $crate::session_store::Answer<'py> {
                let event = $crate::event_arguments::recorded_event(event)?;
                $crate::session_store::SessionStore::record_event(&self.store, py, event)
            }

            /// Resumes the task `task_id`, which its runner paused, handing the runner `value` (what
            /// `handle.resumed()` returns; JSON-serialisable on Redis) wherever it runs. True exactly when this
            /// call resumed it: false for an unknown id or a task not paused.
            #[pyo3(signature = (task_id, value=None))]
            fn resume_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                value: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let value = value
                    .filter(|value| !value.is_none())
                    .map($crate::event_arguments::StoredValue::resume_value)
                    .transpose()?;
                $crate::session_store::SessionStore::resume_task(&self.store, py, task_id, value)
            }

            /// Ends every task of `ends` (mappings naming a task by `handle` or `task_id`, with
            /// `end_subagent_task`'s keyword arguments), in order and each on its own (on Redis, in one round
            /// trip), and returns per end whether it moved its task.
            fn end_subagent_tasks<'py>(
                &self,
                py: Python<'py>,
                ends: &Bound<'py, PyAny>,
            ) -> $crate::session_store::Answer<'py> {
                let ends = $crate::end_arguments::batch_ends(
                    ends,
                    |handle| Some($handle::batch_handle(handle.cast::<$handle>().ok()?)),
                    $handle_description,
                    $crate::event_arguments::StoredValue::result,
                )?;
                $crate::session_store::SessionStore::end_batch(&self.store, py, ends)
            }

            /// Records the end of a task without its handle: `error` fails it (with `error_type` and
            /// `error_code`, if given), otherwise it completes with `result`. True exactly when this call moved
            /// the task out of running (the first transition wins).
            #[pyo3(signature = (task_id, *, result=None, error=None, error_type=None, error_code=None))]
            fn end_subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                result: Option<&Bound<'_, PyAny>>,
                error: Option<&Bound<'_, PyAny>>,
                error_type: Option<&Bound<'_, PyAny>>,
                error_code: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let ended = $crate::arguments::end_outcome(
                    result,
                    error,
                    error_type,
                    error_code,
                    $crate::event_arguments::StoredValue::result,
                )?;
                $crate::session_store::SessionStore::end_task(&self.store, py, task_id, ended)
            }

            /// Cancels the pending tasks that match every filter given (`metadata`: a mapping whose every key
            /// the task's metadata holds with an equal value), each with its pending descendants, wherever they
            /// run; returns the ids of the matching tasks it moved to cancelled, in start order.
            #[pyo3(signature = (*, agent=None, status=None, metadata=None, reason=None))]
            fn cancel_subagent_tasks<'py>(
                &self,
                py: Python<'py>,
                agent: Option<&Bound<'py, PyAny>>,
                status: Option<&Bound<'py, PyAny>>,
                metadata: Option<&Bound<'py, PyAny>>,
                reason: Option<&Bound<'py, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let arguments =
                    $crate::filter_arguments::FilterArguments::new(agent, status, metadata, reason)?;
                $crate::session_store::SessionStore::cancel_matching(&self.store, py, &arguments)
            }

            /// Cancels every pending task; returns how many it moved to cancelled.
            #[pyo3(signature = (reason=None))]
            fn cancel<'py>(
                &self,
                py: Python<'py>,
                reason: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                $crate::session_store::SessionStore::cancel_all(&self.store, py, reason)
            }

            /// Cancels every pending task, then refuses new starts (in every process, on Redis); returns how
            /// many it moved to cancelled. A session of a registry leaves it once all its tasks are finished.
            #[pyo3(signature = (reason=None))]
            fn close<'py>(
                &self,
                py: Python<'py>,
                reason: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                $crate::session_store::SessionStore::close(&self.store, py, reason)
            }

            /// Whether the session is closed, by any process, or (on Redis) its incarnation has ended; on Redis
            /// one round trip.
            fn is_closed<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::is_closed(&self.store, py)
            }

            /// The cancellation token of the retained task `task_id`, for code that holds no handle, wherever
            /// the task runs: it fires when the task is cancelled (or has fired), and never for one that
            /// completed or failed. Raises `UnknownTaskError` when no such task is retained.
            fn token<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
            ) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::token(&self.store, py, task_id)
            }

            /// A snapshot of one retained task, or None.
            fn subagent_task<'py>(
                &self,
                py: Python<'py>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
            ) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::task(&self.store, py, task_id)
            }

            /// Snapshots of every retained task, in start order.
            fn subagent_tasks<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::tasks(&self.store, py)
            }

            /// One page of the session's retained tasks (with `pending`, of its pending tasks): at most `limit`
            /// (on Redis, at most 100) from `cursor` (None for the first page), and the cursor of the next page
            /// (None once done). In memory the tasks come in start order; on Redis unfinished tasks come in
            /// start order, then finished ones in the order they finished.
            #[pyo3(signature = (cursor=None, *, limit=None, pending=false))]
            fn subagent_tasks_page<'py>(
                &self,
                py: Python<'py>,
                cursor: Option<&Bound<'_, PyAny>>,
                limit: Option<&Bound<'_, PyAny>>,
                pending: bool,
            ) -> $crate::session_store::Answer<'py> {
                let cursor = $crate::arguments::optional_string(cursor, "cursor")?;
                let limit = $crate::arguments::page_limit(limit)?;
                $crate::session_store::SessionStore::tasks_page(&self.store, py, pending, cursor, limit)
            }

            /// Forgets the finished tasks that ended at least `older_than` seconds ago, as the bound on finished
            /// tasks evicts them, and returns how many it forgot. Pending tasks are never forgotten.
            fn forget_finished<'py>(
                &self,
                py: Python<'py>,
                older_than: $crate::arguments::Seconds<$crate::arguments::OlderThanArgument>,
            ) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::forget_finished(&self.store, py, older_than.0)
            }

            /// Snapshots of the pending (queued, running and paused) tasks, in start order.
            fn pending_subagent_tasks<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                $crate::session_store::SessionStore::pending(&self.store, py)
            }

            /// `await session.wait_subagent_task(task_id)`: waits until the task is finished (its runner has
            /// stopped, in whatever process it runs) and returns its final snapshot. Raises `TimeoutError` if
            /// `timeout` seconds pass first, and `UnknownTaskError` for an unknown id. A cancelled task whose
            /// runner still runs is not finished: this keeps waiting across that window.
            #[pyo3(signature = (task_id, timeout=None))]
            fn wait_subagent_task<'py>(
                slf: &Bound<'py, Self>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
            ) -> $crate::session_store::Answer<'py> {
                let (task_id, timeout) = (task_id.0, timeout.map(|timeout| timeout.0));
                let name = "wait_subagent_task";
                $crate::start_on_await::StartOnAwait::coroutine(slf.py(), slf.as_any(), name, move |session| {
                    let store = &session.cast::<$session>()?.get().store;
                    $crate::waits::wait_task(store, session.py(), task_id.clone(), timeout)
                        .map(Bound::unbind)
                })
            }

            /// `await session.cancel_subagent_task_and_wait(task_id)`: cancels the task and its pending
            /// descendants, as `cancel_subagent_task` does, then waits until its runner has ended and every
            /// `on_cancel` handler of the task and of its descendants, sync or async and in whichever process
            /// runs them, has finished; returns the final snapshot. A task cancelled or finished before is waited
            /// for all the same. Raises `UnknownTaskError` for an unknown id, and `TimeoutError` naming what
            /// still runs if `timeout` seconds pass first (the cancel stays made).
            #[pyo3(signature = (task_id, reason=None, *, timeout=None))]
            fn cancel_subagent_task_and_wait<'py>(
                slf: &Bound<'py, Self>,
                task_id: $crate::arguments::Id<$crate::arguments::TaskIdArgument>,
                reason: Option<&Bound<'_, PyAny>>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
            ) -> $crate::session_store::Answer<'py> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                let (task_id, timeout) = (task_id.0, timeout.map(|timeout| timeout.0));
                let name = "cancel_subagent_task_and_wait";
                $crate::start_on_await::StartOnAwait::coroutine(slf.py(), slf.as_any(), name, move |session| {
                    let store = &session.cast::<$session>()?.get().store;
                    $crate::waits::cancel_and_wait_task(
                        store,
                        session.py(),
                        task_id.clone(),
                        reason.clone(),
                        timeout,
                    )
                    .map(Bound::unbind)
                })
            }

            /// Two session objects of this class are equal when they are the same session (the same
            /// incarnation, on Redis), whichever registry call handed them out.
            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                other.cast::<$session>().is_ok_and(|other| {
                    $crate::session_store::SessionStore::same_session(&other.get().store, &self.store)
                })
            }
        }
    };
}

pub(crate) use session_methods;
