//! A session's calls: every method of `RedisSession` and `AsyncRedisSession` as one future for the runtime and
//! one conversion of its outcome.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::IntoPyObjectExt;
use subagent_tracker::{
    EndTarget, RecordedEvent, SubagentTaskSnapshot, TaskEnd, TaskFailure, TaskFilter, TaskStart,
};
use subagent_tracker_redis::{
    RedisSession as CoreSession, RedisTaskHandle as CoreHandle, RedisTrackerError, SharedTaskHandle,
};

use super::{get_task, object, snapshot, snapshots, Delivery, HandleCalls};
use crate::arguments::{Id, TaskIdArgument};
use crate::errors::redis_error;
use crate::filter_arguments::FilterArguments;
use crate::redis_events::RedisEventReader;
use crate::runtime::MadeIn;
use crate::session_store::{Answer, CancelWork, SessionStore};
use crate::snapshot::SubagentTask;
use crate::snapshot_record::records;
use crate::token::CancellationToken;

/// A session's calls.
#[derive(Clone)]
pub(crate) struct SessionCalls {
    pub(crate) session: CoreSession,
    pub(crate) made_in: MadeIn,
    pub(crate) delivery: Delivery,
}

impl SessionCalls {
    /// The session as the Python class of its delivery.
    pub(crate) fn into_object(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        (self.delivery.session_class)(py, self)
    }

    /// Runs `call` on the session and hands over its value, converted by `convert`.
    fn call<'py, C, F, T>(
        &self,
        py: Python<'py>,
        call: C,
        convert: impl FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    ) -> Answer<'py>
    where
        C: FnOnce(CoreSession) -> F,
        F: Future<Output = Result<T, RedisTrackerError>> + Send + 'static,
        T: Send + 'static,
    {
        self.delivery
            .call(py, self.made_in, call(self.session.clone()), convert)
    }

    /// Runs `call` on the session and hands over its value as a Python object: the shape of most calls.
    fn value<'py, C, F, T>(&self, py: Python<'py>, call: C) -> Answer<'py>
    where
        C: FnOnce(CoreSession) -> F,
        F: Future<Output = Result<T, RedisTrackerError>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        self.call(py, call, |py, value| object(py, value))
    }

    /// A runner's handle for `handle`, as the Python class of this delivery.
    fn handle_object(&self, py: Python<'_>, handle: CoreHandle) -> PyResult<Py<PyAny>> {
        let calls = HandleCalls::new(
            py,
            handle,
            self.session.clone(),
            self.made_in,
            self.delivery,
        )?;
        (self.delivery.handle_class)(py, calls)
    }

    /// The same session, its outcomes handed over by `delivery`.
    pub(crate) fn with_delivery(&self, delivery: Delivery) -> SessionCalls {
        SessionCalls {
            session: self.session.clone(),
            made_in: self.made_in,
            delivery,
        }
    }

    /// A reader of the session's events from this call on.
    pub(crate) fn subscribe<'py>(&self, py: Python<'py>) -> Answer<'py> {
        let made_in = self.made_in;
        self.call(
            py,
            |session| async move { session.subscribe().await },
            move |py, subscription| {
                Ok(Py::new(py, RedisEventReader::start(subscription, made_in)?)?.into_any())
            },
        )
    }
}

impl SessionStore for SessionCalls {
    type Value = String;
    type BatchHandle = SharedTaskHandle;
    type Error = RedisTrackerError;
    type CancelWork = RedisCancelWork;
    const WAITS_ON_THE_LOOP: bool = false;

    fn session_id(&self) -> &str {
        self.session.session_id()
    }

    fn same_session(&self, other: &SessionCalls) -> bool {
        self.session.same_session(&other.session)
    }

