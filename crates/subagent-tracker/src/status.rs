//! The lifecycle status of a subagent task.

use std::fmt;

/// Where a subagent task stands in its lifecycle.
///
/// A task is [`Running`](Self::Running) from its start, or [`Queued`](Self::Queued) from its reservation until
/// a runner claims it; its runner may pause it ([`Paused`](Self::Paused)) until the session resumes it. `Queued`,
/// `Running` and `Paused` are pending; the three other values are terminal and sticky: the first transition out
/// of a pending status wins, and nothing moves a task out of a terminal status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum SubagentStatus {
    /// Started, and neither ended by its runner nor cancelled.
    Running = 0,
    /// The runner reported success before any cancel.
    Completed = 1,
    /// The runner reported a failure before any cancel.
    Failed = 2,
    /// A cancel reached the task while it was running. A later end reported by the runner never replaces it.
    Cancelled = 3,
    /// Reserved, and not yet claimed by a runner. A cancel finishes it at once, since nothing runs.
    Queued = 4,
    /// Paused by its runner (to wait for a person's approval, say) until the session resumes it. Pending: a
    /// cancel, a deadline or the runner's own end moves it on as from `Running`.
    Paused = 5,
}

impl SubagentStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [SubagentStatus; 6] = [
        SubagentStatus::Queued,
        SubagentStatus::Running,
        SubagentStatus::Paused,
        SubagentStatus::Completed,
        SubagentStatus::Failed,
        SubagentStatus::Cancelled,
    ];

    /// The lowercase name used on the wire and in Python: `"queued"`, `"running"`, `"completed"`, `"failed"`,
    /// `"cancelled"`, `"paused"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            SubagentStatus::Running => "running",
            SubagentStatus::Completed => "completed",
            SubagentStatus::Failed => "failed",
            SubagentStatus::Cancelled => "cancelled",
            SubagentStatus::Queued => "queued",
            SubagentStatus::Paused => "paused",
        }
    }

    /// True for `Completed`, `Failed` and `Cancelled`.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        !self.is_pending()
    }

    /// True for `Queued`, `Running` and `Paused`: the statuses a cancel moves to `Cancelled`.
    #[must_use]
    pub const fn is_pending(self) -> bool {
        matches!(
            self,
            SubagentStatus::Queued | SubagentStatus::Running | SubagentStatus::Paused
        )
    }

    /// The status named `name` (as [`as_str`](Self::as_str) writes it), for stores that keep it as text.
    #[must_use]
    pub fn from_name(name: &str) -> Option<SubagentStatus> {
        SubagentStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == name)
    }

    pub(crate) const fn from_repr(value: u8) -> SubagentStatus {
        match value {
            0 => SubagentStatus::Running,
            1 => SubagentStatus::Completed,
            2 => SubagentStatus::Failed,
            3 => SubagentStatus::Cancelled,
            5 => SubagentStatus::Paused,
            _ => SubagentStatus::Queued,
        }
    }
}

impl fmt::Display for SubagentStatus {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.pad(self.as_str())
    }
}
