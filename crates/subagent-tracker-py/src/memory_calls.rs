//! The in-memory store behind the seam: the session's calls (`session_calls`) and a runner's handle's calls
//! (`handle_calls`) answer every call from the core's tracker at once, on the calling thread, with the wakes they
//! make batched (`with_wake_batch`).

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

mod handle_calls;
mod session_calls;

pub(crate) use handle_calls::HandleCalls;
pub(crate) use session_calls::SessionCalls;

fn object<'py, T: IntoPyObject<'py>>(py: Python<'py>, value: T) -> PyResult<Bound<'py, PyAny>> {
    value.into_bound_py_any(py)
}