    fn start<'py>(&self, session: &Bound<'py, PyAny>, start: TaskStart<String>) -> Answer<'py> {
        let calls = self.clone();
        self.call(
            session.py(),
            |core| async move { core.start(start).await },
            move |py, handle| calls.handle_object(py, handle),
        )
    }

    fn start_batch<'py>(
        &self,
        session: &Bound<'py, PyAny>,
        starts: Vec<TaskStart<String>>,
    ) -> Answer<'py> {
        let calls = self.clone();
        self.call(
            session.py(),
            |core| async move { core.start_batch(starts).await },
            move |py, handles| {
                let objects = handles
                    .into_iter()
                    .map(|handle| calls.handle_object(py, handle))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyList::new(py, objects)?.into_any().unbind())
            },
        )
    }

    fn reserve_batch<'py>(
        &self,
        py: Python<'py>,
        reservations: Vec<(TaskStart<String>, Option<Duration>)>,
    ) -> Answer<'py> {
        self.call(
            py,
            |session| async move { session.reserve_batch(reservations).await },
            |py, task_ids| object(py, task_ids.iter().map(|id| &**id).collect::<Vec<&str>>()),
        )
    }

    fn reserve<'py>(
        &self,
        py: Python<'py>,
        start: TaskStart<String>,
        claim_timeout: Option<Duration>,
    ) -> Answer<'py> {
        self.call(
            py,
            |session| async move { session.reserve(start, claim_timeout).await },
            |py, task_id| object(py, &*task_id),
        )
    }

    fn claim<'py>(&self, session: &Bound<'py, PyAny>, task_id: Id<TaskIdArgument>) -> Answer<'py> {
        let calls = self.clone();
        self.call(
            session.py(),
            |core| async move { core.claim(&task_id.0).await },
            move |py, handle| calls.handle_object(py, handle),
        )
    }

    fn cancel_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        reason: Option<String>,
        before_start: bool,
    ) -> Answer<'py> {
        self.value(py, move |session| async move {
            if before_start {
                session
                    .cancel_before_start(&task_id.0, reason.as_deref())
                    .await
            } else {
                session.cancel(&task_id.0, reason.as_deref()).await
            }
        })
    }

    fn restore<'py>(
        &self,
        py: Python<'py>,
        snapshots: Vec<SubagentTaskSnapshot<String>>,
    ) -> Answer<'py> {
        self.value(py, move |session| async move {
            session.restore(snapshots).await
        })
    }

    fn record_event<'py>(
        &self,
        py: Python<'py>,
        event: Option<RecordedEvent<String>>,
    ) -> Answer<'py> {
        self.value(py, move |session| async move {
            match event {
                Some(event) => session.record_event(event).await,
                // A kind the session ignores: nothing to ask Redis.
                None => Ok(false),
            }
        })
    }

    fn resume_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        value: Option<String>,
    ) -> Answer<'py> {
        self.value(py, move |session| async move {
            session.resume(&task_id.0, value.as_deref()).await
        })
    }

    fn end_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        ended: Result<Option<String>, TaskFailure>,
    ) -> Answer<'py> {
        self.value(py, move |session| async move {
            match &ended {
                Ok(result) => session.end(&task_id.0, Ok(result.as_deref())).await,
                Err(failure) => session.fail(&task_id.0, failure).await,
            }
        })
    }

    /// Ends the tasks of a batch in one round trip (`RedisSession::end_batch_shared`); gives per end whether it
    /// moved its task.
    fn end_batch<'py>(
        &self,
        py: Python<'py>,
        ends: Vec<(EndTarget<SharedTaskHandle>, TaskEnd<String>)>,
    ) -> Answer<'py> {
        let batch = self
            .session
            .end_batch_shared(ends)
            .map_err(|error| crate::errors::tracker_error(py, error))?;
        self.delivery.call(py, self.made_in, batch, object)
    }

    fn cancel_matching<'py>(
        &self,
        py: Python<'py>,
        arguments: &FilterArguments<'py>,
    ) -> Answer<'py> {
        let metadata = arguments.json_metadata()?;
        let (agent, status, reason) = (
            arguments.agent.clone(),
            arguments.status,
            arguments.reason.clone(),
        );
        self.call(
            py,
            |session| async move {
                let mut filter = TaskFilter::new();
                if let Some(agent) = &agent {
                    filter = filter.agent(agent);
                }
                if let Some(status) = status {
                    filter = filter.status(status);
                }
                if let Some(metadata) = &metadata {
                    filter = filter.metadata(metadata.as_str());
                }
                session.cancel_matching(&filter, reason.as_deref()).await
            },
            |py, moved| object(py, moved.iter().map(|id| &**id).collect::<Vec<&str>>()),
        )
    }

    fn cancel_all<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py> {
        self.value(py, move |session| async move {
            session.cancel_all(reason.as_deref()).await
        })
    }

    fn close<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py> {
        self.value(py, move |session| async move {
            session.close(reason.as_deref()).await
        })
    }

    fn is_closed<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.value(py, move |session| async move { session.is_closed().await })
    }

    fn max_finished_tasks(&self) -> usize {
        self.session.max_finished_tasks()
    }

    fn task<'py>(&self, py: Python<'py>, task_id: Id<TaskIdArgument>) -> Answer<'py> {
        get_task(
            py,
            &self.session,
            self.made_in,
            self.delivery,
            task_id.0,
            None,
        )
    }

    fn token<'py>(&self, py: Python<'py>, task_id: Id<TaskIdArgument>) -> Answer<'py> {
        self.call(
            py,
            |session| async move { session.token(&task_id.0).await },
            |py, token| object(py, CancellationToken::new(token)),
        )
    }

    fn tasks<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.call(
            py,
            |session| async move { session.tasks().await },
            snapshots,
        )
    }

    fn tasks_page<'py>(
        &self,
        py: Python<'py>,
        pending: bool,
        cursor: Option<String>,
        limit: usize,
    ) -> Answer<'py> {
        self.call(
            py,
            move |session| async move { session.tasks_page(pending, cursor.as_deref(), limit).await },
            |py, (tasks, next)| (snapshots(py, tasks)?, next).into_py_any(py),
        )
    }

    fn forget_finished<'py>(&self, py: Python<'py>, older_than: Duration) -> Answer<'py> {
        self.value(py, move |session| async move {
            session.forget_finished(older_than).await
        })
    }

    fn pending<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.call(
            py,
            |session| async move { session.pending().await },
            snapshots,
        )
    }

    fn export<'py>(&self, py: Python<'py>) -> Answer<'py> {
        self.call(
            py,
            |session| async move { session.tasks().await },
            |py, listed| {
                Ok(records(snapshots(py, listed)?.bind(py))?
                    .into_any()
                    .unbind())
            },
        )
    }

    fn made_in(&self) -> MadeIn {
        self.made_in
    }

    fn finished(
        &self,
        _py: Python<'_>,
        task_id: Arc<str>,
    ) -> PyResult<
        impl Future<Output = Result<SubagentTaskSnapshot<String>, RedisTrackerError>> + Send + 'static,
    > {
        let session = self.session.clone();
        Ok(async move { session.wait_finished(&task_id).await })
    }

    fn cancel_work(
        &self,
        _py: Python<'_>,
        task_id: Arc<str>,
        reason: Option<String>,
    ) -> PyResult<RedisCancelWork> {
        Ok(RedisCancelWork {
            session: self.session.clone(),
            task_id,
            reason,
        })
    }

    fn snapshot_object(
        py: Python<'_>,
        task: SubagentTaskSnapshot<String>,
    ) -> PyResult<SubagentTask> {
        snapshot(py, task)
    }

    fn error(py: Python<'_>, error: RedisTrackerError) -> PyErr {
        redis_error(py, error)
    }
}

/// A cancel of a task kept in Redis, made once the wait starts, and its work, wherever it runs.
pub(crate) struct RedisCancelWork {
    session: CoreSession,
    task_id: Arc<str>,
    reason: Option<String>,
}

impl CancelWork for RedisCancelWork {
    type Value = String;
    type Error = RedisTrackerError;

    async fn done(&self) -> Result<SubagentTaskSnapshot<String>, RedisTrackerError> {
        self.session
            .cancel_and_wait(&self.task_id, self.reason.as_deref())
            .await
    }

    async fn still_running(&self) -> Result<(bool, Vec<Arc<str>>), RedisTrackerError> {
        Ok(match self.session.cancel_work(&self.task_id).await? {
            Some((finished, at_work)) => (!finished, at_work),
            None => (false, Vec::new()),
        })
    }
}
