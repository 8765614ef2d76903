//! Whether Python can still be called from a thread the core owns (the deadline timer).
//!
//! The timer thread outlives the interpreter: a deadline may pass during or after interpreter shutdown. Its
//! wake-ups and callbacks then have nobody to notify, and attaching would fail, so they are skipped.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;

static EXITING: AtomicBool = AtomicBool::new(false);

/// Called from `atexit`: from now on, threads the core owns leave Python alone.
#[pyfunction]
pub(crate) fn _interpreter_exiting() {
    EXITING.store(true, Ordering::Release);
}

/// True while a thread may attach to the interpreter to deliver a wake-up or run a callback.
pub(crate) fn python_available() -> bool {
    // SAFETY: `Py_IsInitialized` may be called at any time, with or without the interpreter lock.
    !EXITING.load(Ordering::Acquire) && unsafe { pyo3::ffi::Py_IsInitialized() } != 0
}
