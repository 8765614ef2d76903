//! Waiting for one run of a task to finish.

use std::sync::Arc;

use crate::task_entry::TaskEntry;
use crate::token::WaitForFinish;
use crate::SubagentTaskSnapshot;

/// Follows one run of a task, even after that run is evicted or its id is started again.
///
/// Made by [`InMemorySubagentTaskTracker::watch`](crate::InMemorySubagentTaskTracker::watch).
pub struct TaskWatch<V = String> {
    entry: Arc<TaskEntry<V>>,
    session_id: Arc<str>,
}

impl<V> Clone for TaskWatch<V> {
    fn clone(&self) -> Self {
        TaskWatch {
            entry: self.entry.clone(),
            session_id: self.session_id.clone(),
        }
    }
}

impl<V: Clone> TaskWatch<V> {
    pub(crate) fn new(entry: Arc<TaskEntry<V>>, session_id: Arc<str>) -> Self {
        TaskWatch { entry, session_id }
    }

    /// True once the run has finished.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.entry.is_finished()
    }

    /// A future that is ready once the run has finished; dropping it takes its registration back.
    pub fn wait_finished(&self) -> WaitForFinish {
        WaitForFinish::new(self.entry.signal.clone())
    }

    /// Waits until the run has finished and returns its final snapshot.
    pub async fn finished(&self) -> SubagentTaskSnapshot<V> {
        self.wait_finished().await;
        self.entry.snapshot(&self.session_id)
    }

    /// A snapshot of the run now.
    #[must_use]
    pub fn snapshot(&self) -> SubagentTaskSnapshot<V> {
        self.entry.snapshot(&self.session_id)
    }

    /// Calls `visit` with the run's metadata and result, if any.
    pub fn visit_values(&self, visit: impl FnMut(&V)) {
        self.entry.visit_values(visit);
    }
}
