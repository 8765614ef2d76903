//! The waits of every session, composed once above the seam (contract §3): waiting for a task's end, and a
//! cancel that waits for its work, each within an optional timeout. A store gives the futures
//! ([`SessionStore::finished`], [`SessionStore::cancel_work`]); the timeout, its message and the coroutine Python
//! awaits are written here.
//!
//! Each session method gives a coroutine that starts the wait once awaited (`StartOnAwait`): in memory it is
//! polled on the loop that awaits it, on Redis it runs on the runtime; cancelling the coroutine stops it (a wait
//! changes nothing).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError};
use pyo3::prelude::*;
use subagent_tracker::{cancel_wait_timeout_message, SubagentTaskSnapshot};

use crate::asyncio_waker::future_for;
use crate::loop_inbox::{asyncio_future, WhenAbandoned};
use crate::runtime::runtime;
use crate::session_store::{Answer, CancelWork, SessionStore};
use crate::start_on_await::StartOnAwait;

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
        let Some(timeout) = timeout else {
            return Ok(finished.await);
        };
        tokio::time::timeout(timeout, finished)
            .await
            .map_err(|_| not_finished(&task_id, timeout))
    };
    deliver(store, py, timeout.is_some(), wait)
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
    deliver(store, py, timeout.is_some(), wait)
}

/// The message of a wait for a task's end that timed out.
fn not_finished(task_id: &str, timeout: Duration) -> String {
    format!(
        "task {task_id:?} did not finish within {} seconds; its runner is still running",
        timeout.as_secs_f64()
    )
}

/// What a wait ends with: the final snapshot, the store's error, or the message of a timeout.
type Outcome<S> = Result<
    Result<SubagentTaskSnapshot<<S as SessionStore>::Value>, <S as SessionStore>::Error>,
    String,
>;

/// An awaitable of `wait`'s outcome: polled on the loop that awaits it for a store whose waits are woken in
/// this process (memory), run on the runtime otherwise (Redis).
fn deliver<'py, S, F>(store: &S, py: Python<'py>, timed: bool, wait: F) -> Answer<'py>
where
    S: SessionStore,
    F: Future<Output = Outcome<S>> + Send + 'static,
{
    if S::WAITS_ON_THE_LOOP {
        return on_the_loop::<S, F>(py, timed, wait);
    }
    asyncio_future(
        py,
        store.made_in(),
        WhenAbandoned::Stop,
        wait,
        final_snapshot::<S>,
    )
}

/// `wait` polled on the loop that awaits it, woken by the core directly as a token's waits are: a wait already
/// over ends at its first step, and one without a timeout needs no runtime and no thread. Each poll that finds it
/// pending gives a future of the loop that its next wake-up resolves (a timeout's timer is the runtime's, entered
/// while polling, and wakes it from there).
fn on_the_loop<'py, S, F>(py: Python<'py>, timed: bool, wait: F) -> Answer<'py>
where
    S: SessionStore,
    F: Future<Output = Outcome<S>> + Send + 'static,
{
    let state = Arc::new(Mutex::new((Box::pin(wait), None)));
    let polled = state.clone();
    let poll = move |owner: &Bound<'_, PyAny>| {
        let context = timed
            .then(runtime)
            .transpose()?
            .map(|runtime| runtime.enter());
        let mut state = polled.lock();
        let (wait, outcome) = &mut *state;
        let pending = future_for(owner.py(), (), |(), context| {
            wait.as_mut()
                .poll(context)
                .map(|ready| *outcome = Some(ready))
        })?;
        drop(context);
        Ok(pending.map(|(future, ())| future))
    };
    let finish = move |owner: &Bound<'_, PyAny>| match state.lock().1.take() {
        Some(outcome) => final_snapshot::<S>(owner.py(), outcome),
        None => Err(PyRuntimeError::new_err("the wait gave its outcome already")),
    };
    StartOnAwait::then(py, &py.None().into_bound(py), "wait", poll, finish)
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

fn final_snapshot<S: SessionStore>(py: Python<'_>, outcome: Outcome<S>) -> PyResult<Py<PyAny>> {
    match outcome {
        Ok(Ok(snapshot)) => Ok(Py::new(py, S::snapshot_object(py, snapshot)?)?.into_any()),
        Ok(Err(error)) => Err(S::error(py, error)),
        Err(message) => Err(PyTimeoutError::new_err(message)),
    }
}
