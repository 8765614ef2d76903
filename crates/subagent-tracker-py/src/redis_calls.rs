//! The calls that Redis registries, sessions and runners' handles make, written once for both ways of handing
//! back their outcome: blocking (`RedisRegistry`) and asyncio (`AsyncRedisRegistry`).
//!
//! Every call builds one future for the runtime and one conversion of its outcome; [`Delivery`] decides whether
//! the calling thread waits for it or gets an asyncio future at once. The two families of classes only declare
//! the Python signatures and pick their delivery.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::IntoPyObjectExt;
use subagent_tracker::{
    cancel_wait_timeout_message, check_batch_ends, EndTarget, RecordedEvent, ResumeWatch,
    Resumption, SubagentTaskSnapshot, TaskEnd, TaskFailure, TaskFilter, TaskStart, TrackerConfig,
};
use subagent_tracker_redis::{
    RedisRegistry as CoreRegistry, RedisSession as CoreSession, RedisTaskHandle as CoreHandle,
};

use crate::arguments::{self, from_json_text, json_text, Id, TaskIdArgument};
use crate::asyncio_waker::running_loop;
use crate::errors::redis_error;
use crate::filter_arguments::FilterArguments;
use crate::loop_inbox::{asyncio_future, WhenAbandoned};
use crate::package_imports::event_stream_class;
use crate::python_types::PyValue;
use crate::ready::Ready;
use crate::redis_events::RedisEventReader;
use crate::resume_wait::{resumption_for_python, wait_for_resume, ResumeWait};
use crate::runner_exit::RunnerExit;
use crate::runtime::{block_on, MadeIn};
use crate::snapshot::SubagentTask;
use crate::token::CancellationToken;

/// How a family of Redis classes hands the outcome of a call to Python, and which of its classes wrap the
/// sessions and runners' handles that calls make. Each family declares its own (`BLOCKING` in
/// `redis_registry`, `ASYNCIO` in `async_redis`), so the calls here never name a class.
#[derive(Clone, Copy)]
pub(crate) struct Delivery {
    pub(crate) waiting: Waiting,
    pub(crate) session_class: fn(Python<'_>, SessionCalls) -> PyResult<Py<PyAny>>,
    pub(crate) handle_class: fn(Python<'_>, HandleCalls) -> PyResult<Py<PyAny>>,
}

/// Who waits for a call to Redis.
#[derive(Clone, Copy)]
pub(crate) enum Waiting {
    /// The calling thread waits, with the interpreter released: for threads and scripts.
    Blocking,
    /// The call returns an asyncio future of the running loop at once; the event loop never waits on Redis.
    /// Cancelling the awaiting coroutine abandons the wait, never the call: a transition always completes.
    Asyncio,
}

impl Delivery {
    /// Runs `future` and hands over its outcome, converted by `convert`.
    pub(crate) fn deliver<'py, F, T>(
        self,
        py: Python<'py>,
        made_in: MadeIn,
        future: F,
        convert: impl FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        match self.waiting {
            Waiting::Blocking => {
                let outcome = block_on(py, made_in, future)?;
                Ok(convert(py, outcome)?.into_bound(py))
            }
            Waiting::Asyncio => asyncio_future(py, made_in, WhenAbandoned::Finish, future, convert),
        }
    }

    /// Hands over `value` at once, where the core answers without the network: the value itself for the
    /// blocking API, an awaitable already done for asyncio (no trip through the runtime and the loop), which
    /// still needs a running loop, as every call of the asyncio API does (contract §20).
    fn ready<'py>(self, py: Python<'py>, value: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match self.waiting {
            Waiting::Blocking => Ok(value.into_bound(py)),
            Waiting::Asyncio => {
                running_loop(py)?;
                Ok(Py::new(py, Ready::new(value))?.into_bound(py).into_any())
            }
        }
    }
}

/// A value as a Python object.
fn object<'py, T: IntoPyObject<'py>>(py: Python<'py>, value: T) -> PyResult<Py<PyAny>> {
    value.into_bound_py_any(py).map(Bound::unbind)
}

/// A registry's calls.
pub(crate) struct RegistryCalls {
    pub(crate) registry: CoreRegistry,
    pub(crate) made_in: MadeIn,
    pub(crate) delivery: Delivery,
}

