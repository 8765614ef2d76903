//! Errors returned by the tracker.

use std::fmt;
use std::sync::Arc;

use crate::time::SecondsProblem;

/// Why a tracker call was refused. A call that returns an error has changed nothing.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TrackerError {
    /// A task with this id is live (not finished) in the session.
    #[error("task {task_id:?} is already running in session {session_id:?}; a task id may be reused only after its task has finished")]
    DuplicateTask {
        /// The id that is in use.
        task_id: Arc<str>,
        /// The session that holds it.
        session_id: Arc<str>,
    },
    /// A batch names one task id twice: each task of a batch needs its own.
    #[error("task id {task_id:?} appears more than once in the batch; each task of a batch needs its own id")]
    DuplicateInBatch {
        /// The repeated id.
        task_id: Arc<str>,
    },
    /// No retained task has this id.
    #[error("no task {task_id:?} is retained in session {session_id:?}")]
    UnknownTask {
        /// The id looked up.
        task_id: Arc<str>,
        /// The session looked in.
        session_id: Arc<str>,
    },
    /// A claim of an id under which no task is retained: nothing was reserved under it, or its reservation
    /// has been forgotten. A claim takes over a reserved task; it never starts one.
    #[error("no task {task_id:?} is reserved in session {session_id:?} to be claimed: reserve it first (a claim takes over a reserved task, it never starts one)")]
    NotReserved {
        /// The id claimed.
        task_id: Arc<str>,
        /// The session looked in.
        session_id: Arc<str>,
    },
    /// The parent named at a start has already finished.
    #[error("parent task {parent_id:?} has already finished in session {session_id:?}; children can only be started under a live task")]
    ParentFinished {
        /// The finished parent.
        parent_id: Arc<str>,
        /// Its session.
        session_id: Arc<str>,
    },
    /// The session was closed and takes no new tasks.
    #[error("session {session_id:?} is closed and accepts no new tasks")]
    SessionClosed {
        /// The closed session.
        session_id: Arc<str>,
    },
    /// A claim of a task that no runner may take: it was claimed before, started with a runner, or ended
    /// before any claim.
    #[error("task {task_id:?} of session {session_id:?} cannot be claimed: {problem}")]
    NotClaimable {
        /// The task.
        task_id: Arc<str>,
        /// Its session.
        session_id: Arc<str>,
        /// Why it cannot be claimed.
        problem: ClaimProblem,
    },
    /// An id (of a task, a parent or a session) that is empty or too long.
    #[error("{argument} must be {problem}")]
    InvalidId {
        /// The argument that carried it: `"task_id"`, `"parent_id"`, `"session_id"`.
        argument: &'static str,
        /// What is wrong with it.
        problem: IdProblem,
    },
    /// A batch of ends names a runner's handle of another session: a batch ends the tasks of one session.
    #[error("the handle of task {task_id:?} is of another session, not of session {session_id:?}; a batch ends the tasks of its own session")]
    HandleOfAnotherSession {
        /// The handle's task.
        task_id: Arc<str>,
        /// The session the batch ends tasks in.
        session_id: Arc<str>,
    },
    /// A listing's page asked for with a cursor that no page of that listing gave.
    #[error("cursor {cursor:?} is not one that a page of this listing gave; start the listing again with no cursor")]
    InvalidCursor {
        /// The cursor given.
        cursor: Arc<str>,
    },
    /// A number of seconds (a timeout, a wait, a deadline) out of range.
    #[error("{argument} must be a finite, non-negative number of seconds no larger than {max:e}; {problem}", max = crate::MAX_SECONDS)]
    InvalidSeconds {
        /// The argument that carried it.
        argument: &'static str,
        /// What is wrong with it.
        problem: SecondsProblem,
    },
}

/// Why a task cannot be claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimProblem {
    /// A runner already has it: it was claimed before, or started with its runner.
    AlreadyClaimed,
    /// The reservation ended with this status before any claim (its claim timeout passed, or its end was
    /// recorded by id).
    Ended(crate::SubagentStatus),
}

impl fmt::Display for ClaimProblem {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimProblem::AlreadyClaimed => formatter.write_str("a runner has already claimed it"),
            ClaimProblem::Ended(status) => {
                write!(formatter, "it ended {status} before any runner claimed it")
            }
        }
    }
}

/// What is wrong with an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdProblem {
    /// The id is the empty string.
    Empty,
    /// The id is longer than [`MAX_TASK_ID_BYTES`](crate::MAX_TASK_ID_BYTES); it has this many bytes.
    TooLong(usize),
}

impl fmt::Display for IdProblem {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdProblem::Empty => formatter.write_str("a non-empty string"),
            IdProblem::TooLong(length) => write!(
                formatter,
                "at most {} bytes, got {length} bytes",
                crate::MAX_TASK_ID_BYTES
            ),
        }
    }
}

impl TrackerError {
    pub(crate) fn unknown_task(task_id: &str, session_id: &Arc<str>) -> TrackerError {
        TrackerError::UnknownTask {
            task_id: Arc::from(task_id),
            session_id: session_id.clone(),
        }
    }

    /// A number of seconds given as `argument`, checked by the one rule ([`duration_from_seconds`](crate::duration_from_seconds)).
    ///
    /// # Errors
    /// [`TrackerError::InvalidSeconds`] naming `argument`.
    pub fn check_seconds(
        argument: &'static str,
        seconds: f64,
    ) -> Result<std::time::Duration, TrackerError> {
        crate::duration_from_seconds(seconds)
            .map_err(|problem| TrackerError::InvalidSeconds { argument, problem })
    }

    /// A deadline in seconds since the epoch given as `argument`, checked by the one rule
    /// ([`system_time_from_epoch_seconds`](crate::system_time_from_epoch_seconds)).
    ///
    /// # Errors
    /// [`TrackerError::InvalidSeconds`] naming `argument`.
    pub fn check_epoch_deadline(
        argument: &'static str,
        seconds: f64,
    ) -> Result<std::time::SystemTime, TrackerError> {
        crate::system_time_from_epoch_seconds(seconds)
            .map_err(|problem| TrackerError::InvalidSeconds { argument, problem })
    }
}
