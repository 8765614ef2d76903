//! `Session`: one scope of subagent tasks, backed by the core's in-memory tracker.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::PyTraverseError;
use subagent_tracker::{EndTarget, InMemorySubagentTaskTracker, TaskFilter};

use crate::arguments::{
    self, ClaimTimeoutArgument, Id, OlderThanArgument, Seconds, SessionIdArgument, TaskIdArgument,
};
use crate::asyncio_waker::with_wake_batch;
use crate::batch_arguments::batch_starts;
use crate::cancel_handlers::CancelHandlers;
use crate::end_arguments::batch_ends;
use crate::errors::tracker_error;
use crate::event_arguments::recorded_event;
use crate::events::EventSubscription;
use crate::filter_arguments::{holds, FilterArguments};
use crate::handle::SubagentTaskHandle;
use crate::keyword_options::session_config;
use crate::python_types::{metadata_merge, python_repr, PyValue};
use crate::snapshot::SubagentTask;
use crate::snapshot_arguments::restored_snapshots;
use crate::start_arguments::StartArguments;
use crate::task_watch::TaskWatch;
use crate::token::CancellationToken;

/// A scope that owns subagent tasks. The Python `subagent_tracker.Session` adds the async methods.
///
/// It owns the Python references its tasks hold (metadata and results): it shows them to the garbage
/// collector, and clears them when the collector finds it unreachable in a cycle. Handles and watches keep
/// it alive, so nothing reachable ever sees them cleared.
#[pyclass(subclass, frozen, module = "subagent_tracker._native")]
pub(crate) struct Session {
    tracker: InMemorySubagentTaskTracker<PyValue>,
}

/// A session's shared state, handed by a registry to the `Session` object it builds around it.
#[pyclass(frozen, module = "subagent_tracker._native", name = "_SessionState")]
pub(crate) struct SessionState {
    pub(crate) tracker: InMemorySubagentTaskTracker<PyValue>,
}

fn snapshots(
    py: Python<'_>,
    snapshots: Vec<subagent_tracker::SubagentTaskSnapshot<PyValue>>,
) -> PyResult<Bound<'_, PyList>> {
    PyList::new(
        py,
        snapshots
            .into_iter()
            .map(|snapshot| SubagentTask::new(py, snapshot)),
    )
}

