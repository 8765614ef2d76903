//! Helpers shared by the integration tests.

use subagent_tracker::{InMemorySubagentTaskTracker, TrackerConfig};

/// A tracker for session `"session"` that retains up to `max_finished_tasks` finished tasks.
pub fn tracker_retaining(max_finished_tasks: usize) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        Some("session"),
        TrackerConfig::default().with_max_finished_tasks(max_finished_tasks),
    )
}
