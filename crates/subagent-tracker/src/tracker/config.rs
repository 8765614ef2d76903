//! The settings of a session, fixed when it is made.

use std::time::Duration;

use crate::progress::{DEFAULT_PROGRESS_LOG_SIZE, MAX_PROGRESS_LOG_SIZE};
use crate::tracker::early_cancels::DEFAULT_EARLY_CANCEL_TTL;
use crate::tracker::event_bus::DEFAULT_EVENT_BUFFER;
use crate::tracker::retention::DEFAULT_MAX_FINISHED_TASKS;

/// Settings of a tracker, fixed at construction.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TrackerConfig {
    /// How many finished tasks are kept for queries; the oldest finished is evicted first. Unfinished tasks are
    /// never evicted.
    pub max_finished_tasks: usize,
    /// How many events each subscriber may hold before it starts missing the oldest.
    pub event_buffer: usize,
    /// How long a finished task is kept after it ended, beside the bound on their number; `None` keeps it until
    /// the bound evicts it.
    pub max_finished_age: Option<Duration>,
    /// How long a cancel recorded for a task that has not started waits for its start (contract §3).
    pub early_cancel_ttl: Duration,
    /// How many of its latest progress reports a task keeps (contract §5); 0 keeps none.
    pub progress_log_size: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            max_finished_tasks: DEFAULT_MAX_FINISHED_TASKS,
            event_buffer: DEFAULT_EVENT_BUFFER,
            max_finished_age: None,
            early_cancel_ttl: DEFAULT_EARLY_CANCEL_TTL,
            progress_log_size: DEFAULT_PROGRESS_LOG_SIZE,
        }
    }
}

impl TrackerConfig {
    /// The default settings with `max_finished_tasks` retained.
    #[must_use]
    pub fn with_max_finished_tasks(mut self, max_finished_tasks: usize) -> Self {
        self.max_finished_tasks = max_finished_tasks;
        self
    }

    /// These settings with `event_buffer` events per subscriber (at least one).
    #[must_use]
    pub fn with_event_buffer(mut self, event_buffer: usize) -> Self {
        self.event_buffer = event_buffer.max(1);
        self
    }

    /// These settings, forgetting each finished task once `max_finished_age` has passed since it ended.
    #[must_use]
    pub fn with_max_finished_age(mut self, max_finished_age: Duration) -> Self {
        self.max_finished_age = Some(max_finished_age);
        self
    }

    /// These settings, keeping a cancel recorded before its task starts for `early_cancel_ttl`.
    #[must_use]
    pub fn with_early_cancel_ttl(mut self, early_cancel_ttl: Duration) -> Self {
        self.early_cancel_ttl = early_cancel_ttl;
        self
    }

    /// These settings, keeping each task's latest `progress_log_size` progress reports (at most
    /// [`MAX_PROGRESS_LOG_SIZE`]).
    #[must_use]
    pub fn with_progress_log_size(mut self, progress_log_size: usize) -> Self {
        self.progress_log_size = progress_log_size.min(MAX_PROGRESS_LOG_SIZE);
        self
    }
}
