//! `Session`: one scope of subagent tasks, backed by the core's in-memory tracker.

use pyo3::prelude::*;
use pyo3::types::PyList;
use subagent_tracker::{InMemorySubagentTaskTracker, TaskStart, TrackerConfig};

use crate::arguments;
use crate::asyncio_waker::with_wake_batch;
use crate::errors::tracker_error;
use crate::events::EventSubscription;
use crate::handle::SubagentTaskHandle;
use crate::python_types::{python_repr, PyValue};
use crate::snapshot::SubagentTask;
use crate::task_watch::TaskWatch;

/// A scope that owns subagent tasks. The Python `subagent_tracker.Session` adds the async methods.
#[pyclass(subclass, frozen, module = "subagent_tracker._native")]
pub(crate) struct Session {
    tracker: InMemorySubagentTaskTracker<PyValue>,
}

fn snapshots(
    py: Python<'_>,
    snapshots: Vec<subagent_tracker::SubagentTaskSnapshot<PyValue>>,
) -> PyResult<Bound<'_, PyList>> {
    PyList::new(py, snapshots.into_iter().map(SubagentTask::new))
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (session_id=None, *, max_finished_tasks=None, event_buffer=None))]
    fn new(
        session_id: Option<&Bound<'_, PyAny>>,
        max_finished_tasks: Option<&Bound<'_, PyAny>>,
        event_buffer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Session> {
        let session_id = match session_id.filter(|value| !value.is_none()) {
            Some(value) => Some(arguments::task_id(value, "session_id")?),
            None => None,
        };
        let max_finished_tasks = match max_finished_tasks {
            Some(value) => arguments::count(value, "max_finished_tasks")?,
            None => subagent_tracker::DEFAULT_MAX_FINISHED_TASKS,
        };
        let event_buffer = match event_buffer {
            Some(value) => arguments::count(value, "event_buffer")?.max(1),
            None => subagent_tracker::DEFAULT_EVENT_BUFFER,
        };
        let config = TrackerConfig {
            max_finished_tasks,
            event_buffer,
        };
        Ok(Session {
            tracker: InMemorySubagentTaskTracker::with_config(session_id.as_deref(), config),
        })
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

    /// Starts a task and returns the runner's handle.
    // One parameter per Python keyword argument: the signature is the Python API.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        task_id=None, *, parent_id=None, agent=None, description=None, metadata=None,
        timeout=None, deadline=None, detached=false, linked=None
    ))]
    fn start_subagent_task(
        &self,
        py: Python<'_>,
        task_id: Option<&Bound<'_, PyAny>>,
        parent_id: Option<&Bound<'_, PyAny>>,
        agent: Option<&Bound<'_, PyAny>>,
        description: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
        detached: bool,
        linked: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SubagentTaskHandle> {
        let mut start = TaskStart::new();
        if let Some(task_id) = task_id.filter(|value| !value.is_none()) {
            start = start.task_id(arguments::task_id(task_id, "task_id")?);
        }
        if let Some(parent_id) = parent_id.filter(|value| !value.is_none()) {
            start = start.parent_id(arguments::task_id(parent_id, "parent_id")?);
        }
        if let Some(agent) = arguments::optional_string(agent, "agent")? {
            start = start.agent(agent);
        }
        if let Some(description) = arguments::optional_string(description, "description")? {
            start = start.description(description);
        }
        if let Some(metadata) = arguments::metadata(metadata)? {
            start = start.metadata(PyValue::new(metadata));
        }
        if let Some(timeout) = arguments::timeout(timeout)? {
            start = start.timeout(timeout);
        }
        if let Some(deadline) = arguments::deadline(deadline)? {
            start = start.deadline(deadline);
        }
        start = start.detached(detached);
        for token in arguments::tokens(linked, "linked")? {
            start = start.linked(token);
        }
        let handle = with_wake_batch(py, || self.tracker.start(start))
            .map_err(|error| tracker_error(py, error))?;
        Ok(SubagentTaskHandle::new(handle))
    }

    /// Cancels a running task and its running descendants; True exactly when this call moved the task.
    #[pyo3(signature = (task_id, reason=None))]
    fn cancel_subagent_task(
        &self,
        py: Python<'_>,
        task_id: &Bound<'_, PyAny>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let task_id = arguments::task_id(task_id, "task_id")?;
        let reason = arguments::optional_string(reason, "reason")?;
        Ok(with_wake_batch(py, || {
            self.tracker.cancel(&task_id, reason.as_deref())
        }))
    }

    /// Cancels every running task; returns how many it moved to cancelled.
    #[pyo3(signature = (reason=None))]
    fn cancel(&self, py: Python<'_>, reason: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let reason = arguments::optional_string(reason, "reason")?;
        Ok(with_wake_batch(py, || {
            self.tracker.cancel_all(reason.as_deref())
        }))
    }

    /// Cancels every running task, then refuses new starts; returns how many it moved to cancelled.
    #[pyo3(signature = (reason=None))]
    fn close(&self, py: Python<'_>, reason: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let reason = arguments::optional_string(reason, "reason")?;
        Ok(with_wake_batch(py, || {
            self.tracker.close(reason.as_deref())
        }))
    }

    /// A snapshot of one retained task, or None.
    fn subagent_task(&self, task_id: &Bound<'_, PyAny>) -> PyResult<Option<SubagentTask>> {
        let task_id = arguments::task_id(task_id, "task_id")?;
        Ok(self.tracker.get(&task_id).map(SubagentTask::new))
    }

    /// Snapshots of every retained task, in start order.
    fn subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        snapshots(py, self.tracker.tasks())
    }

    /// Snapshots of the running tasks, in start order.
    fn pending_subagent_tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        snapshots(py, self.tracker.pending())
    }

    /// A watch on the current run of `task_id`; raises `UnknownTaskError` for an unknown id.
    fn _watch(&self, py: Python<'_>, task_id: &Bound<'_, PyAny>) -> PyResult<TaskWatch> {
        let task_id = arguments::task_id(task_id, "task_id")?;
        match self.tracker.watch(&task_id) {
            Some(watch) => Ok(TaskWatch::new(watch)),
            None => Err(tracker_error(
                py,
                subagent_tracker::TrackerError::UnknownTask(format!(
                    "no task {task_id:?} is retained in session {:?}",
                    &**self.tracker.session_id()
                )),
            )),
        }
    }

    /// Subscribes to lifecycle events from this call on.
    fn _subscribe(&self) -> EventSubscription {
        EventSubscription::new(self.tracker.subscribe())
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
