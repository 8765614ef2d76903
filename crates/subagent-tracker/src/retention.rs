//! The bound on finished tasks kept for queries.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

/// The default number of finished tasks a session keeps.
pub const DEFAULT_MAX_FINISHED_TASKS: usize = 10_000;

/// Finished tasks in the order they finished, so that the oldest is evicted first.
///
/// Each record names a run by id and start sequence: when an id has been started again since, the record is
/// stale and evicting it removes nothing.
pub(crate) struct FinishedTasks {
    capacity: usize,
    order: Mutex<VecDeque<(u64, Arc<str>)>>,
}

impl FinishedTasks {
    pub(crate) fn new(capacity: usize) -> FinishedTasks {
        FinishedTasks {
            capacity,
            order: Mutex::new(VecDeque::with_capacity(capacity.min(1024) + 1)),
        }
    }

    /// Records a finished run and returns the run that falls out of the window, if one does.
    pub(crate) fn record(&self, sequence: u64, task_id: Arc<str>) -> Option<(u64, Arc<str>)> {
        let mut order = self.order.lock();
        order.push_back((sequence, task_id));
        if order.len() > self.capacity {
            order.pop_front()
        } else {
            None
        }
    }
}