impl RegistryCalls {
    pub(crate) fn session<'py>(
        &self,
        py: Python<'py>,
        session_id: Option<String>,
        config: TrackerConfig,
    ) -> PyResult<Bound<'py, PyAny>> {
        let registry = self.registry.clone();
        let (made_in, delivery) = (self.made_in, self.delivery);
        self.delivery.deliver(
            py,
            self.made_in,
            async move { registry.session(session_id.as_deref(), config).await },
            move |py, session| {
                let session = session.map_err(|error| redis_error(py, error))?;
                SessionCalls {
                    session,
                    made_in,
                    delivery,
                }
                .into_object(py)
            },
        )
    }

    pub(crate) fn get_session<'py>(
        &self,
        py: Python<'py>,
        session_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let registry = self.registry.clone();
        let (made_in, delivery) = (self.made_in, self.delivery);
        self.delivery.deliver(
            py,
            self.made_in,
            async move { registry.get_session(&session_id).await },
            move |py, session| match session.map_err(|error| redis_error(py, error))? {
                Some(session) => SessionCalls {
                    session,
                    made_in,
                    delivery,
                }
                .into_object(py),
                None => Ok(py.None()),
            },
        )
    }

    pub(crate) fn sessions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let registry = self.registry.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { registry.sessions().await },
            |py, sessions| object(py, sessions.map_err(|error| redis_error(py, error))?),
        )
    }
}

/// A session's calls.
pub(crate) struct SessionCalls {
    pub(crate) session: CoreSession,
    pub(crate) made_in: MadeIn,
    pub(crate) delivery: Delivery,
}

impl SessionCalls {
    /// The session as the Python class of its delivery.
    fn into_object(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        (self.delivery.session_class)(py, self)
    }

    pub(crate) fn session_id(&self) -> &str {
        self.session.session_id()
    }

