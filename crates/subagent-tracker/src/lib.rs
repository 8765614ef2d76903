//! Start, watch and stop concurrent subagent tasks.
//!
//! Agent frameworks delegate work to child agents ("subagents"). This crate tracks those tasks for one session
//! at a time: each task has a cancellation token and a status, cancels cascade down the task tree, finished
//! tasks are retained within a bound, and every rule holds under any interleaving of threads.
//!
//! ```
//! use subagent_tracker::{InMemorySubagentTaskTracker, SubagentStatus, TaskStart};
//!
//! let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
//! let parent = tracker.start(TaskStart::new().task_id("orchestrator")).unwrap();
//! let child = tracker.start(TaskStart::new().task_id("researcher").parent_id("orchestrator")).unwrap();
//!
//! assert!(tracker.cancel("orchestrator", Some("user pressed stop")));
//! assert!(child.is_cancelled()); // the cancel cascaded
//! assert!(!child.complete(Some("late".into()))); // a late end never downgrades Cancelled
//! let snapshot = tracker.get("researcher").unwrap();
//! assert_eq!(snapshot.status, SubagentStatus::Cancelled);
//! assert_eq!(snapshot.cancel_origin.as_deref(), Some("orchestrator"));
//! # drop(parent);
//! ```
//!
//! The contract this crate keeps is written out in the repository's `docs/contract.md` (sections 1 to 10),
//! extended for agent loops (cancel causes, deadlines, callbacks, linked tokens, detached children)
//! in `docs/agent-loops.md`; each type documents the rules it is responsible for.

#![forbid(unsafe_code)]

mod cancel_callback;
mod cancel_cause;
mod cancel_signal;
mod deadline_timer;
mod delivery;
mod error;
mod event;
mod event_bus;
mod handle;
mod pending_index;
mod registry;
mod retained_run;
mod retention;
mod snapshot;
mod status;
mod sync;
mod task_entry;
mod task_id;
mod task_start;
mod task_watch;
mod time;
mod token;
mod tracker;

pub use cancel_callback::CancelCallback;
pub use cancel_cause::CancelCause;
pub use cancel_signal::OnCancel;
pub use deadline_timer::{fork, pending_deadlines};
pub use error::{ClaimProblem, IdProblem, TrackerError};
pub use event::{SubagentEvent, SubagentEventKind};
pub use event_bus::{EventSubscription, SubscriptionCloser, DEFAULT_EVENT_BUFFER};
pub use handle::{SubagentTaskHandle, DROPPED_HANDLE_ERROR};
pub use registry::InMemoryRegistry;
pub use retention::DEFAULT_MAX_FINISHED_TASKS;
pub use snapshot::SubagentTaskSnapshot;
pub use status::SubagentStatus;
pub use task_entry::{kept_progress_message, MAX_PROGRESS_MESSAGE_BYTES};
pub use task_id::{generate_id, validate_task_id, MAX_TASK_ID_BYTES};
pub use task_start::{TaskStart, TaskStartParts};
pub use task_watch::TaskWatch;
pub use time::{
    duration_from_seconds, epoch_seconds, system_time_from_epoch_seconds, SecondsProblem,
    MAX_SECONDS,
};
pub use token::{SubagentTaskToken, WaitForCancel, WaitForFinish};
pub use tokio_util::sync::CancellationToken;
/// The README's Rust blocks, run as doctests so that they keep running as written.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

pub use tracker::{
    claim_timeout_error, InMemorySubagentTaskTracker, TrackerConfig, BATCH_REFUSED_REASON,
    CLAIM_TIMEOUT_ERROR, DEADLINE_REASON, DEFAULT_CANCEL_REASON,
};
