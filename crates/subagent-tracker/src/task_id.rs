//! Validation and generation of task ids.

use crate::{IdProblem, TrackerError};

/// The longest task id accepted, in UTF-8 bytes. Longer ids are almost always a bug (a prompt passed as an id).
pub const MAX_TASK_ID_BYTES: usize = 256;

/// Checks the rule every id (of a task, parent or session) keeps: non-empty and at most
/// [`MAX_TASK_ID_BYTES`] bytes. `argument` names it in the error.
///
/// # Errors
/// [`TrackerError::InvalidId`] naming `argument`.
pub fn validate_task_id(argument: &'static str, task_id: &str) -> Result<(), TrackerError> {
    let problem = if task_id.is_empty() {
        IdProblem::Empty
    } else if task_id.len() > MAX_TASK_ID_BYTES {
        IdProblem::TooLong(task_id.len())
    } else {
        return Ok(());
    };
    Err(TrackerError::InvalidId { argument, problem })
}

/// A fresh random id (a UUID v4), for tasks and sessions started without one.
pub fn generate_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