    pub(crate) fn same_session(&self, other: &SessionCalls) -> bool {
        self.session.same_session(&other.session)
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

    fn twin(&self) -> SessionCalls {
        self.with_delivery(self.delivery)
    }

    /// The same session, its outcomes handed over by `delivery`.
    pub(crate) fn with_delivery(&self, delivery: Delivery) -> SessionCalls {
        SessionCalls {
            session: self.session.clone(),
            made_in: self.made_in,
            delivery,
        }
    }

    pub(crate) fn start<'py>(
        &self,
        py: Python<'py>,
        start: TaskStart<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (session, calls) = (self.session.clone(), self.twin());
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.start(start).await },
            move |py, handle| {
                calls.handle_object(py, handle.map_err(|error| redis_error(py, error))?)
            },
        )
    }

    pub(crate) fn start_batch<'py>(
        &self,
        py: Python<'py>,
        starts: Vec<TaskStart<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (session, calls) = (self.session.clone(), self.twin());
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.start_batch(starts).await },
            move |py, handles| {
                let handles = handles.map_err(|error| redis_error(py, error))?;
                let objects = handles
                    .into_iter()
                    .map(|handle| calls.handle_object(py, handle))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyList::new(py, objects)?.into_any().unbind())
            },
        )
    }

    pub(crate) fn reserve_batch<'py>(
        &self,
        py: Python<'py>,
        reservations: Vec<(TaskStart<String>, Option<Duration>)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.reserve_batch(reservations).await },
            |py, task_ids| {
                let task_ids = task_ids.map_err(|error| redis_error(py, error))?;
                object(py, task_ids.iter().map(|id| &**id).collect::<Vec<&str>>())
            },
        )
    }

    pub(crate) fn reserve<'py>(
        &self,
        py: Python<'py>,
        start: TaskStart<String>,
        claim_timeout: Option<Duration>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.reserve(start, claim_timeout).await },
            |py, task_id| object(py, &*task_id.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn claim<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (session, calls) = (self.session.clone(), self.twin());
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.claim(&task_id.0).await },
            move |py, handle| {
                calls.handle_object(py, handle.map_err(|error| redis_error(py, error))?)
            },
        )
    }

    pub(crate) fn cancel_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        reason: Option<String>,
        before_start: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move {
                if before_start {
                    session
                        .cancel_before_start(&task_id.0, reason.as_deref())
                        .await
                } else {
                    session.cancel(&task_id.0, reason.as_deref()).await
                }
            },
            |py, cancelled| object(py, cancelled.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn restore<'py>(
        &self,
        py: Python<'py>,
        snapshots: Vec<SubagentTaskSnapshot<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.restore(snapshots).await },
            |py, restored| object(py, restored.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn record_event<'py>(
        &self,
        py: Python<'py>,
        event: Option<RecordedEvent<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move {
                match event {
                    Some(event) => session.record_event(event).await,
                    // A kind the session ignores: nothing to ask Redis.
                    None => Ok(false),
                }
            },
            |py, changed| object(py, changed.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn resume_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        value: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.resume(&task_id.0, value.as_deref()).await },
            |py, resumed| object(py, resumed.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn end_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        ended: Result<Option<String>, TaskFailure>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move {
                match &ended {
                    Ok(result) => session.end(&task_id.0, Ok(result.as_deref())).await,
                    Err(failure) => session.fail(&task_id.0, failure).await,
                }
            },
            |py, ended| object(py, ended.map_err(|error| redis_error(py, error))?),
        )
    }

    /// Ends the tasks of a batch in one round trip (`RedisSession::end_batch`); gives per end whether it moved
    /// its task.
    pub(crate) fn end_batch<'py>(
        &self,
        py: Python<'py>,
        ends: Vec<(EndTarget<BatchHandle>, TaskEnd<String>)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // The core's rule for a batch, checked before any handle is locked: a handle named twice would wait for
        // itself. (Each handle's session is checked by the core, once locked.)
        check_batch_ends(
            &Arc::from(self.session_id()),
            &ends,
            |_| true,
            |handle| handle.task_id.clone(),
        )
        .map_err(|error| crate::errors::tracker_error(py, error))?;
        let session = self.session.clone();
        let (targets, ends): (Vec<_>, Vec<_>) = ends.into_iter().unzip();
        let targets: Vec<EndTarget<Arc<tokio::sync::Mutex<CoreHandle>>>> = targets
            .into_iter()
            .map(|target| match target {
                EndTarget::Handle(handle) => EndTarget::Handle(handle.handle),
                EndTarget::TaskId(task_id) => EndTarget::TaskId(task_id),
            })
            .collect();
        self.delivery.deliver(
            py,
            self.made_in,
            async move {
                // Each handle is locked in the order of its address, the same for every batch, so that batches
                // sharing handles never wait for each other in a circle.
                let mut order: Vec<usize> = (0..targets.len()).collect();
                order.sort_by_key(|&index| match &targets[index] {
                    EndTarget::Handle(handle) => Arc::as_ptr(handle) as usize,
                    EndTarget::TaskId(_) => 0,
                });
                let mut guards: Vec<Option<tokio::sync::MutexGuard<'_, CoreHandle>>> =
                    (0..targets.len()).map(|_| None).collect();
                for index in order {
                    if let EndTarget::Handle(handle) = &targets[index] {
                        guards[index] = Some(handle.lock().await);
                    }
                }
                let batch = targets
                    .iter()
                    .zip(guards.iter_mut())
                    .zip(ends)
                    .map(|((target, guard), end)| {
                        let target = match (target, guard) {
                            (EndTarget::TaskId(task_id), _) => EndTarget::TaskId(task_id.clone()),
                            (EndTarget::Handle(_), guard) => EndTarget::Handle(
                                &mut **guard.as_mut().expect("every handle of the batch is locked"),
                            ),
                        };
                        (target, end)
                    })
                    .collect();
                session.end_batch(batch).await
            },
            |py, moved| object(py, moved.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn cancel_matching<'py>(
        &self,
        py: Python<'py>,
        arguments: &FilterArguments<'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let metadata = arguments.json_metadata()?;
        let (agent, status, reason) = (
            arguments.agent.clone(),
            arguments.status,
            arguments.reason.clone(),
        );
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move {
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
            |py, moved| {
                let moved = moved.map_err(|error| redis_error(py, error))?;
                object(
                    py,
                    moved.iter().map(ToString::to_string).collect::<Vec<_>>(),
                )
            },
        )
    }

    pub(crate) fn cancel_all<'py>(
        &self,
        py: Python<'py>,
        reason: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.cancel_all(reason.as_deref()).await },
            |py, moved| object(py, moved.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn close<'py>(
        &self,
        py: Python<'py>,
        reason: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.close(reason.as_deref()).await },
            |py, moved| object(py, moved.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn is_closed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.is_closed().await },
            |py, closed| object(py, closed.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn max_finished_tasks(&self) -> usize {
        self.session.max_finished_tasks()
    }

    pub(crate) fn task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        get_task(
            py,
            &self.session,
            self.made_in,
            self.delivery,
            task_id.0,
            None,
        )
    }

    pub(crate) fn token<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.token(&task_id.0).await },
            |py, token| {
                let token = token.map_err(|error| redis_error(py, error))?;
                object(py, CancellationToken::new(token))
            },
        )
    }

    pub(crate) fn tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.tasks().await },
            |py, listed| snapshots(py, listed.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn tasks_page<'py>(
        &self,
        py: Python<'py>,
        pending: bool,
        cursor: Option<String>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.tasks_page(pending, cursor.as_deref(), limit).await },
            |py, page| {
                let (tasks, next) = page.map_err(|error| redis_error(py, error))?;
                (snapshots(py, tasks)?, next).into_py_any(py)
            },
        )
    }

    pub(crate) fn forget_finished<'py>(
        &self,
        py: Python<'py>,
        older_than: Duration,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.forget_finished(older_than).await },
            |py, forgotten| object(py, forgotten.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.pending().await },
            |py, listed| snapshots(py, listed.map_err(|error| redis_error(py, error))?),
        )
    }

    /// An asyncio future of the task's final snapshot, whichever the delivery: waiting is async in every
    /// session. Cancelling the awaiting coroutine stops the wait.
    pub(crate) fn wait_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        timeout: Option<Duration>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        let wait = async move {
            let finished = session.wait_finished(&task_id.0);
            match timeout {
                Some(timeout) => tokio::time::timeout(timeout, finished)
                    .await
                    .map_err(|_| (task_id.0.clone(), timeout)),
                None => Ok(finished.await),
            }
        };
        asyncio_future(
            py,
            self.made_in,
            WhenAbandoned::Stop,
            wait,
            |py, outcome| match outcome {
                Ok(Ok(task)) => Ok(Py::new(py, snapshot(py, task)?)?.into_any()),
                Ok(Err(error)) => Err(redis_error(py, error)),
                Err((task_id, timeout)) => Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                "task {task_id:?} did not finish within {} seconds; its runner is still running",
                timeout.as_secs_f64()
            ))),
            },
        )
    }

    /// The session's events from this call on, as an `EventStream`.
    /// An asyncio future of the final snapshot after a cancel whose work is done: the runner has ended and the
    /// cancel handlers of the subtree are reported done, wherever they ran. A timeout names what still runs.
    pub(crate) fn cancel_and_wait_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        reason: Option<String>,
        timeout: Option<Duration>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session.clone();
        let wait = async move {
            let cancelled = session.cancel_and_wait(&task_id.0, reason.as_deref());
            let Some(timeout) = timeout else {
                return Ok(cancelled.await);
            };
            if let Ok(outcome) = tokio::time::timeout(timeout, cancelled).await {
                return Ok(outcome);
            }
            let (runner_running, at_work) = match session.cancel_work(&task_id.0).await {
                Ok(Some((finished, at_work))) => (!finished, at_work),
                Ok(None) => (false, Vec::new()),
                Err(error) => return Ok(Err(error)),
            };
            match cancel_wait_timeout_message(&task_id.0, timeout, runner_running, &at_work) {
                Some(message) => Err(message),
                // The work ended as the time ran out.
                None => Ok(session.wait_finished(&task_id.0).await),
            }
        };
        asyncio_future(
            py,
            self.made_in,
            WhenAbandoned::Stop,
            wait,
            |py, outcome| match outcome {
                Ok(Ok(task)) => Ok(Py::new(py, snapshot(py, task)?)?.into_any()),
                Ok(Err(error)) => Err(redis_error(py, error)),
                Err(message) => Err(pyo3::exceptions::PyTimeoutError::new_err(message)),
            },
        )
    }

    pub(crate) fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (session, made_in) = (self.session.clone(), self.made_in);
        self.delivery.deliver(
            py,
            self.made_in,
            async move { session.subscribe().await },
            move |py, subscription| {
                let subscription = subscription.map_err(|error| redis_error(py, error))?;
                let reader = RedisEventReader::start(subscription, made_in)?;
                Ok(event_stream_class(py)?.call1((reader,))?.unbind())
            },
        )
    }
}

