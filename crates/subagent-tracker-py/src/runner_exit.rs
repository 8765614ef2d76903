//! How a runner's `with` block ended, read from the exception it left with: the one reading that both kinds of
//! handle (in memory and on Redis) turn into their end.

use pyo3::prelude::*;

use subagent_tracker::TaskFailure;

use crate::arguments::failure;
use crate::errors::is_cancellation;

/// How a runner's `with` block ended, from the exception it left with: a normal exit completes the task, a
/// cancellation (`TaskCancelledError` or `asyncio.CancelledError`) stops it with the cancel's reason, if any,
/// and any other exception fails it with its text and its class name as the failure's type.
pub(crate) enum RunnerExit {
    Completed,
    Stopped(Option<String>),
    Failed(TaskFailure),
}

pub(crate) fn runner_exit(py: Python<'_>, exception: &Bound<'_, PyAny>) -> PyResult<RunnerExit> {
    if exception.is_none() {
        return Ok(RunnerExit::Completed);
    }
    if is_cancellation(py, exception)? {
        let reason = exception
            .getattr("reason")
            .ok()
            .and_then(|reason| reason.extract::<String>().ok());
        return Ok(RunnerExit::Stopped(reason));
    }
    Ok(RunnerExit::Failed(failure(exception, None, None)?))
}
