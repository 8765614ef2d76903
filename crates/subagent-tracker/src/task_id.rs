//! Validation and generation of task ids.

use crate::TrackerError;

/// The longest task id accepted, in UTF-8 bytes. Longer ids are almost always a bug (a prompt passed as an id).
pub const MAX_TASK_ID_BYTES: usize = 256;

/// Checks the rule every task id keeps: non-empty and at most [`MAX_TASK_ID_BYTES`] bytes.
pub fn validate_task_id(task_id: &str) -> Result<(), TrackerError> {
    if task_id.is_empty() {
        return Err(TrackerError::InvalidTaskId(
            "task_id must be a non-empty string".to_owned(),
        ));
    }
    if task_id.len() > MAX_TASK_ID_BYTES {
        return Err(TrackerError::InvalidTaskId(format!(
            "task_id must be at most {MAX_TASK_ID_BYTES} bytes, got {} bytes",
            task_id.len()
        )));
    }
    Ok(())
}

/// A fresh random id (a UUID v4), for tasks and sessions started without one.
pub(crate) fn generate_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
