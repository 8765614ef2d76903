//! The runner's progress reports, as a task keeps them (contract §5, progress log).

use std::sync::Arc;
use std::time::SystemTime;

/// How many progress reports a task keeps by default (see
/// [`TrackerConfig::with_progress_log_size`](crate::TrackerConfig::with_progress_log_size)).
pub const DEFAULT_PROGRESS_LOG_SIZE: usize = 16;

/// The most progress reports a session may keep per task: each holds its data, so the bound keeps a session's
/// memory bounded.
pub const MAX_PROGRESS_LOG_SIZE: usize = 1024;

/// One progress report of a runner: when, what, and the data it gave, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressEntry<V = String> {
    /// When the runner reported it.
    pub at: SystemTime,
    /// Its message, cut to [`MAX_PROGRESS_MESSAGE_BYTES`](crate::MAX_PROGRESS_MESSAGE_BYTES).
    pub message: Arc<str>,
    /// The data given with it (in Redis, JSON text).
    pub data: Option<V>,
}
