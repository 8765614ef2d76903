//! Blocking waits that release the interpreter and still let Ctrl-C through.

use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// How long a blocking wait sleeps between checks for Python signals (so Ctrl-C still works).
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Calls `wait` (a core wait bounded by the slice it is given) with the interpreter released, in slices, until
/// it returns true (true) or `timeout` passes (false); between slices, a pending Python signal raises.
pub(crate) fn wait_interruptibly(
    py: Python<'_>,
    timeout: Option<Duration>,
    wait: impl Fn(Duration) -> bool + Sync,
) -> PyResult<bool> {
    let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
    loop {
        let slice = match deadline {
            Some(deadline) => deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_CHECK_INTERVAL),
            None => SIGNAL_CHECK_INTERVAL,
        };
        if py.detach(|| wait(slice)) {
            return Ok(true);
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(false);
        }
        py.check_signals()?;
    }
}
