//! The tokio runtime that Redis registries run on: one per process, made on first use.

use std::future::Future;
use std::sync::OnceLock;

use pyo3::prelude::*;

/// The process's runtime. One worker thread: Redis calls are short and I/O-bound, and the threads that wait on
/// them are the callers' own.
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
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
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// Runs `future` to completion on the runtime, with the interpreter released meanwhile.
pub(crate) fn block_on<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    Ok(py.detach(|| runtime.block_on(future)))
}
