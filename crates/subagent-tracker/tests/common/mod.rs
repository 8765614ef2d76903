//! Helpers shared by the integration tests.

use subagent_tracker::{InMemorySubagentTaskTracker, TrackerConfig};

/// A tracker for session `"session"` that retains up to `max_finished_tasks` finished tasks.
pub fn tracker_retaining(max_finished_tasks: usize) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        Some("session"),
        TrackerConfig::default().with_max_finished_tasks(max_finished_tasks),
    )
}

/// The ids of the tasks `tracker` retains, in start order (`tasks()`).
pub fn task_ids(tracker: &InMemorySubagentTaskTracker) -> Vec<String> {
    tracker
        .tasks()
        .into_iter()
        .map(|task| task.task_id.to_string())
        .collect()
}
