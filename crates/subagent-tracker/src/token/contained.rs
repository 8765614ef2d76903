//! User code run so that its panic stops nothing else: a leaf that the delivery, the pool and the handlers'
//! count all share, so that none of them imports another for it.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs a callback or waker so that a panic in it stops neither the canceller nor the ones after it.
pub(crate) fn run_contained(callback: impl FnOnce()) {
    // The panic hook has already reported the panic; swallowing it here keeps one faulty callback from
    // leaving the other registrations unrun.
    let _ = catch_unwind(AssertUnwindSafe(callback));
}