/// A snapshot of one retained task (of run `run` alone, when given), or None.
fn get_task<'py>(
    py: Python<'py>,
    session: &CoreSession,
    made_in: MadeIn,
    delivery: Delivery,
    task_id: Arc<str>,
    run: Option<Arc<str>>,
) -> PyResult<Bound<'py, PyAny>> {
    let session = session.clone();
    delivery.deliver(
        py,
        made_in,
        async move {
            match run {
                Some(run) => session.get_run(&task_id, &run).await,
                None => session.get(&task_id).await,
            }
        },
        |py, task| match task.map_err(|error| redis_error(py, error))? {
            Some(task) => Ok(Py::new(py, snapshot(py, task)?)?.into_any()),
            None => Ok(py.None()),
        },
    )
}

/// A runner's handle as a batch of ends names it: its task, and the core's handle.
pub(crate) struct BatchHandle {
    task_id: Arc<str>,
    handle: Arc<tokio::sync::Mutex<CoreHandle>>,
}

/// A runner's handle's calls.
pub(crate) struct HandleCalls {
    /// Locked while a call to Redis reports through it.
    handle: Arc<tokio::sync::Mutex<CoreHandle>>,
    session: CoreSession,
    pub(crate) task_id: Arc<str>,
    /// The run this handle runs: its snapshot is of that run alone.
    run: Arc<str>,
    pub(crate) session_id: String,
    pub(crate) token: Py<CancellationToken>,
    /// The runner's wait for a resume, which needs no lock on the handle (a pause may wait for long).
    resume_watch: Option<ResumeWatch<String>>,
    resume_wait: ResumeWait,
    made_in: MadeIn,
    delivery: Delivery,
}

