//! Why a task was cancelled.

use std::fmt;

/// What moved a task to `Cancelled`, recorded on its snapshot beside the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelCause {
    /// Cancelled by id, or by its own runner stopping on a cancel.
    Requested,
    /// Reached by the cascade of an ancestor's cancel, or started under a cancelled parent.
    Parent,
    /// Cancelled by a session-wide cancel or by closing the session.
    Session,
    /// Its deadline passed (its own, or an ancestor's, which bounds it).
    Deadline,
    /// A token it was linked to at start fired.
    Linked,
    /// The worker that runs it lost its lease on a shared store, so no other process can see it run any more.
    Lease,
    /// It is a task group (`TaskStart::structured`) and one of its attached children failed; the child is the
    /// cancel's origin.
    ChildFailed,
}

impl CancelCause {
    /// The lowercase name: `"requested"`, `"parent"`, `"session"`, `"deadline"`, `"linked"`, `"lease"` or
    /// `"child_failed"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            CancelCause::Requested => "requested",
            CancelCause::Parent => "parent",
            CancelCause::Session => "session",
            CancelCause::Deadline => "deadline",
            CancelCause::Linked => "linked",
            CancelCause::Lease => "lease",
            CancelCause::ChildFailed => "child_failed",
        }
    }

    /// The cause named `name` (as [`as_str`](Self::as_str) writes it), for stores that keep it as text.
    #[must_use]
    pub fn from_name(name: &str) -> Option<CancelCause> {
        [
            CancelCause::Requested,
            CancelCause::Parent,
            CancelCause::Session,
            CancelCause::Deadline,
            CancelCause::Linked,
            CancelCause::Lease,
            CancelCause::ChildFailed,
        ]
        .into_iter()
        .find(|cause| cause.as_str() == name)
    }
}

impl fmt::Display for CancelCause {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.pad(self.as_str())
    }
}
