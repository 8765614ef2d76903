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
//!
//! # Layers
//!
//! - Values every layer shares: [`SubagentStatus`], [`CancelCause`], [`SubagentTaskSnapshot`], events, errors,
//!   ids and times, and `sync` (the primitives the model checks swap for loom's).
//! - The token layer (`token`): a cancellation signal, what its firing owes, and the [`SubagentTaskToken`]
//!   that observes it. It knows nothing of sessions.
//! - The tracker layer (`tracker`): one session's tasks, their tree, retention and timers, built on signals.
//! - The registry (`registry`): sessions by id, above the trackers it lists.
//!
//! # Lock hierarchy
//!
//! Every lock in the crate, numbered in the one order in which they may nest: a thread that holds a lock
//! takes only locks of a higher level. No lock is held while user code runs (a waker, a callback, the
//! destructor of a user's value): a transition collects what it owes in a delivery (`token::delivery`),
//! delivered once no lock is held, and never from `Drop`.
//!
//! 1. The deadline timer's `firing` lock (`tracker::deadline_timer`): held while due deadlines make their
//!    transitions, and by the fork hooks, so that no fork happens in between.
//! 2. A task's record lock (`tracker::entry`). Two record locks nest only child before parent: admission and
//!    adoption read the parent while holding the child.
//! 3. A session's list of event subscribers (`tracker::event_bus`).
//! 4. One subscriber's buffer of events, taken under the list, one buffer at a time.
//! 5. A shard of a session's id map (`tracker::run_map`), which also holds which of the shard's runs are
//!    pending. Under it a run enters or leaves the session's retention window, and nothing else is taken.
//! 6. Leaves, taken under any of the above or under none, and under which nothing else is taken:
//!    - a task's signal lock (`token::signal`); when the signal fires, the tokio-util token bridged to it is
//!      cancelled by the delivery, never under the lock, since cancelling it wakes its waiters;
//!    - a session's retention window (`tracker::retention`; a run's place in the window is read and written
//!      only under it, so it moves by plain loads and stores) and its cancels recorded before their tasks
//!      start (`tracker::early_cancels`);
//!    - the deadline timer's map of scheduled deadlines;
//!    - a registry's map of sessions (`registry`): a session leaves it with none of its own locks held, and
//!      sessions that leave are dropped after the map's lock is released;
//!    - the delivery pool's queue (`token::delivery_pool`): the hand-over of what a cancel owes to user code
//!      to the bounded set of threads that deliver it, for the threads that serve everyone.
//!
//! A signal's last owner takes its state without the lock (`Drop`, and `into_sources` after `Arc::into_inner`,
//! hold the only reference).
//!
//! The model checks (`tests/loom.rs`) explore every one of these locks but the deadline timer's two and the
//! delivery pool's, the id map's shards included (`sync` gives them loom's). Under a shard lock the core does
//! nothing but the map operation, the shard's pending runs, the table's layout it publishes for prefetches (relaxed
//! stores, read with no lock), the window's count of the shard's runs, reads of
//! the run there and of the status of a run it makes visible, the store of a late escalation's flag on a
//! finished record, and the garbage collector's visit of finished records' values (`InMemorySubagentTaskTracker::visit_values`, under each shard's read lock
//! in turn), whose callback takes no lock of the core's (a binding's own value lock at most, a leaf).

// One `unsafe` block, allowed where it stands: the prefetch instruction (`tracker::prefetch`), which reads
// nothing the program sees and never faults. Stable Rust has no safe prefetch.
#![deny(unsafe_code)]

mod cancel_cause;
mod error;
mod event;
mod failure;
mod progress;
mod registry;
mod snapshot;
mod status;
mod sync;
mod task_id;
mod time;
mod token;
mod tracker;

pub use cancel_cause::CancelCause;
pub use error::{ClaimProblem, IdProblem, TrackerError};
pub use event::{SubagentEvent, SubagentEventKind};
pub use failure::TaskFailure;
pub use progress::{ProgressEntry, DEFAULT_PROGRESS_LOG_SIZE, MAX_PROGRESS_LOG_SIZE};
pub use registry::InMemoryRegistry;
pub use snapshot::SubagentTaskSnapshot;
pub use status::SubagentStatus;
pub use task_id::{generate_id, validate_task_id, MAX_TASK_ID_BYTES};
pub use time::{
    duration_from_seconds, epoch_seconds, system_time_from_epoch_seconds, SecondsProblem,
    MAX_SECONDS,
};
pub use token::callback::CancelCallback;
pub use token::delivery::OnCancel;
pub use token::handlers::HandlerDone;
pub use token::{SubagentTaskToken, WaitForCancel, WaitForFinish, WaitForResume};
pub use tokio_util::sync::CancellationToken;
pub use tracker::batch_end::{check_batch_ends, EndTarget, TaskEnd};
pub use tracker::cancel_wait::{cancel_wait_timeout_message, CancelWait, WaitForHandlers};
pub use tracker::config::TrackerConfig;
pub use tracker::deadline_timer::{fork, pending_deadlines};
pub use tracker::early_cancels::{DEFAULT_EARLY_CANCEL_TTL, MAX_EARLY_CANCELS};
pub use tracker::engine::MetadataMerge;
pub use tracker::entry::{kept_progress_message, Resumption, MAX_PROGRESS_MESSAGE_BYTES};
pub use tracker::event_bus::{EventSubscription, SubscriptionCloser, DEFAULT_EVENT_BUFFER};
pub use tracker::handle::{ResumeWatch, SubagentTaskHandle, DROPPED_HANDLE_ERROR};
pub use tracker::reasons::{
    claim_timeout_error, BATCH_REFUSED_REASON, CHILD_FAILED_REASON, CLAIM_TIMEOUT_ERROR,
    DEADLINE_REASON, DEFAULT_CANCEL_REASON, GROUP_ENDED_REASON,
};
pub use tracker::recorded_event::RecordedEvent;
pub use tracker::restore::{restored_snapshot, RESTORED_WITHOUT_RUNNER_ERROR};
pub use tracker::retention::DEFAULT_MAX_FINISHED_TASKS;
pub use tracker::start::{TaskStart, TaskStartParts};
pub use tracker::task_filter::TaskFilter;
pub use tracker::watch::TaskWatch;
pub use tracker::InMemorySubagentTaskTracker;

/// The README's Rust blocks, run as doctests so that they keep running as written.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
