//! Which pending tasks a cancel by filter reaches (contract §3, cancel by filter).

use crate::SubagentStatus;

/// A filter over a session's pending tasks, for
/// [`cancel_matching`](crate::InMemorySubagentTaskTracker::cancel_matching): a task matches when it is pending
/// and every filter given matches. A filter with nothing given matches every pending task; a status that is
/// not pending matches nothing, since only pending tasks are cancelled.
///
/// `M` is the metadata filter in the store's form: in memory, a function of a task's metadata (`None` for a
/// task without); in Redis, the JSON object whose every key a task's metadata must hold, with an equal value.
/// For the Python API, the wanted metadata is a mapping whose every key must be present and equal.
///
/// ```
/// use subagent_tracker::{SubagentStatus, TaskFilter};
/// let running_coders: TaskFilter = TaskFilter::new().agent("coder").status(SubagentStatus::Running);
/// ```
pub struct TaskFilter<'a, M = fn(Option<&String>) -> bool> {
    agent: Option<&'a str>,
    status: Option<SubagentStatus>,
    metadata: Option<M>,
}

impl<'a, M> TaskFilter<'a, M> {
    /// A filter that matches every pending task.
    #[must_use]
    pub fn new() -> Self {
        TaskFilter {
            agent: None,
            status: None,
            metadata: None,
        }
    }

    /// Only tasks of this agent.
    #[must_use]
    pub fn agent(mut self, agent: &'a str) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Only tasks in this status.
    #[must_use]
    pub fn status(mut self, status: SubagentStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only tasks whose metadata matches `metadata` (see the type's documentation for its form).
    #[must_use]
    pub fn metadata(mut self, metadata: M) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The agent wanted, if any.
    #[must_use]
    pub fn wanted_agent(&self) -> Option<&'a str> {
        self.agent
    }

    /// The status wanted, if any.
    #[must_use]
    pub fn wanted_status(&self) -> Option<SubagentStatus> {
        self.status
    }

    /// The metadata filter, if any.
    #[must_use]
    pub fn wanted_metadata(&self) -> Option<&M> {
        self.metadata.as_ref()
    }

    /// The rule, but for metadata: a pending task, of the agent and in the status given.
    #[must_use]
    pub fn matches_status_and_agent(&self, status: SubagentStatus, agent: Option<&str>) -> bool {
        status.is_pending()
            && self.status.is_none_or(|wanted| wanted == status)
            && self.agent.is_none_or(|wanted| agent == Some(wanted))
    }
}

impl<M> Default for TaskFilter<'_, M> {
    fn default() -> Self {
        TaskFilter::new()
    }
}
