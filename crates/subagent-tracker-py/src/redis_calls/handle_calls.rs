//! A runner's handle's calls: every method of `RedisTaskHandle` and `AsyncRedisTaskHandle` as one future for the
//! runtime and one conversion of its outcome.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use subagent_tracker::{ResumeWatch, Resumption};
use subagent_tracker_redis::{RedisSession as CoreSession, RedisTaskHandle as CoreHandle};

use super::{get_task, object, Delivery};
use crate::arguments::{self, from_json_text, json_text};
use crate::errors::redis_error;
use crate::resume_wait::{resumption_for_python, wait_for_resume, ResumeWait};
use crate::runner_exit::RunnerExit;
use crate::runtime::MadeIn;
use crate::token::CancellationToken;

/// A runner's handle as a batch of ends names it: its task, and the core's handle.
pub(crate) struct BatchHandle {
    pub(super) task_id: Arc<str>,
    pub(super) handle: Arc<tokio::sync::Mutex<CoreHandle>>,
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
    pub(super) fn new(
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
