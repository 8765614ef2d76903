//! The waits of every session, composed once above the seam (contract §3): waiting for a task's end, and a
//! cancel that waits for its work, each within an optional timeout. A store gives the futures
//! ([`SessionStore::finished`], [`SessionStore::cancel_work`]); the timeout, its message and the coroutine Python
//! awaits are written here.
//!
//! Each session method gives a coroutine that starts the wait once awaited (`StartOnAwait`); the wait runs on the
//! runtime, and cancelling the coroutine stops it (a wait changes nothing).

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;
use subagent_tracker::{cancel_wait_timeout_message, SubagentTaskSnapshot};

use crate::loop_inbox::{asyncio_future, WhenAbandoned};
use crate::session_store::{Answer, CancelWork, SessionStore};

/// `wait_subagent_task`: the task's final snapshot once its runner has stopped; `TimeoutError` if `timeout`
/// passes first.
pub(crate) fn wait_task<'py, S: SessionStore>(
    store: &S,
    py: Python<'py>,
    task_id: Arc<str>,
    timeout: Option<Duration>,
) -> Answer<'py> {
    let finished = store.finished(py, task_id.clone())?;
    let wait = async move {
        match timeout {
                None => Ok(finished.await),
                Some(timeout) => tokio::time::timeout(timeout, finished)
                    .await
                    .map_err(|_| {
                        format!(
                            "task {task_id:?} did not finish within {} seconds; its runner is still running",
                            timeout.as_secs_f64()
                        )
                    }),
            }
    };
    asyncio_future(
        py,
        store.made_in(),
        WhenAbandoned::Stop,
        wait,
        final_snapshot::<S>,
    )
}

/// `cancel_subagent_task_and_wait`: cancels the task, then gives its final snapshot once its runner has ended
/// and every cancel handler of its subtree has finished; `TimeoutError` naming what still runs if `timeout`
/// passes first (the cancel stays made).
pub(crate) fn cancel_and_wait_task<'py, S: SessionStore>(
    store: &S,
    py: Python<'py>,
    task_id: Arc<str>,
    reason: Option<String>,
    timeout: Option<Duration>,
) -> Answer<'py> {
    let work = store.cancel_work(py, task_id.clone(), reason)?;
    let wait = async move { within(&work, &task_id, timeout).await };
    asyncio_future(
        py,
        store.made_in(),
        WhenAbandoned::Stop,
        wait,
        final_snapshot::<S>,
    )
}

/// The cancel's work done within `timeout`: its final snapshot, the store's error, or the timeout's message.
async fn within<W: CancelWork>(
    work: &W,
    task_id: &str,
    timeout: Option<Duration>,
) -> Result<Result<SubagentTaskSnapshot<W::Value>, W::Error>, String> {
    let mut done = pin!(work.done());
    let Some(timeout) = timeout else {
        return Ok(done.await);
    };
    if let Ok(outcome) = tokio::time::timeout(timeout, &mut done).await {
        return Ok(outcome);
    }
    let (runner_running, at_work) = match work.still_running().await {
        Ok(running) => running,
        Err(error) => return Ok(Err(error)),
    };
    match cancel_wait_timeout_message(task_id, timeout, runner_running, &at_work) {
        Some(message) => Err(message),
        // The work ended as the time ran out.
        None => Ok(done.await),
    }
}

fn final_snapshot<S: SessionStore>(
    py: Python<'_>,
    outcome: Result<Result<SubagentTaskSnapshot<S::Value>, S::Error>, String>,
) -> PyResult<Py<PyAny>> {
    match outcome {
        Ok(Ok(snapshot)) => Ok(Py::new(py, S::snapshot_object(py, snapshot)?)?.into_any()),
        Ok(Err(error)) => Err(S::error(py, error)),
        Err(message) => Err(PyTimeoutError::new_err(message)),
    }
}
