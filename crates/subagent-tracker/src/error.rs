//! Errors returned by the tracker.

use std::sync::Arc;

/// Why a tracker call was refused. A call that returns an error has changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrackerError {
    /// A task with this id is live (not finished) in the session.
    #[error("task {task_id:?} is already running in session {session_id:?}; a task id may be reused only after its task has finished")]
    DuplicateTask {
        /// The id that is in use.
        task_id: Arc<str>,
        /// The session that holds it.
        session_id: Arc<str>,
    },
    /// No retained task has this id, or (for a parent) the task has already finished.
    #[error("{0}")]
    UnknownTask(String),
    /// The session was closed and takes no new tasks.
    #[error("session {session_id:?} is closed and accepts no new tasks")]
    SessionClosed {
        /// The closed session.
        session_id: Arc<str>,
    },
    /// A task id that is empty or longer than [`MAX_TASK_ID_BYTES`](crate::MAX_TASK_ID_BYTES).
    #[error("{0}")]
    InvalidTaskId(String),
}

impl TrackerError {
    pub(crate) fn unknown_task(task_id: &str, session_id: &str) -> TrackerError {
        TrackerError::UnknownTask(format!(
            "no task {task_id:?} is retained in session {session_id:?}"
        ))
    }

    pub(crate) fn finished_parent(parent_id: &str, session_id: &str) -> TrackerError {
        TrackerError::UnknownTask(format!(
            "parent task {parent_id:?} has already finished in session {session_id:?}; children can only be started under a live task"
        ))
    }
}