#[pymethods]
impl Session {
    /// `options` are `SessionOptions`; `_state` is what `Registry.session` builds the session around.
    #[new]
    #[pyo3(signature = (session_id=None, *, _state=None, **options))]
    // What `help(Session)` shows: the core's defaults, and not `_state`, which only `Registry.session` passes
    // (a test holds these names to `SESSION_OPTIONS`).
    #[pyo3(
        text_signature = "(session_id=None, *, max_finished_tasks=10_000, event_buffer=4096, max_finished_age=None, early_cancel_ttl=60, progress_log_size=16)"
    )]
    fn new(
        session_id: Option<Id<SessionIdArgument>>,
        _state: Option<PyRef<'_, SessionState>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Session> {
        if let Some(state) = _state {
            return Ok(Session {
                tracker: state.tracker.clone(),
            });
        }
        let config = session_config(options, "Session")?;
        let tracker =
            InMemorySubagentTaskTracker::with_config(session_id.as_ref().map(|id| &*id.0), config);
        tracker.set_metadata_merge(metadata_merge());
        Ok(Session { tracker })
    }

    /// The session's id.
    #[getter]
    fn session_id(&self) -> &str {
        self.tracker.session_id()
    }

    /// How many finished tasks the session retains.
    #[getter]
    fn max_finished_tasks(&self) -> usize {
        self.tracker.config().max_finished_tasks
    }

    /// True once `close()` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.tracker.is_closed()
    }

    /// Starts a task and returns the runner's handle; `options` are `StartOptions`.
    #[pyo3(signature = (task_id=None, **options))]
    fn start_subagent_task(
        slf: &Bound<'_, Self>,
        task_id: Option<Id<TaskIdArgument>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<SubagentTaskHandle> {
        let py = slf.py();
        let (start, _) =
            StartArguments::from_keywords(task_id, options, false, "Session.start_subagent_task")?
                .into_start()?;
        let tracker = &slf.get().tracker;
        let handle = with_wake_batch(py, || tracker.start(start))?
            .map_err(|error| tracker_error(py, error))?;
        Ok(SubagentTaskHandle::new(
            handle,
            slf.clone().into_any().unbind(),
        ))
    }

    /// Starts every task of `tasks` (mappings of `start_subagent_task`'s keyword arguments), or none, and
    /// returns their handles in order. A task may name as parent one earlier in the batch.
    fn start_subagent_tasks(
        slf: &Bound<'_, Self>,
        tasks: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<SubagentTaskHandle>> {
        let py = slf.py();
        let starts = batch_starts::<PyValue>(tasks, false)?
            .into_iter()
            .map(|(start, _)| start)
            .collect();
        let tracker = &slf.get().tracker;
        let handles = with_wake_batch(py, || tracker.start_batch(starts))?
            .map_err(|error| tracker_error(py, error))?;
        Ok(handles
            .into_iter()
            .map(|handle| SubagentTaskHandle::new(handle, slf.clone().into_any().unbind()))
            .collect())
    }

    /// Ends every task of `ends` (mappings naming a task by `handle` or `task_id`, with `end_subagent_task`'s
    /// keyword arguments), in order and each on its own, and returns per end whether it moved its task.
    fn end_subagent_tasks(&self, py: Python<'_>, ends: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let batch = batch_ends(
            ends,
            |handle| handle.cast::<SubagentTaskHandle>().ok().cloned(),
            "a SubagentTaskHandle",
            |result| Ok(PyValue::new(result.clone().unbind())),
        )?;
        let (targets, ends): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let ends = targets
            .iter()
            .map(|target| match target {
                EndTarget::Handle(handle) => EndTarget::Handle(handle.get().core()),
                EndTarget::TaskId(task_id) => EndTarget::TaskId(task_id.clone()),
            })
            .zip(ends)
            .collect();
        with_wake_batch(py, || self.tracker.end_batch(ends))?
            .map_err(|error| tracker_error(py, error))
    }

    /// Reserves every task of `tasks` (mappings of `reserve_subagent_task`'s keyword arguments), or none, and
    /// returns their ids in order; a task without a `claim_timeout` of its own takes the call's.
    #[pyo3(signature = (tasks, *, claim_timeout=None))]
    fn reserve_subagent_tasks(
        &self,
        py: Python<'_>,
        tasks: &Bound<'_, PyAny>,
        claim_timeout: Option<Seconds<ClaimTimeoutArgument>>,
    ) -> PyResult<Vec<String>> {
        let default = claim_timeout.map(|seconds| seconds.0);
        let reservations = batch_starts::<PyValue>(tasks, true)?
            .into_iter()
            .map(|(start, own)| (start, own.or(default)))
            .collect();
        let reserved = with_wake_batch(py, || self.tracker.reserve_batch(reservations))?
            .map_err(|error| tracker_error(py, error))?;
        Ok(reserved.iter().map(ToString::to_string).collect())
    }

    /// Reserves a task for a runner to claim later and returns its id; the task is queued until then.
    /// `options` are `StartOptions` and `claim_timeout`.
    #[pyo3(signature = (task_id=None, **options))]
    fn reserve_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Option<Id<TaskIdArgument>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        let (start, claim_timeout) =
            StartArguments::from_keywords(task_id, options, true, "Session.reserve_subagent_task")?
                .into_start()?;
        let reserved = with_wake_batch(py, || self.tracker.reserve(start, claim_timeout))?
            .map_err(|error| tracker_error(py, error))?;
        Ok(reserved.to_string())
    }

    /// Claims a reserved task for its runner and returns the handle; a reservation cancelled before its claim
    /// gives a handle whose token has fired.
    fn claim_subagent_task(
        slf: &Bound<'_, Self>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<SubagentTaskHandle> {
        let py = slf.py();
        let tracker = &slf.get().tracker;
        let handle = with_wake_batch(py, || tracker.claim(&task_id.0))?
            .map_err(|error| tracker_error(py, error))?;
        Ok(SubagentTaskHandle::new(
            handle,
            slf.clone().into_any().unbind(),
        ))
    }

    /// Cancels a pending task and its pending descendants; True exactly when this call moved the task. With
    /// `before_start=True` and no pending task of that id, the cancel is recorded instead: the next start or
    /// reservation of the id begins cancelled.
    #[pyo3(signature = (task_id, reason=None, *, before_start=false))]
    fn cancel_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Id<TaskIdArgument>,
        reason: Option<&Bound<'_, PyAny>>,
        before_start: bool,
    ) -> PyResult<bool> {
        let reason = arguments::optional_string(reason, "reason")?;
        with_wake_batch(py, || {
            if before_start {
                self.tracker
                    .cancel_before_start(&task_id.0, reason.as_deref())
            } else {
                self.tracker.cancel(&task_id.0, reason.as_deref())
            }
        })
    }

    /// Fills the session with the tasks `export_snapshots()` exported from another, in order, and returns how
    /// many it restored: finished tasks as they were, pending ones failed (no runner came back with them).
    /// Refuses, restoring nothing, a list that repeats an id or names one this session retains.
    fn restore_snapshots(&self, py: Python<'_>, snapshots: &Bound<'_, PyAny>) -> PyResult<usize> {
        let snapshots = restored_snapshots::<PyValue>(snapshots, self.tracker.session_id())?;
        self.tracker
            .restore(snapshots)
            .map_err(|error| tracker_error(py, error))
    }

    /// Records one event of another runtime's stream (a mapping with `kind` and `task_id`): `"started"` (with
    /// `parent_id`, `agent`, `description`, `metadata`), `"progress"` (`message`, `data`) or `"ended"`
    /// (`success`, and `result` or `error`). True when it changed the session: a repeat, an event of a finished
    /// task, or another kind changes nothing. An end seen before its start records the finished task.
    fn record_event(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Some(event) = recorded_event::<PyValue>(event)? else {
            return Ok(false);
        };
        with_wake_batch(py, || self.tracker.record_event(event))?
            .map_err(|error| tracker_error(py, error))
    }

    /// Resumes the task `task_id`, which its runner paused, handing the runner `value` (what `handle.resumed()`
    /// returns). True exactly when this call resumed it: false for an unknown id or a task not paused.
    #[pyo3(signature = (task_id, value=None))]
    fn resume_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Id<TaskIdArgument>,
        value: Option<Py<PyAny>>,
    ) -> PyResult<bool> {
        let value = value.filter(|value| !value.is_none(py)).map(PyValue::new);
        with_wake_batch(py, || self.tracker.resume(&task_id.0, value))
    }

    /// Records the end of a task without its handle: `error` fails it (with `error_type` and `error_code`, if
    /// given), otherwise it completes with `result`. True exactly when this call moved the task out of running
    /// (the first transition wins).
    #[pyo3(signature = (task_id, *, result=None, error=None, error_type=None, error_code=None))]
    fn end_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Id<TaskIdArgument>,
        result: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        error_type: Option<&Bound<'_, PyAny>>,
        error_code: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let ended = arguments::end_outcome(result, error, error_type, error_code, |result| {
            Ok(PyValue::new(result.clone().unbind()))
        })?;
        with_wake_batch(py, || match ended {
            Ok(result) => self.tracker.end(&task_id.0, Ok(result)),
            Err(failure) => self.tracker.fail(&task_id.0, failure),
        })
    }

    /// Cancels the pending tasks that match every filter given (`metadata`: a mapping whose every key the
    /// task's metadata holds with an equal value), each with its pending descendants, and returns the ids of
    /// the matching tasks it moved to cancelled, in start order.
    #[pyo3(signature = (*, agent=None, status=None, metadata=None, reason=None))]
    fn cancel_subagent_tasks<'py>(
        &self,
        py: Python<'py>,
        agent: Option<&Bound<'py, PyAny>>,
        status: Option<&Bound<'py, PyAny>>,
        metadata: Option<&Bound<'py, PyAny>>,
        reason: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<String>> {
        let arguments = FilterArguments::new(agent, status, metadata, reason)?;
        let wanted = arguments.frozen_metadata()?;
        let holds_wanted = |metadata: Option<&PyValue>| {
            wanted.as_ref().is_none_or(|wanted| holds(wanted, metadata))
        };
        let mut filter = TaskFilter::new().metadata(holds_wanted);
        if let Some(agent) = &arguments.agent {
            filter = filter.agent(agent);
        }
        if let Some(status) = arguments.status {
            filter = filter.status(status);
        }
        let moved = with_wake_batch(py, || {
            self.tracker
                .cancel_matching(&filter, arguments.reason.as_deref())
        })?;
        Ok(moved.iter().map(ToString::to_string).collect())
    }

    /// Cancels every pending task; returns how many it moved to cancelled.
    #[pyo3(signature = (reason=None))]
    fn cancel(&self, py: Python<'_>, reason: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let reason = arguments::optional_string(reason, "reason")?;
        with_wake_batch(py, || self.tracker.cancel_all(reason.as_deref()))
    }

    /// Cancels every pending task, then refuses new starts; returns how many it moved to cancelled. A session
    /// of a registry leaves it once all its tasks are finished.
    #[pyo3(signature = (reason=None))]
    fn close(&self, py: Python<'_>, reason: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let reason = arguments::optional_string(reason, "reason")?;
        with_wake_batch(py, || self.tracker.close(reason.as_deref()))
    }

    /// A snapshot of one retained task, or None.
    fn subagent_task(&self, py: Python<'_>, task_id: Id<TaskIdArgument>) -> Option<SubagentTask> {
        self.tracker
            .get(&task_id.0)
            .map(|snapshot| SubagentTask::new(py, snapshot))
    }

    /// Snapshots of every retained task, in start order.
    fn subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        snapshots(py, self.tracker.tasks())
    }

    /// One page of the session's retained tasks (with `pending`, of its pending tasks), in start order: at most
    /// `limit` from `cursor` (None for the first page), and the cursor of the next page (None once done).
    #[pyo3(signature = (cursor=None, *, limit=None, pending=false))]
    fn subagent_tasks_page<'py>(
        &self,
        py: Python<'py>,
        cursor: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        pending: bool,
    ) -> PyResult<(Bound<'py, PyList>, Option<String>)> {
        let cursor = arguments::optional_string(cursor, "cursor")?;
        let limit = arguments::page_limit(limit)?;
        let (tasks, next) = self
            .tracker
            .tasks_page(pending, cursor.as_deref(), limit)
            .map_err(|error| tracker_error(py, error))?;
        Ok((snapshots(py, tasks)?, next))
    }

    /// The cancellation token of the retained task `task_id`, for code that holds no handle: it fires when the
    /// task is cancelled (or has fired), and never for one that completed or failed. Raises `UnknownTaskError`
    /// when no such task is retained.
    fn token(&self, py: Python<'_>, task_id: Id<TaskIdArgument>) -> PyResult<CancellationToken> {
        self.tracker
            .token(&task_id.0)
            .map(CancellationToken::new)
            .map_err(|error| tracker_error(py, error))
    }

    /// Forgets the finished tasks that ended at least `older_than` seconds ago, as the bound on finished tasks
    /// evicts them, and returns how many it forgot. Pending tasks are never forgotten.
    fn forget_finished(&self, older_than: Seconds<OlderThanArgument>) -> usize {
        self.tracker.forget_finished(older_than.0)
    }

    /// Snapshots of the pending (queued, running and paused) tasks, in start order.
    fn pending_subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        snapshots(py, self.tracker.pending())
    }

    /// Cancels `task_id` as `cancel_subagent_task` does, and returns whether it moved the task, a watch on its run
    /// and the cancel handlers of its subtree, for `cancel_subagent_task_and_wait`; raises `UnknownTaskError` for
    /// an unknown id.
    #[pyo3(signature = (task_id, reason))]
    fn _cancel_and_watch(
        slf: &Bound<'_, Self>,
        task_id: Id<TaskIdArgument>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(bool, TaskWatch, CancelHandlers)> {
        let py = slf.py();
        let reason = arguments::optional_string(reason, "reason")?;
        let wait = with_wake_batch(py, || {
            slf.get()
                .tracker
                .cancel_and_watch(&task_id.0, reason.as_deref())
        })?
        .map_err(|error| tracker_error(py, error))?;
        let watch = TaskWatch::new(wait.watch().clone(), slf.clone().into_any().unbind());
        Ok((wait.moved(), watch, CancelHandlers::new(wait)))
    }

    /// A watch on the current run of `task_id`; raises `UnknownTaskError` for an unknown id.
    fn _watch(slf: &Bound<'_, Self>, task_id: Id<TaskIdArgument>) -> PyResult<TaskWatch> {
        let py = slf.py();
        let watch = slf
            .get()
            .tracker
            .watch_or_error(&task_id.0)
            .map_err(|error| tracker_error(py, error))?;
        Ok(TaskWatch::new(watch, slf.clone().into_any().unbind()))
    }

    /// Subscribes to lifecycle events from this call on.
    fn _subscribe(&self) -> EventSubscription {
        EventSubscription::new(self.tracker.subscribe())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let mut outcome = Ok(());
        self.tracker.visit_values(|value| {
            if outcome.is_ok() {
                outcome = value.visit(&visit);
            }
        });
        outcome
    }

    fn __clear__(&self) {
        // Taken under the tasks' locks, dropped after: dropping a value may run Python code.
        let mut taken = Vec::new();
        self.tracker
            .visit_values(|value| taken.extend(value.take()));
        drop(taken);
    }

    /// Two `Session` objects are equal when they are the same session (a registry may hand out several).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Session>()
            .is_ok_and(|other| other.get().tracker.same_session(&self.tracker))
    }

    fn __hash__(&self) -> usize {
        self.tracker.session_key()
    }

    fn __repr__(&self) -> String {
        format!(
            "Session(session_id={}, retained={}, closed={})",
            python_repr(Some(self.tracker.session_id())),
            self.tracker.retained_count(),
            if self.tracker.is_closed() {
                "True"
            } else {
                "False"
            }
        )
    }
}
