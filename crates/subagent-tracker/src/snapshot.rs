//! The immutable view of one task that queries return.

use std::sync::Arc;
use std::time::SystemTime;

use crate::{CancelCause, ProgressEntry, SubagentStatus};

/// A copy of one task's state, taken atomically: every field comes from the same instant.
///
/// `V` is the type of the caller's `metadata` and of the runner's `result`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SubagentTaskSnapshot<V = String> {
    /// The task's id, unique among the session's retained tasks.
    pub task_id: Arc<str>,
    /// The session that owns the task.
    pub session_id: Arc<str>,
    /// The task this one was started under, if any.
    pub parent_id: Option<Arc<str>>,
    /// A free-form name of the agent that runs the task.
    pub agent: Option<Arc<str>>,
    /// A free-form description of the work.
    pub description: Option<Arc<str>>,
    /// Whatever the starter attached.
    pub metadata: Option<V>,
    /// The status at the instant of the snapshot.
    pub status: SubagentStatus,
    /// True once the runner has reported its end or its handle was closed.
    pub finished: bool,
    /// When the task started, or was reserved.
    pub started_at: SystemTime,
    /// When the task was reserved (the same instant as `started_at`); `None` for a task started with a runner.
    pub queued_at: Option<SystemTime>,
    /// When a runner claimed the reserved task, if one has.
    pub claimed_at: Option<SystemTime>,
    /// When the task was cancelled, if it was.
    pub cancelled_at: Option<SystemTime>,
    /// When the runner reported its end (or its handle was closed), if it has.
    pub ended_at: Option<SystemTime>,
    /// The reason given with the cancel that reached the task.
    pub cancel_reason: Option<Arc<str>>,
    /// The task whose cancel reached this one: itself when cancelled directly, an ancestor on cascade.
    pub cancel_origin: Option<Arc<str>>,
    /// What cancelled the task: a request, its parent, its session, its deadline or a linked token.
    pub cancel_cause: Option<CancelCause>,
    /// Why the runner paused the task, while it is `Paused`, and on a task that ended while paused (contract
    /// §5, pause and resume); a resume clears it.
    pub pause_reason: Option<Arc<str>>,
    /// True when the runner did not stop within its grace period after a cancel and was stopped by force.
    pub escalated: bool,
    /// When the task's effective deadline falls (its own, bounded by its parent's unless detached).
    pub deadline: Option<SystemTime>,
    /// True for a task started detached: its parent's cascade does not reach it.
    pub detached: bool,
    /// The latest progress message.
    pub progress: Option<Arc<str>>,
    /// How many progress messages the runner has recorded.
    pub progress_count: u64,
    /// The latest progress reports, oldest first: at most the session's `progress_log_size` (contract §5).
    pub progress_log: Vec<ProgressEntry<V>>,
    /// What the runner completed with, kept even when the completion came after a cancel.
    pub result: Option<V>,
    /// What the runner failed with, kept even when the failure came after a cancel: the failure's message.
    pub error: Option<Arc<str>>,
    /// The failure's type, when the runner gave one (an exception's class name, say).
    pub error_type: Option<Arc<str>>,
    /// The failure's code, when the runner gave one.
    pub error_code: Option<Arc<str>>,
    /// The worker (process) whose runner runs the task, for a store shared by several; `None` in memory.
    pub worker: Option<Arc<str>>,
}

impl<V> SubagentTaskSnapshot<V> {
    /// A snapshot of task `task_id` with `status`, started at `started_at`, and every other field empty: for a
    /// store other than the in-memory tracker to fill in.
    #[must_use]
    pub fn new(
        task_id: Arc<str>,
        session_id: Arc<str>,
        status: SubagentStatus,
        started_at: SystemTime,
    ) -> Self {
        SubagentTaskSnapshot {
            task_id,
            session_id,
            parent_id: None,
            agent: None,
            description: None,
            metadata: None,
            status,
            finished: false,
            started_at,
            queued_at: None,
            claimed_at: None,
            cancelled_at: None,
            ended_at: None,
            cancel_reason: None,
            cancel_origin: None,
            cancel_cause: None,
            pause_reason: None,
            escalated: false,
            deadline: None,
            detached: false,
            progress: None,
            progress_count: 0,
            progress_log: Vec::new(),
            result: None,
            error: None,
            error_type: None,
            error_code: None,
            worker: None,
        }
    }

    /// The same snapshot with its metadata, progress data and result converted by `convert` (for a binding that keeps its
    /// own copies of them).
    pub fn map_values<U>(self, mut convert: impl FnMut(V) -> U) -> SubagentTaskSnapshot<U> {
        SubagentTaskSnapshot {
            task_id: self.task_id,
            session_id: self.session_id,
            parent_id: self.parent_id,
            agent: self.agent,
            description: self.description,
            metadata: self.metadata.map(&mut convert),
            status: self.status,
            finished: self.finished,
            started_at: self.started_at,
            queued_at: self.queued_at,
            claimed_at: self.claimed_at,
            cancelled_at: self.cancelled_at,
            ended_at: self.ended_at,
            cancel_reason: self.cancel_reason,
            cancel_origin: self.cancel_origin,
            cancel_cause: self.cancel_cause,
            pause_reason: self.pause_reason,
            escalated: self.escalated,
            deadline: self.deadline,
            detached: self.detached,
            progress: self.progress,
            progress_count: self.progress_count,
            progress_log: self
                .progress_log
                .into_iter()
                .map(|entry| ProgressEntry {
                    at: entry.at,
                    message: entry.message,
                    data: entry.data.map(&mut convert),
                })
                .collect(),
            result: self.result.map(convert),
            error: self.error,
            error_type: self.error_type,
            error_code: self.error_code,
            worker: self.worker,
        }
    }
}
