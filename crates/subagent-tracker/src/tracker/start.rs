//! What a caller says about a task when starting it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::time::Deadline;
use crate::SubagentTaskToken;

/// The description of a task to start, built with chained setters.
///
/// ```
/// use subagent_tracker::TaskStart;
/// let start: TaskStart = TaskStart::new().task_id("researcher-1").agent("researcher");
/// ```
#[derive(Clone, Debug)]
pub struct TaskStart<V = String> {
    pub(crate) task_id: Option<Arc<str>>,
    pub(crate) parent_id: Option<String>,
    pub(crate) agent: Option<Arc<str>>,
    pub(crate) description: Option<Arc<str>>,
    pub(crate) metadata: Option<V>,
    pub(crate) deadline: Option<Deadline>,
    pub(crate) detached: bool,
    pub(crate) structured: bool,
    pub(crate) linked: Vec<SubagentTaskToken>,
}

impl<V> Default for TaskStart<V> {
    fn default() -> Self {
        TaskStart {
            task_id: None,
            parent_id: None,
            agent: None,
            description: None,
            metadata: None,
            deadline: None,
            detached: false,
            structured: false,
            linked: Vec::new(),
        }
    }
}

/// What a [`TaskStart`] says, field by field: for a store other than the in-memory tracker.
#[derive(Debug)]
#[non_exhaustive]
pub struct TaskStartParts<V> {
    /// The id given, if any.
    pub task_id: Option<Arc<str>>,
    /// The parent named, if any.
    pub parent_id: Option<String>,
    /// The agent's name.
    pub agent: Option<Arc<str>>,
    /// The description of the work.
    pub description: Option<Arc<str>>,
    /// The caller's data.
    pub metadata: Option<V>,
    /// The deadline on the wall clock, if one was set.
    pub deadline: Option<SystemTime>,
    /// Out of the parent's reach.
    pub detached: bool,
    /// A task group: a failing child cancels it, and its end cancels its pending children.
    pub structured: bool,
    /// The tokens whose firing cancels the task.
    pub linked: Vec<SubagentTaskToken>,
}

impl<V> TaskStart<V> {
    /// Takes the description apart.
    #[must_use]
    pub fn into_parts(self) -> TaskStartParts<V> {
        TaskStartParts {
            task_id: self.task_id,
            parent_id: self.parent_id,
            agent: self.agent,
            description: self.description,
            metadata: self.metadata,
            deadline: self.deadline.map(|deadline| deadline.wall),
            detached: self.detached,
            structured: self.structured,
            linked: self.linked,
        }
    }

    /// A task with a generated id, no parent and no descriptive fields.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The task id given to [`task_id`](Self::task_id), if any (a start without one gets a generated id).
    #[must_use]
    pub fn given_task_id(&self) -> Option<&Arc<str>> {
        self.task_id.as_ref()
    }

    /// Sets the task id. Without it the tracker generates a unique one.
    #[must_use]
    pub fn task_id(mut self, task_id: impl Into<Arc<str>>) -> Self {
        self.task_id = Some(task_id.into());
        self
    }

    /// Starts the task under a live task of the same session, so that cancelling the parent cancels it too.
    #[must_use]
    pub fn parent_id(mut self, parent_id: impl Into<String>) -> Self {
        self.parent_id = Some(parent_id.into());
        self
    }

    /// Names the agent that runs the task.
    #[must_use]
    pub fn agent(mut self, agent: impl Into<Arc<str>>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Describes the work.
    #[must_use]
    pub fn description(mut self, description: impl Into<Arc<str>>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Cancels the task with reason [`DEADLINE_REASON`](crate::DEADLINE_REASON) and cause
    /// [`Deadline`](crate::CancelCause::Deadline) when `deadline` passes. A child's effective deadline is the
    /// earlier of its own and its parent's (unless detached).
    #[must_use]
    pub fn deadline(self, deadline: Instant) -> Self {
        self.with_deadline(Deadline::at_instant(
            deadline,
            Instant::now(),
            SystemTime::now(),
        ))
    }

    /// A deadline on the wall clock (for one given as seconds since the epoch, see
    /// [`system_time_from_epoch_seconds`](crate::system_time_from_epoch_seconds)). One already past cancels
    /// the task during its start; snapshots show it as given.
    #[must_use]
    pub fn deadline_at(self, deadline: SystemTime) -> Self {
        self.with_deadline(Deadline::at_wall(
            deadline,
            Instant::now(),
            SystemTime::now(),
        ))
    }

    /// A deadline `timeout` from now. A timeout too long for the platform's clock sets no deadline; one
    /// checked by [`duration_from_seconds`](crate::duration_from_seconds) always fits.
    #[must_use]
    pub fn timeout(self, timeout: Duration) -> Self {
        let now = Instant::now();
        if now.checked_add(timeout).is_none() {
            return self;
        }
        self.with_deadline(Deadline::after(timeout, now, SystemTime::now()))
    }

    fn with_deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = Some(
            self.deadline
                .map_or(deadline, |earlier| earlier.earlier(deadline)),
        );
        self
    }

    /// Starts the task out of its parent's reach: the parent's cancel and deadline do not pass on to it. It is
    /// still cancellable by id and by its session.
    #[must_use]
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }

    /// Makes the task a task group, as anyio's are (contract §3, task groups): when an attached child of it
    /// fails, the task is cancelled (cause [`ChildFailed`](crate::CancelCause::ChildFailed), the child as
    /// origin), and so are its other children; when the task itself completes or fails, its pending children
    /// are cancelled (cause [`Parent`](crate::CancelCause::Parent)). Detached children are out of the group.
    /// Without it (the default), a child's failure is its own.
    #[must_use]
    pub fn structured(mut self, structured: bool) -> Self {
        self.structured = structured;
        self
    }

    /// Cancels the task (cause [`Linked`](crate::CancelCause::Linked), with the source's reason) when `token`
    /// fires, even if it belongs to another task or session. The link is dropped when the task finishes.
    #[must_use]
    pub fn linked(mut self, token: SubagentTaskToken) -> Self {
        self.linked.push(token);
        self
    }

    /// Attaches caller data, returned unchanged on every snapshot.
    #[must_use]
    pub fn metadata(mut self, metadata: V) -> Self {
        self.metadata = Some(metadata);
        self
    }
}
