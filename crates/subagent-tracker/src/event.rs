//! Lifecycle events delivered to subscribers.

use std::sync::Arc;
use std::time::SystemTime;

use crate::SubagentStatus;

/// What happened to a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SubagentEventKind {
    /// The task started (possibly already cancelled, when its parent was), or was reserved (status `Queued`).
    Started,
    /// A runner claimed the reserved task.
    Claimed,
    /// The runner recorded a progress message.
    Progress,
    /// The task became cancelled.
    Cancelled,
    /// The runner reported its end, or its handle was closed: the task is finished.
    Ended,
    /// Not about a task: the subscriber fell behind and missed [`SubagentEvent::missed`] events.
    Lagged,
}

impl SubagentEventKind {
    /// The lowercase name: `"started"`, `"claimed"`, `"progress"`, `"cancelled"`, `"ended"` or `"lagged"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            SubagentEventKind::Started => "started",
            SubagentEventKind::Claimed => "claimed",
            SubagentEventKind::Progress => "progress",
            SubagentEventKind::Cancelled => "cancelled",
            SubagentEventKind::Ended => "ended",
            SubagentEventKind::Lagged => "lagged",
        }
    }
}

/// One lifecycle event. Events of one task are delivered in the order they happened.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SubagentEvent {
    /// The task concerned; empty for [`SubagentEventKind::Lagged`].
    pub task_id: Arc<str>,
    /// What happened.
    pub kind: SubagentEventKind,
    /// The task's status right after the event.
    pub status: SubagentStatus,
    /// When it happened.
    pub timestamp: SystemTime,
    /// The cancel reason, on `Cancelled` events and on the `Started` event of a task that started cancelled.
    pub reason: Option<Arc<str>>,
    /// The progress message, on `Progress` events.
    pub message: Option<Arc<str>>,
    /// How many events the subscriber missed, on `Lagged` events; zero otherwise.
    pub missed: u64,
}
