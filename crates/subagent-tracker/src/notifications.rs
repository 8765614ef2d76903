//! Wake-ups and callbacks collected under task locks and delivered once no lock is held.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::Waker;

/// A callback run once when a task is cancelled.
pub(crate) type CancelCallbackFn = Box<dyn FnOnce() + Send>;

/// What a transition owes to others. Delivered when dropped, which every caller arranges to happen after the
/// task locks are released: a waker or callback may run foreign code (in Python, take the interpreter lock,
/// or cancel another task), and must never do so under a task lock.
#[derive(Default)]
pub(crate) struct Notifications {
    pub(crate) wakers: Vec<Waker>,
    pub(crate) callbacks: Vec<CancelCallbackFn>,
}

impl Drop for Notifications {
    fn drop(&mut self) {
        for waker in self.wakers.drain(..) {
            // A waker runs foreign code too (the Python binding's takes the interpreter lock).
            run_contained(|| waker.wake());
        }
        for callback in self.callbacks.drain(..) {
            run_contained(callback);
        }
    }
}

/// Runs a callback or waker so that a panic in it stops neither the canceller nor the ones after it.
pub(crate) fn run_contained(callback: impl FnOnce()) {
    // The panic has already been reported by the panic hook; swallowing it here keeps one faulty callback
    // from leaving the other registrations unrun.
    let _ = catch_unwind(AssertUnwindSafe(callback));
}
