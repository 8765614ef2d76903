//! Event-sourced ingestion (contract §5): a session fed by another runtime's stream of starts, progress reports
//! and ends, in whatever order and however often the stream delivers them.

use std::sync::Arc;

use crate::{TaskFailure, TaskStart};

/// One event of a runtime's stream, as [`record_event`](crate::InMemorySubagentTaskTracker::record_event)
/// takes it.
pub enum RecordedEvent<V> {
    /// The task started, run elsewhere: it is `Running` with no runner here; its end comes as an event.
    Started(TaskStart<V>),
    /// The task reported progress.
    Progress {
        /// The task.
        task_id: Arc<str>,
        /// The progress message.
        message: Arc<str>,
        /// Data kept beside the message in the progress log.
        data: Option<V>,
    },
    /// The task ended: `Ok(result)` completed it, `Err(failure)` failed it.
    Ended {
        /// The task.
        task_id: Arc<str>,
        /// How it ended.
        outcome: Result<Option<V>, TaskFailure>,
    },
}
