//! What a handle needs to wait for its resume (contract §5, pause and resume): the asyncio future of the latest
//! `resumed()` with its registration, the blocking wait, and the core's `Resumption` as Python sees it.

use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use subagent_tracker::{ResumeWatch, Resumption, WaitForResume};

use crate::asyncio_waker::future_for;
use crate::blocking_wait::wait_interruptibly;
use crate::token::CancellationToken;

/// The registration behind a handle's latest `resumed()` future, released when the next one replaces it or
/// the handle goes.
#[derive(Default)]
pub(crate) struct ResumeWait(Mutex<Option<WaitForResume>>);

impl ResumeWait {
    /// `None` when the task is not paused; otherwise a future of the running loop that completes when the
    /// pause ends.
    pub(crate) fn future(
        &self,
        py: Python<'_>,
        wait: WaitForResume,
    ) -> PyResult<Option<Py<PyAny>>> {
        let pending = future_for(py, wait, WaitForResume::poll_resumed)?;
        Ok(pending.map(|(future, wait)| {
            let replaced = self.0.lock().replace(wait);
            // Dropped with the lock released: dropping a wait takes its registration back.
            drop(replaced);
            future
        }))
    }
}

/// Blocks, with the interpreter released, until the pause of `watch`'s task ends (true) or `timeout` passes
/// (false).
pub(crate) fn wait_for_resume<V: Clone + Send + Sync>(
    py: Python<'_>,
    watch: &ResumeWatch<V>,
    timeout: Option<Duration>,
) -> PyResult<bool> {
    wait_interruptibly(py, timeout, |slice| {
        watch.wait_for_resume_blocking(Some(slice))
    })
}

/// What `resumed()` gives once the pause of `resumption`'s task is over: the resume value, `None` for a task
/// ended meanwhile, or `TaskCancelledError` (from `token`) for one cancelled while paused.
pub(crate) fn resumed_value<V>(
    py: Python<'_>,
    resumption: Resumption<V>,
    token: &CancellationToken,
    value: impl FnOnce(V) -> PyResult<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    match resumption {
        Resumption::Resumed(Some(resumed)) => value(resumed),
        Resumption::Cancelled => token.check(py).map(|()| py.None()),
        _ => Ok(py.None()),
    }
}
