//! What a handle needs to wait for its resume from Python (contract §5, pause and resume): the asyncio future
//! of the latest `resumed()` with its registration, and the core's `Resumption` as Python sees it. The waits
//! themselves are finished in Python (`subagent_tracker._pause`), the same for both stores.

use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use subagent_tracker::{ResumeWatch, Resumption, WaitForResume};

use crate::asyncio_waker::future_for;
use crate::blocking_wait::wait_interruptibly;

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

/// `(state, value)` for `_pause._outcome`: the state's name, and the resume value (None unless resumed).
pub(crate) fn resumption_for_python<V>(
    py: Python<'_>,
    resumption: Resumption<V>,
    value: impl FnOnce(V) -> PyResult<Py<PyAny>>,
) -> PyResult<(&'static str, Py<PyAny>)> {
    Ok(match resumption {
        Resumption::Paused => ("paused", py.None()),
        Resumption::Resumed(resumed) => (
            "resumed",
            resumed.map(value).transpose()?.unwrap_or_else(|| py.None()),
        ),
        Resumption::Cancelled => ("cancelled", py.None()),
        _ => ("ended", py.None()),
    })
}
