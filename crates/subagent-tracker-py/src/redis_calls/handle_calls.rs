//! A runner's handle's calls: every method of `RedisTaskHandle` and `AsyncRedisTaskHandle` as one future for the
//! runtime and one conversion of its outcome.

use std::sync::Arc;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use pyo3::PyTraverseError;
use subagent_tracker::{ResumeWatch, Resumption};
use subagent_tracker_redis::{
    RedisSession as CoreSession, RedisTaskHandle as CoreHandle, SharedTaskHandle,
};

use super::{get_task, object, Delivery, Waiting};
use crate::arguments::from_json_text;
use crate::ready::Ready;
use crate::resume_wait::{resumed_value, wait_for_resume, ResumeWait};
use crate::runner_exit::RunnerExit;
use crate::runtime::MadeIn;
use crate::session_store::{Answer, HandleStore};
use crate::token::CancellationToken;

/// A runner's handle's calls.
pub(crate) struct HandleCalls {
    /// Locked while a call to Redis reports through it.
    handle: SharedTaskHandle,
    session: CoreSession,
    /// The run this handle runs: its snapshot is of that run alone.
    run: Arc<str>,
    session_id: String,
    token: Py<CancellationToken>,
    /// The runner's wait for a resume, which needs no lock on the handle (a pause may wait for long).
    resume_watch: Option<ResumeWatch<String>>,
    resume_wait: ResumeWait,
    made_in: MadeIn,
    delivery: Delivery,
}

impl HandleCalls {
    pub(super) fn new(
        py: Python<'_>,
        handle: CoreHandle,
        session: CoreSession,
        made_in: MadeIn,
        delivery: Delivery,
    ) -> PyResult<HandleCalls> {
        Ok(HandleCalls {
            run: Arc::from(handle.run()),
            session_id: handle.session_id().to_owned(),
            token: Py::new(py, CancellationToken::new(handle.token()))?,
            resume_watch: handle.resume_watch(),
            resume_wait: ResumeWait::default(),
            handle: SharedTaskHandle::new(handle),
            session,
            made_in,
            delivery,
        })
    }

    /// The handle as a batch of ends names it.
    pub(crate) fn batch_handle(&self) -> SharedTaskHandle {
        self.handle.clone()
    }

    fn end_then<'py>(
        &self,
        py: Python<'py>,
        ending: RunnerExit,
        result: Option<String>,
        give: fn(Python<'_>, bool) -> PyResult<Py<PyAny>>,
    ) -> Answer<'py> {
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
        self.delivery.call(
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
            give,
        )
    }
}

impl HandleStore for HandleCalls {
    type Value = String;

    fn task_id(&self) -> &str {
        self.handle.task_id()
    }

    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn token(&self, py: Python<'_>) -> PyResult<Py<CancellationToken>> {
        Ok(self.token.clone_ref(py))
    }

    /// Reports the end; `result` is the completion's JSON, if any.
    fn end<'py>(&self, py: Python<'py>, ending: RunnerExit, result: Option<String>) -> Answer<'py> {
        self.end_then(py, ending, result, |py, ended| ended.into_py_any(py))
    }

    fn end_async_block<'py>(&self, py: Python<'py>, ending: RunnerExit) -> Answer<'py> {
        match self.delivery.waiting {
            // `async with` on a blocking handle: the end is one short call to Redis.
            Waiting::Blocking => {
                self.end(py, ending, None)?;
                Ok(Ready::exited(py)?.into_bound(py).into_any())
            }
            Waiting::Asyncio => self.end_then(py, ending, None, |py, _ended| object(py, false)),
        }
    }

    fn progress<'py>(&self, py: Python<'py>, message: &str, data: Option<String>) -> Answer<'py> {
        let (handle, message) = (self.handle.clone(), message.to_owned());
        self.delivery.call(
            py,
            self.made_in,
            async move {
                let handle = handle.lock().await;
                match &data {
                    Some(data) => handle.progress_with(&message, data).await,
                    None => handle.progress(&message).await,
                }
            },
            object,
        )
    }

    fn pause<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py> {
        let handle = self.handle.clone();
        self.delivery.call(
            py,
            self.made_in,
            async move { handle.lock().await.pause(reason.as_deref()).await },
            object,
        )
    }

    fn resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.resume_watch {
            Some(watch) => self.resume_wait.future(py, watch.wait_for_resume()),
            None => Ok(None),
        }
    }

    fn wait_for_resume(
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
    fn resumed_value(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let resumption = match &self.resume_watch {
            Some(watch) => watch.resumption(),
            None => Resumption::Ended,
        };
        resumed_value(py, resumption, self.token.get(), |value| {
            from_json_text(py, &value, false)
        })
    }

    fn record_escalation<'py>(&self, py: Python<'py>) -> Answer<'py> {
        let handle = self.handle.clone();
        self.delivery.call(
            py,
            self.made_in,
            async move { handle.lock().await.record_escalation().await },
            |py, _recorded| Ok(py.None()),
        )
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Answer<'py> {
        get_task(
            py,
            &self.session,
            self.made_in,
            self.delivery,
            self.handle.task_id().clone(),
            Some(self.run.clone()),
        )
    }

    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.token)
    }
}
