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
    /// The runner paused the task (status `Paused`); the event carries the pause reason.
    Paused,
    /// The session resumed the paused task (status `Running` again).
    Resumed,
    /// Not about a task: the subscriber fell behind and missed [`SubagentEvent::missed`] events.
    Lagged,
}

impl SubagentEventKind {
    /// The lowercase name: `"started"`, `"claimed"`, `"progress"`, `"cancelled"`, `"ended"`, `"paused"`,
    /// `"resumed"` or `"lagged"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            SubagentEventKind::Started => "started",
            SubagentEventKind::Claimed => "claimed",
            SubagentEventKind::Progress => "progress",
            SubagentEventKind::Cancelled => "cancelled",
            SubagentEventKind::Ended => "ended",
            SubagentEventKind::Paused => "paused",
            SubagentEventKind::Resumed => "resumed",
            SubagentEventKind::Lagged => "lagged",
        }
    }

    /// The kind named `name` (as [`as_str`](Self::as_str) writes it), for stores that keep it as text.
    #[must_use]
    pub fn from_name(name: &str) -> Option<SubagentEventKind> {
        [
            SubagentEventKind::Started,
            SubagentEventKind::Claimed,
            SubagentEventKind::Progress,
            SubagentEventKind::Cancelled,
            SubagentEventKind::Ended,
            SubagentEventKind::Paused,
            SubagentEventKind::Resumed,
            SubagentEventKind::Lagged,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == name)
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
    /// The cancel reason, on `Cancelled` events and on the `Started` event of a task that started cancelled; the
    /// pause reason, if one was given, on `Paused` events.
    pub reason: Option<Arc<str>>,
    /// The progress message, on `Progress` events.
    pub message: Option<Arc<str>>,
    /// How many events the subscriber missed, on `Lagged` events; zero otherwise.
    pub missed: u64,
}

impl SubagentEvent {
    /// An event of `kind` about task `task_id`, now in `status`, at `timestamp`, with no reason or message: for
    /// a store other than the in-memory tracker to fill in.
    #[must_use]
    pub fn new(
        task_id: Arc<str>,
        kind: SubagentEventKind,
        status: SubagentStatus,
        timestamp: SystemTime,
    ) -> SubagentEvent {
        SubagentEvent {
            task_id,
            kind,
            status,
            timestamp,
            reason: None,
            message: None,
            missed: 0,
        }
    }
}
