//! Helpers shared by the integration tests.

use subagent_tracker::{InMemorySubagentTaskTracker, TrackerConfig};

/// A tracker for session `"session"` that retains up to `max_finished_tasks` finished tasks.
pub fn tracker_retaining(max_finished_tasks: usize) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        Some("session"),
        TrackerConfig {
            max_finished_tasks,
            ..TrackerConfig::default()
        },
    )
}
