//! The bound on finished tasks kept for queries.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

/// The default number of finished tasks a session keeps.
pub const DEFAULT_MAX_FINISHED_TASKS: usize = 10_000;

/// Finished tasks in the order they finished, so that the oldest is evicted first.
///
/// A lock-free ring: recording a finish never waits for another thread's finish. Each record names a run by id
/// and start sequence; when an id has been started again since, the record is stale and evicting it removes
/// nothing.
pub(crate) struct FinishedTasks {
    // `None` when nothing is retained: every finished run is evicted at once.
    order: Option<ArrayQueue<(u64, Arc<str>)>>,
}

impl FinishedTasks {
    pub(crate) fn new(capacity: usize) -> FinishedTasks {
        FinishedTasks {
            order: (capacity > 0).then(|| ArrayQueue::new(capacity)),
        }
    }

    /// Records a finished run and returns the run that falls out of the window, if one does.
    pub(crate) fn record(&self, sequence: u64, task_id: Arc<str>) -> Option<(u64, Arc<str>)> {
        match &self.order {
            Some(order) => order.force_push((sequence, task_id)),
            None => Some((sequence, task_id)),
        }
    }
}
