//! An in-memory session's calls: every [`SessionStore`] call answered by the core's tracker.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;
use subagent_tracker::{
    CancelWait, EndTarget, InMemorySubagentTaskTracker, RecordedEvent, SubagentTaskSnapshot,
    TaskFailure, TaskFilter, TaskStart,
};

use super::{answer, HandleCalls};
use crate::arguments::{Id, TaskIdArgument};
use crate::asyncio_waker::{collecting_wake_batch, with_wake_batch};
use crate::awaitable::AwaitableTaskHandle;
use crate::errors::tracker_error;
use crate::filter_arguments::{holds, FilterArguments};
use crate::handle::{core_handle, SubagentTaskHandle};
use crate::python_types::PyValue;
use crate::runtime::MadeIn;
use crate::session_store::{Answer, BatchEnds, CancelWork, SessionStore};
use crate::snapshot::SubagentTask;
use crate::snapshot_record::records;
use crate::token::CancellationToken;

/// A session kept in this process: the core's tracker, whose values are the Python objects themselves.
#[derive(Clone)]
pub(crate) struct SessionCalls {
    pub(crate) tracker: InMemorySubagentTaskTracker<PyValue>,
    /// Whether the class that calls is seen through awaits (`AwaitableSession`).
    pub(crate) awaited: bool,
}

impl SessionCalls {
    fn answer<'py, T: IntoPyObject<'py>>(&self, py: Python<'py>, value: T) -> Answer<'py> {
        answer(py, self.awaited, value)
    }

    /// The runner's handle object for `handle`, of the class this session's family hands out.
    fn handle_object<'py>(
        &self,
        session: &Bound<'py, PyAny>,
        handle: subagent_tracker::SubagentTaskHandle<PyValue>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = session.py();
        let calls = HandleCalls::new(handle, session.clone().unbind(), self.awaited);
        Ok(if self.awaited {
            Bound::new(py, AwaitableTaskHandle::new(calls))?.into_any()
        } else {
            Bound::new(py, SubagentTaskHandle::new(calls))?.into_any()
        })
    }
}

fn snapshots(
    py: Python<'_>,
    snapshots: Vec<SubagentTaskSnapshot<PyValue>>,
) -> PyResult<Bound<'_, PyAny>> {
    let tasks = snapshots
        .into_iter()
        .map(|snapshot| SubagentTask::new(py, snapshot));
    Ok(PyList::new(py, tasks)?.into_any())
}

fn ids(ids: &[Arc<str>]) -> Vec<&str> {
    ids.iter().map(|id| &**id).collect()
}

impl SessionStore for SessionCalls {
    type Value = PyValue;
    type BatchHandle = Py<PyAny>;
    type Error = Infallible;
    type CancelWork = CancelWait<PyValue>;
    const WAITS_ON_THE_LOOP: bool = true;

    fn session_id(&self) -> &str {
        self.tracker.session_id()
    }

    fn same_session(&self, other: &SessionCalls) -> bool {
        self.tracker.same_session(&other.tracker)
    }

    fn max_finished_tasks(&self) -> usize {
        self.tracker.config().max_finished_tasks
    }

