//! An observer's hold on one run of a task.

use std::sync::Arc;
use std::task::{Context, Poll};

use crate::task_entry::TaskEntry;
use crate::SubagentTaskSnapshot;

/// Follows one run of a task, even after that run is evicted or its id is started again.
///
/// Made by [`InMemorySubagentTaskTracker::watch`](crate::InMemorySubagentTaskTracker::watch).
pub struct TaskWatch<V = String> {
    entry: Arc<TaskEntry<V>>,
}

impl<V> Clone for TaskWatch<V> {
    fn clone(&self) -> Self {
        TaskWatch {
            entry: self.entry.clone(),
        }
    }
}

impl<V: Clone> TaskWatch<V> {
    pub(crate) fn new(entry: Arc<TaskEntry<V>>) -> Self {
        TaskWatch { entry }
    }

    /// True once the run has finished.
    pub fn is_finished(&self) -> bool {
        self.entry.is_finished()
    }

    /// Polls for the end of the run; on `Pending`, `context`'s waker is woken when it finishes.
    pub fn poll_finished(&self, context: &mut Context<'_>) -> Poll<()> {
        self.entry.poll_finished(context)
    }

    /// Waits until the run has finished and returns its final snapshot.
    pub async fn finished(&self) -> SubagentTaskSnapshot<V> {
        self.entry.finished().await;
        self.entry.snapshot()
    }

    /// A snapshot of the run now.
    pub fn snapshot(&self) -> SubagentTaskSnapshot<V> {
        self.entry.snapshot()
    }
}
