//! The reasons and errors the tracker writes into tasks itself, as users and other stores match them.

use std::sync::Arc;
use std::time::Duration;

/// The cancel reason used when a caller gives none.
pub const DEFAULT_CANCEL_REASON: &str = "cancelled";

/// The cancel reason of a task whose deadline passed.
pub const DEADLINE_REASON: &str = "deadline exceeded";

/// The cancel reason of the tasks a batch had opened when another thread's change to the session (a start of
/// one of its ids, the end of a parent it names, a close) refused the rest of it.
pub const BATCH_REFUSED_REASON: &str = "the batch this task was started in was refused";

/// The cancel reason of a task group whose attached child failed (its origin names the child).
pub const CHILD_FAILED_REASON: &str = "a child of this task group failed";

/// The cancel reason of the pending children of a task group that completed or failed (their origin names it).
pub const GROUP_ENDED_REASON: &str = "the task group ended";

/// The start of the error of a reservation that no runner claimed within its claim timeout.
pub const CLAIM_TIMEOUT_ERROR: &str = "no runner claimed the task within its claim timeout";

/// The error of a reservation that no runner claimed within `claim_timeout`.
#[must_use]
pub fn claim_timeout_error(claim_timeout: Duration) -> String {
    format!(
        "{CLAIM_TIMEOUT_ERROR} of {} seconds",
        claim_timeout.as_secs_f64()
    )
}

/// `reason`, or the default cancel reason when the caller gives none.
pub(super) fn cancel_reason(reason: Option<&str>) -> Arc<str> {
    Arc::from(reason.unwrap_or(DEFAULT_CANCEL_REASON))
}
