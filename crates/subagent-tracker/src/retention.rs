//! The bound on finished tasks kept for queries.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_queue::SegQueue;

/// The default number of finished tasks a session keeps.
pub const DEFAULT_MAX_FINISHED_TASKS: usize = 10_000;

/// Finished tasks in the order they finished, so that the oldest is evicted first.
///
/// A lock-free queue that grows in small blocks, so that a session pays for the finished tasks it has, not for
/// its bound, and recording a finish never waits for another thread's. Each record names a run by id and start
/// sequence; when an id has been started again since, the record is stale and evicting it removes nothing.
pub(crate) struct FinishedTasks {
    capacity: usize,
    order: SegQueue<(u64, Arc<str>)>,
    length: AtomicUsize,
}

impl FinishedTasks {
    pub(crate) fn new(capacity: usize) -> FinishedTasks {
        FinishedTasks {
            capacity,
            order: SegQueue::new(),
            length: AtomicUsize::new(0),
        }
    }

    /// Records a finished run and returns the run that falls out of the window, if one does.
    pub(crate) fn record(&self, sequence: u64, task_id: Arc<str>) -> Option<(u64, Arc<str>)> {
        if self.capacity == 0 {
            return Some((sequence, task_id));
        }
        self.order.push((sequence, task_id));
        if self.length.fetch_add(1, Ordering::AcqRel) < self.capacity {
            return None;
        }
        // Over the bound: whoever pushed past it evicts one, so the length settles back at the bound.
        let evicted = self.order.pop();
        if evicted.is_some() {
            self.length.fetch_sub(1, Ordering::AcqRel);
        }
        evicted
    }
}