impl HandleCalls {
    fn new(
        py: Python<'_>,
        handle: CoreHandle,
        session: CoreSession,
        made_in: MadeIn,
        delivery: Delivery,
    ) -> PyResult<HandleCalls> {
        Ok(HandleCalls {
            task_id: Arc::from(handle.task_id()),
            run: Arc::from(handle.run()),
            session_id: handle.session_id().to_owned(),
            token: Py::new(py, CancellationToken::new(handle.token()))?,
            resume_watch: handle.resume_watch(),
            resume_wait: ResumeWait::default(),
            handle: Arc::new(tokio::sync::Mutex::new(handle)),
            session,
            made_in,
            delivery,
        })
    }

    /// The handle as a batch of ends names it.
    pub(crate) fn batch_handle(&self) -> BatchHandle {
        BatchHandle {
            task_id: self.task_id.clone(),
            handle: self.handle.clone(),
        }
    }

    /// Reports the end; `result` is the completion's JSON, if any. Gives whether this call ended the task.
    pub(crate) fn end<'py>(
        &self,
        py: Python<'py>,
        ending: RunnerExit,
        result: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.end_then(py, ending, result, |py, ended| ended.into_py_any(py))
    }

    /// Reports the end from how an `async with` block exited; gives `False`, so that its exception propagates.
    pub(crate) fn exit<'py>(
        &self,
        py: Python<'py>,
        ending: RunnerExit,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.end_then(py, ending, None, |py, _ended| object(py, false))
    }

    fn end_then<'py>(
        &self,
        py: Python<'py>,
        ending: RunnerExit,
        result: Option<String>,
        give: fn(Python<'_>, bool) -> PyResult<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // The core answers every end after the handle's reported one (`has_reported_end`): at once, with no
        // trip through the runtime. A handle locked by a call under way goes the usual way, after that call.
        if self
            .handle
            .try_lock()
            .is_ok_and(|handle| handle.has_reported_end())
        {
            return self.delivery.ready(py, give(py, false)?);
        }
        let handle = self.handle.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move {
                let mut handle = handle.lock().await;
                match &ending {
                    RunnerExit::Completed => handle.complete(result.as_deref()).await,
                    RunnerExit::Failed(failure) => handle.fail_with(failure).await,
                    RunnerExit::Stopped(reason) => handle.stopped(reason.as_deref()).await,
                }
            },
            move |py, ended| give(py, ended.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn complete<'py>(
        &self,
        py: Python<'py>,
        result: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let result = match result.filter(|result| !result.is_none()) {
            Some(result) => Some(json_text(result, "result")?),
            None => None,
        };
        self.end(py, RunnerExit::Completed, result)
    }

    pub(crate) fn fail<'py>(
        &self,
        py: Python<'py>,
        error: &Bound<'_, PyAny>,
        error_type: Option<&Bound<'_, PyAny>>,
        error_code: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let failure = arguments::failure(error, error_type, error_code)?;
        self.end(py, RunnerExit::Failed(failure), None)
    }

    pub(crate) fn progress<'py>(
        &self,
        py: Python<'py>,
        message: &Bound<'_, PyAny>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let message =
            arguments::text(&arguments::string(message, "message")?, "message")?.to_owned();
        let data = data
            .filter(|data| !data.is_none())
            .map(|data| json_text(data, "data"))
            .transpose()?;
        let handle = self.handle.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move {
                let handle = handle.lock().await;
                match &data {
                    Some(data) => handle.progress_with(&message, data).await,
                    None => handle.progress(&message).await,
                }
            },
            |py, recorded| object(py, recorded.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn pause<'py>(
        &self,
        py: Python<'py>,
        reason: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let handle = self.handle.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { handle.lock().await.pause(reason.as_deref()).await },
            |py, paused| object(py, paused.map_err(|error| redis_error(py, error))?),
        )
    }

    pub(crate) fn resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.resume_watch {
            Some(watch) => self.resume_wait.future(py, watch.wait_for_resume()),
            None => Ok(None),
        }
    }

    pub(crate) fn wait_for_resume(
        &self,
        py: Python<'_>,
        timeout: Option<std::time::Duration>,
    ) -> PyResult<bool> {
        match &self.resume_watch {
            Some(watch) => wait_for_resume(py, watch, timeout),
            None => Ok(true),
        }
    }

    /// The resume value decoded from JSON, as results are.
    pub(crate) fn resumption(&self, py: Python<'_>) -> PyResult<(&'static str, Py<PyAny>)> {
        let resumption = match &self.resume_watch {
            Some(watch) => watch.resumption(),
            None => Resumption::Ended,
        };
        resumption_for_python(py, resumption, |value| from_json_text(py, &value, false))
    }

    pub(crate) fn record_escalation<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let handle = self.handle.clone();
        self.delivery.deliver(
            py,
            self.made_in,
            async move { handle.lock().await.record_escalation().await },
            |py, recorded| {
                recorded.map_err(|error| redis_error(py, error))?;
                Ok(py.None())
            },
        )
    }

    pub(crate) fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        get_task(
            py,
            &self.session,
            self.made_in,
            self.delivery,
            self.task_id.clone(),
            Some(self.run.clone()),
        )
    }
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
    // Read-only, as metadata is.
    let progress_data = snapshot
        .progress_log
        .iter_mut()
        .map(|entry| {
            entry
                .data
                .take()
                .map(|text| from_json_text(py, &text, true))
                .transpose()
        })
        .collect::<PyResult<Vec<_>>>()?;
    let mut decoded = snapshot.map_values(|text| match from_json_text(py, &text, false) {
        Ok(value) => PyValue::new(value),
        Err(error) => {
            failure.get_or_insert(error);
            PyValue::new(py.None())
        }
    });
    decoded.metadata = metadata.map(PyValue::new);
    for (entry, data) in decoded.progress_log.iter_mut().zip(progress_data) {
        entry.data = data.map(PyValue::new);
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(SubagentTask::new(py, decoded)),
    }
}

fn snapshots(py: Python<'_>, listed: Vec<SubagentTaskSnapshot<String>>) -> PyResult<Py<PyAny>> {
    let converted = listed
        .into_iter()
        .map(|task| snapshot(py, task))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, converted)?.into_any().unbind())
}
