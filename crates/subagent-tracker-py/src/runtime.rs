//! The tokio runtime that Redis registries run on: one per process, made on first use.

use parking_lot::Mutex;
use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};

use pyo3::prelude::*;

use crate::blocking_wait::wait_interruptibly;

/// The process a Redis object was made in. Its connections and background tasks live on that process's
/// runtime, which a forked child does not inherit (its threads are not copied): in a child, the object refuses
/// to work rather than hang.
#[derive(Clone, Copy)]
pub(crate) struct MadeIn(u32);

impl MadeIn {
    pub(crate) fn here() -> MadeIn {
        MadeIn(std::process::id())
    }

    pub(crate) fn check(self) -> PyResult<()> {
        if self.0 == std::process::id() {
            return Ok(());
        }
        Err(pyo3::exceptions::PyRuntimeError::new_err(
            "this Redis registry was made before os.fork(); make a new RedisRegistry in this process",
        ))
    }
}

/// This process's runtime. One worker thread: Redis calls are short and I/O-bound, and the threads that wait on
/// them are the callers' own. A forked child makes one of its own (the parent's is left alone: dropping it
/// would wait for threads the child does not have).
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let mut current = RUNTIME.lock();
    let process = std::process::id();
    if let Some((made_in, runtime)) = *current {
        if made_in == process {
            return Ok(runtime);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("subagent-tracker-redis")
        .enable_all()
        .build()
        .map_err(|error| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "cannot start the runtime for Redis: {error}"
            ))
        })?;
    let runtime: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime));
    *current = Some((process, runtime));
    Ok(runtime)
}

/// Runs `future`, of an object made in `made_in`, to completion on the runtime, with the interpreter released
/// meanwhile.
pub(crate) fn block_on<F>(py: Python<'_>, made_in: MadeIn, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    made_in.check()?;
    let runtime = runtime()?;
    Ok(py.detach(|| runtime.block_on(future)))
}

/// Runs `future`, of an object made in `made_in`, on the runtime, and waits for its output with the interpreter
/// released, in slices between which a pending Python signal raises (Ctrl-C): for a call whose abandoned output
/// changes nothing, as a connect's (the registry nobody received is dropped on the runtime), where a wait for the
/// whole timeout would hold a Ctrl-C back.
pub(crate) fn block_on_interruptibly<F>(
    py: Python<'_>,
    made_in: MadeIn,
    future: F,
) -> PyResult<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    made_in.check()?;
    let (sender, receiver) = mpsc::sync_channel(1);
    runtime()?.spawn(async move {
        let _ = sender.send(future.await);
    });
    let receiver = Mutex::new(receiver);
    let output = Mutex::new(None);
    wait_interruptibly(py, None, |slice| {
        match receiver.lock().recv_timeout(slice) {
            Ok(value) => {
                *output.lock() = Some(value);
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        }
    })?;
    output.into_inner().ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err("the call ended on the runtime without an answer")
    })
}

/// Runs `future` on the runtime in the background.
pub(crate) fn spawn(future: impl Future<Output = ()> + Send + 'static) -> PyResult<()> {
    runtime()?.spawn(future);
    Ok(())
}