    fn start<'py>(&self, session: &Bound<'py, PyAny>, start: TaskStart<PyValue>) -> Answer<'py> {
        let py = session.py();
        let handle = with_wake_batch(py, || self.tracker.start(start))?
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, self.handle_object(session, handle)?)
    }

    fn start_batch<'py>(
        &self,
        session: &Bound<'py, PyAny>,
        starts: Vec<TaskStart<PyValue>>,
    ) -> Answer<'py> {
        let py = session.py();
        let handles = with_wake_batch(py, || self.tracker.start_batch(starts))?
            .map_err(|error| tracker_error(py, error))?;
        let handles = handles
            .into_iter()
            .map(|handle| self.handle_object(session, handle))
            .collect::<PyResult<Vec<_>>>()?;
        self.answer(py, PyList::new(py, handles)?)
    }

    fn reserve<'py>(
        &self,
        py: Python<'py>,
        start: TaskStart<PyValue>,
        claim_timeout: Option<Duration>,
    ) -> Answer<'py> {
        let reserved = with_wake_batch(py, || self.tracker.reserve(start, claim_timeout))?
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, &*reserved)
    }

    fn reserve_batch<'py>(
        &self,
        py: Python<'py>,
        reservations: Vec<(TaskStart<PyValue>, Option<Duration>)>,
    ) -> Answer<'py> {
        let reserved = with_wake_batch(py, || self.tracker.reserve_batch(reservations))?
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, ids(&reserved))
    }

    fn claim<'py>(&self, session: &Bound<'py, PyAny>, task_id: Id<TaskIdArgument>) -> Answer<'py> {
        let py = session.py();
        let handle = with_wake_batch(py, || self.tracker.claim(&task_id.0))?
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, self.handle_object(session, handle)?)
    }

    fn cancel_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        reason: Option<String>,
        before_start: bool,
    ) -> Answer<'py> {
        let moved = with_wake_batch(py, || {
            if before_start {
                self.tracker
                    .cancel_before_start(&task_id.0, reason.as_deref())
            } else {
                self.tracker.cancel(&task_id.0, reason.as_deref())
            }
        })?;
        self.answer(py, moved)
    }

    fn restore<'py>(
        &self,
        py: Python<'py>,
        snapshots: Vec<SubagentTaskSnapshot<PyValue>>,
    ) -> Answer<'py> {
        let restored = self
            .tracker
            .restore(snapshots)
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, restored)
    }

    fn record_event<'py>(
        &self,
        py: Python<'py>,
        event: Option<RecordedEvent<PyValue>>,
    ) -> Answer<'py> {
        let Some(event) = event else {
            return self.answer(py, false);
        };
        let changed = with_wake_batch(py, || self.tracker.record_event(event))?
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, changed)
    }

    fn resume_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        value: Option<PyValue>,
    ) -> Answer<'py> {
        self.answer(
            py,
            with_wake_batch(py, || self.tracker.resume(&task_id.0, value))?,
        )
    }

    fn end_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        ended: Result<Option<PyValue>, TaskFailure>,
    ) -> Answer<'py> {
        let moved = with_wake_batch(py, || match ended {
            Ok(result) => self.tracker.end(&task_id.0, Ok(result)),
            Err(failure) => self.tracker.fail(&task_id.0, failure),
        })?;
        self.answer(py, moved)
    }

    fn end_batch<'py>(&self, py: Python<'py>, ends: BatchEnds<Py<PyAny>, PyValue>) -> Answer<'py> {
        let (targets, ends): (Vec<_>, Vec<_>) = ends.into_iter().unzip();
        let ends = targets
            .iter()
            .map(|target| match target {
                EndTarget::Handle(handle) => core_handle(handle.bind(py)).map(EndTarget::Handle),
                EndTarget::TaskId(task_id) => Ok(EndTarget::TaskId(task_id.clone())),
            })
            .zip(ends)
            .map(|(target, end)| Ok((target?, end)))
            .collect::<PyResult<_>>()?;
        let moved = with_wake_batch(py, || self.tracker.end_batch(ends))?
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, moved)
    }

    fn cancel_matching<'py>(
        &self,
        py: Python<'py>,
        arguments: &FilterArguments<'py>,
    ) -> Answer<'py> {
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
        // The metadata filter runs Python code (comparisons), which may let another thread in.
        let moved = collecting_wake_batch(py, || {
            self.tracker
                .cancel_matching(&filter, arguments.reason.as_deref())
        })?;
        self.answer(py, ids(&moved))
    }

    fn cancel_all<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py> {
        self.answer(
            py,
            with_wake_batch(py, || self.tracker.cancel_all(reason.as_deref()))?,
        )
    }

    fn close<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py> {
        self.answer(
            py,
            with_wake_batch(py, || self.tracker.close(reason.as_deref()))?,
        )
    }

    fn is_closed<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.answer(py, self.tracker.is_closed())
    }

    fn token<'py>(&self, py: Python<'py>, task_id: Id<TaskIdArgument>) -> Answer<'py> {
        let token = self
            .tracker
            .token(&task_id.0)
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, CancellationToken::new(token))
    }

    fn task<'py>(&self, py: Python<'py>, task_id: Id<TaskIdArgument>) -> Answer<'py> {
        let task = self
            .tracker
            .get(&task_id.0)
            .map(|snapshot| SubagentTask::new(py, snapshot));
        self.answer(py, task)
    }

    fn tasks<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.answer(py, snapshots(py, self.tracker.tasks())?)
    }

    fn tasks_page<'py>(
        &self,
        py: Python<'py>,
        pending: bool,
        cursor: Option<String>,
        limit: usize,
    ) -> Answer<'py> {
        let (tasks, next) = self
            .tracker
            .tasks_page(pending, cursor.as_deref(), limit)
            .map_err(|error| tracker_error(py, error))?;
        self.answer(py, (snapshots(py, tasks)?, next))
    }

    fn forget_finished<'py>(&self, py: Python<'py>, older_than: Duration) -> Answer<'py> {
        self.answer(py, self.tracker.forget_finished(older_than))
    }

    fn pending<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.answer(py, snapshots(py, self.tracker.pending())?)
    }

    fn export<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.answer(py, records(&snapshots(py, self.tracker.tasks())?)?)
    }

    fn made_in(&self) -> MadeIn {
        MadeIn::here()
    }

    fn finished(
        &self,
        py: Python<'_>,
        task_id: Arc<str>,
    ) -> PyResult<
        impl Future<Output = Result<SubagentTaskSnapshot<PyValue>, Infallible>> + Send + 'static,
    > {
        let watch = self
            .tracker
            .watch_or_error(&task_id)
            .map_err(|error| tracker_error(py, error))?;
        Ok(async move {
            watch.wait_finished().await;
            Ok(watch.snapshot())
        })
    }

    fn cancel_work(
        &self,
        py: Python<'_>,
        task_id: Arc<str>,
        reason: Option<String>,
    ) -> PyResult<CancelWait<PyValue>> {
        with_wake_batch(py, || {
            self.tracker.cancel_and_watch(&task_id, reason.as_deref())
        })?
        .map_err(|error| tracker_error(py, error))
    }

    fn snapshot_object(
        py: Python<'_>,
        snapshot: SubagentTaskSnapshot<PyValue>,
    ) -> PyResult<SubagentTask> {
        Ok(SubagentTask::new(py, snapshot))
    }

    fn error(_py: Python<'_>, error: Infallible) -> PyErr {
        match error {}
    }
}

impl CancelWork for CancelWait<PyValue> {
    type Value = PyValue;
    type Error = Infallible;

    async fn done(&self) -> Result<SubagentTaskSnapshot<PyValue>, Infallible> {
        Ok(self.finished().await)
    }

    async fn still_running(&self) -> Result<(bool, Vec<Arc<str>>), Infallible> {
        Ok((!self.watch().is_finished(), self.handlers_at_work()))
    }
}
