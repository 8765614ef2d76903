//! The in-memory store behind the seam: the session's calls (`session_calls`) and a runner's handle's calls
//! (`handle_calls`) answer every call from the core's tracker at once, on the calling thread, with the wakes they
//! make batched (`with_wake_batch`). The same calls serve the classes seen through awaits, whose answers are
//! awaitables already done.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::ready::Ready;
use crate::session_store::Answer;

mod handle_calls;
mod session_calls;

pub(crate) use handle_calls::HandleCalls;
pub(crate) use session_calls::SessionCalls;

/// `value` as the class that called hands it back: itself, or, for the classes seen through awaits
/// (`AwaitableSession`, `AwaitableTaskHandle`), an awaitable already done.
fn answer<'py, T: IntoPyObject<'py>>(py: Python<'py>, awaited: bool, value: T) -> Answer<'py> {
    let value = value.into_bound_py_any(py)?;
    if !awaited {
        return Ok(value);
    }
    Ok(Bound::new(py, Ready::new(value.unbind()))?.into_any())
}
