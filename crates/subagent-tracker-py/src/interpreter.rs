//! Whether, and how, threads the core owns (deadline deliveries, dropped handles) may call into Python.
//!
//! Such a thread may run while the interpreter shuts down. Attaching to a finalizing interpreter ends the
//! thread from inside Rust frames, which aborts the process; so every attach from such a thread goes through
//! [`with_python`], and the `atexit` hook closes the door and waits, briefly, for those already inside.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

static EXITING: AtomicBool = AtomicBool::new(false);
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// How long interpreter exit waits for wake-ups and callbacks already running in the core's threads.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Runs `call` attached to the interpreter, unless it is shutting down (then `None`: nobody is left to
/// notify).
pub(crate) fn with_python<R>(call: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let result = if EXITING.load(Ordering::SeqCst) {
        None
    } else {
        Python::try_attach(call)
    };
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    result
}

/// Called from `atexit`: from now on the core's threads leave Python alone; waits (without the GIL) for the
/// ones inside to leave.
#[pyfunction]
pub(crate) fn _interpreter_exiting(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let until = Instant::now() + EXIT_GRACE;
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// `os.register_at_fork(before=...)`: holds the deadline timer's locks across the fork.
#[pyfunction]
pub(crate) fn _before_fork() {
    subagent_tracker::fork::prepare();
}

/// `os.register_at_fork(after_in_parent=...)`.
#[pyfunction]
pub(crate) fn _after_fork_in_parent() {
    subagent_tracker::fork::after_in_parent();
}

/// `os.register_at_fork(after_in_child=...)`: the child gets a deadline timer of its own.
#[pyfunction]
pub(crate) fn _after_fork_in_child() {
    subagent_tracker::fork::after_in_child();
}
