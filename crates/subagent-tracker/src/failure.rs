//! What a runner failed with.

use std::sync::Arc;

/// What a runner failed with (contract §5): its message, which snapshots show as `error`, and optionally a type
/// and a code, for code that sorts failures without parsing messages. Recorded with
/// [`SubagentTaskHandle::fail_with`](crate::SubagentTaskHandle::fail_with) or
/// [`InMemorySubagentTaskTracker::fail`](crate::InMemorySubagentTaskTracker::fail); a plain
/// [`fail`](crate::SubagentTaskHandle::fail) records a message alone.
///
/// ```
/// use subagent_tracker::TaskFailure;
///
/// let failure = TaskFailure::new("the model refused").error_type("RefusalError").error_code("refused");
/// assert_eq!(failure.error_code.as_deref(), Some("refused"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskFailure {
    /// What went wrong, for people: the snapshot's `error`.
    pub message: Arc<str>,
    /// The kind of failure (an exception's class name, say).
    pub error_type: Option<Arc<str>>,
    /// A code for programs (`"rate_limited"`, `"429"`).
    pub error_code: Option<Arc<str>>,
}

impl TaskFailure {
    /// A failure with `message` and no type or code.
    #[must_use]
    pub fn new(message: impl Into<Arc<str>>) -> Self {
        TaskFailure {
            message: message.into(),
            error_type: None,
            error_code: None,
        }
    }

    /// The same failure, of kind `error_type`; an empty one counts as none, as every store keeps it.
    #[must_use]
    pub fn error_type(mut self, error_type: impl Into<Arc<str>>) -> Self {
        self.error_type = Some(error_type.into()).filter(|error_type| !error_type.is_empty());
        self
    }

    /// The same failure, with code `error_code`; an empty one counts as none, as every store keeps it.
    #[must_use]
    pub fn error_code(mut self, error_code: impl Into<Arc<str>>) -> Self {
        self.error_code = Some(error_code.into()).filter(|error_code| !error_code.is_empty());
        self
    }
}

impl From<&str> for TaskFailure {
    fn from(message: &str) -> Self {
        TaskFailure::new(message)
    }
}
