//! One session kept in Redis, seen from one process: the handle, its connection to the worker and the refusals
//! its server functions answer with. Its calls are split by job under `session/`, with the file names of the
//! core's `tracker/` where the job is the same (`start`, `opening`, `batch_end`, `restore`, `recorded_event`,
//! `run`, `retention`, `cancel_wait`), and `cancel` and `queries` for what the core keeps in `tracker.rs`.

use std::sync::Arc;

use subagent_tracker::{
    ClaimProblem, SubagentStatus, SubagentTaskSnapshot, TaskFailure, TrackerError,
};

use crate::coalesce::CoalescedCalls;
use crate::mirrors::Mirror;
use crate::session_state::{session_state, SessionState};
use crate::store::{self, TaskFields};
use crate::worker::Worker;
use crate::RedisTrackerError;

mod batch_end;
mod cancel;
mod cancel_wait;
mod opening;
mod queries;
mod recorded_event;
mod restore;
mod retention;
mod run;
mod start;

pub use opening::OPEN_BATCH_STEP;
pub use queries::MAX_PAGE;

/// A session kept in Redis: every process that opens it sees the same tasks, and the rules of the in-memory
/// tracker hold across all of them (the transitions are functions that run atomically on the server).
///
/// An object belongs to one incarnation of its session id: the one that was live when the registry handed it
/// out. Once that incarnation has ended (closed with every task finished and its id opened anew, swept after
/// `session_ttl` idle, or lost with a server that restarted empty), its transitions and queries fail with
/// [`TrackerError::SessionClosed`], and its runners' ends return false.
///
/// Cheap to clone. Every method is one round trip to Redis, except those that start or claim a run, which also
/// set up the run's local token.
#[derive(Clone)]
pub struct RedisSession {
    worker: Arc<Worker>,
    session_id: Arc<str>,
    key: Arc<str>,
    /// The incarnation this object belongs to (the session's first run number).
    incarnation: Arc<str>,
    max_finished_tasks: usize,
    /// The in-memory mirror of this worker's runs in the session: their tokens.
    mirror: Arc<Mirror>,
    /// The incarnation's starts and ends in this process, coalesced (`coalesce.rs`).
    calls: Arc<CoalescedCalls>,
}

/// How a runner's end is written in Redis.
pub(crate) enum Outcome<'a> {
    Completed(Option<&'a str>),
    Failed(&'a TaskFailure),
    /// The runner stopped on a cancel (one of its own, with this reason, if the store has not seen one).
    Stopped(Option<&'a str>),
    /// The handle was dropped without an end.
    Dropped,
}

impl RedisSession {
    pub(crate) fn new(
        worker: Arc<Worker>,
        session_id: Arc<str>,
        key: String,
        state: &SessionState,
    ) -> RedisSession {
        let mirror = worker.mirrors.use_session(&session_id);
        let key: Arc<str> = Arc::from(key);
        let incarnation: Arc<str> = Arc::from(state.incarnation.as_str());
        let calls = mirror.calls(&incarnation, || {
            CoalescedCalls::new(&worker, &key, &incarnation)
        });
        RedisSession {
            worker,
            session_id,
            key,
            incarnation,
            max_finished_tasks: state.max_finished_tasks,
            mirror,
            calls,
        }
    }

    /// The session's id.
    #[must_use]
    pub fn session_id(&self) -> &Arc<str> {
        &self.session_id
    }

    /// How many finished tasks the session keeps: the bound its incarnation was made with (a session that
    /// existed keeps its own). Fixed for the incarnation, so reading it never touches the network.
    #[must_use]
    pub fn max_finished_tasks(&self) -> usize {
        self.max_finished_tasks
    }

    /// Whether this object's incarnation is closed: closed by any process, or ended (closed and drained with
    /// its id opened again, swept, or lost with the server). One round trip.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn is_closed(&self) -> Result<bool, RedisTrackerError> {
        let state: Vec<String> = store::call(
            &mut self.worker.connection.clone(),
            "session",
            &[&self.key],
            &[],
        )
        .await?;
        Ok(match session_state(state)? {
            Some(state) => state.closed || *state.incarnation != *self.incarnation,
            None => true,
        })
    }

    /// True when this and `other` are the same incarnation of a session seen through the same registry.
    #[must_use]
    pub fn same_session(&self, other: &RedisSession) -> bool {
        Arc::ptr_eq(&self.worker, &other.worker)
            && self.session_id == other.session_id
            && self.incarnation == other.incarnation
    }

    pub(crate) fn mirror(&self) -> &Arc<Mirror> {
        &self.mirror
    }

    /// The retained task `task_id` with its run, or `None` (an aged task too, as queries leave it out). One
    /// round trip.
    pub(crate) async fn read_run(
        &self,
        task_id: &str,
    ) -> Result<Option<(String, SubagentTaskSnapshot<String>)>, RedisTrackerError> {
        let fields: Vec<String> = self
            .transition("get", &[&self.incarnation, task_id, ""])
            .await?;
        let Some(fields) = TaskFields::from_flat(fields) else {
            return Ok(None);
        };
        let run = fields
            .run()
            .ok_or_else(|| RedisTrackerError::Protocol(Arc::from("a task without its run")))?;
        Ok(Some((run, fields.snapshot(&self.session_id)?)))
    }

    pub(crate) fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// Calls the session function `name` on this session.
    async fn call<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: &[&str],
    ) -> Result<T, RedisTrackerError> {
        match store::call(
            &mut self.worker.connection.clone(),
            name,
            &[&self.key],
            args,
        )
        .await
        {
            Err(error) => Err(self.lost_if_gone(error).await),
            outcome => outcome,
        }
    }

    /// `error` as it was, or [`RedisTrackerError::SessionLost`] when it says the incarnation is gone and the
    /// session was lost though nobody closed it (evicted) rather than closed and removed.
    async fn lost_if_gone(&self, error: RedisTrackerError) -> RedisTrackerError {
        if is_gone(&error) && self.worker.is_session_lost(&self.session_id).await {
            return RedisTrackerError::SessionLost {
                session_id: self.session_id.clone(),
            };
        }
        error
    }

    /// Calls a session function whose only refusal is that this object's incarnation has ended.
    async fn transition<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: &[&str],
    ) -> Result<T, RedisTrackerError> {
        self.call(name, args)
            .await
            .map_err(|error| self.refusal(error, "", None))
    }

    /// The contract's refusal that `stv2_open_batch`'s error reply `<CODE> <index>` stands for, naming the
    /// task it refused.
    fn batch_refusal<'a>(
        &self,
        error: RedisTrackerError,
        task_at: impl Fn(usize) -> Option<(&'a Arc<str>, Option<&'a str>)>,
    ) -> RedisTrackerError {
        let refused = match &error {
            RedisTrackerError::ServerError { source } => source
                .detail()
                .and_then(|detail| detail.rsplit(' ').next())
                .and_then(|index| index.parse::<usize>().ok())
                .and_then(task_at),
            _ => None,
        };
        let Some((task_id, parent_id)) = refused else {
            return self.refusal(error, "", None);
        };
        let is_repeat = matches!(&error, RedisTrackerError::ServerError { source }
            if source.code() == Some("DUPLICATE_IN_BATCH")
                || source.detail().is_some_and(|detail| detail.starts_with("DUPLICATE_IN_BATCH")));
        if is_repeat {
            return TrackerError::DuplicateInBatch {
                task_id: task_id.clone(),
            }
            .into();
        }
        self.refusal(error, task_id, parent_id)
    }

    /// The contract's refusal that a function's error reply stands for, or the error as it was.
    fn refusal(
        &self,
        error: RedisTrackerError,
        task_id: &str,
        parent_id: Option<&str>,
    ) -> RedisTrackerError {
        let RedisTrackerError::ServerError { source } = &error else {
            return error;
        };
        // The server sends a function's error reply `<CODE> <detail>` as it is, and a lone `<CODE>` as
        // `ERR <CODE>`.
        let (code, detail) = match (source.code(), source.detail()) {
            (Some("ERR"), Some(reply)) => reply.split_once(' ').unwrap_or((reply, "")),
            (Some(code), detail) => (code, detail.unwrap_or_default()),
            (None, _) => return error,
        };
        match self.refusal_of(code, detail, task_id, parent_id) {
            RedisTrackerError::Protocol(_) => error,
            refusal => refusal,
        }
    }

    /// The contract's refusal that a function's code (`DUPLICATE`, `CLOSED`, ...) and its detail stand for,
    /// naming `task_id` (and `parent_id`); a code no function sends is a protocol error.
    fn refusal_of(
        &self,
        code: &str,
        detail: &str,
        task_id: &str,
        parent_id: Option<&str>,
    ) -> RedisTrackerError {
        let session_id = self.session_id.clone();
        let task_id: Arc<str> = Arc::from(task_id);
        let refusal = match code {
            "DUPLICATE" => TrackerError::DuplicateTask {
                task_id,
                session_id,
            },
            "UNKNOWN_PARENT" => TrackerError::UnknownTask {
                task_id: Arc::from(parent_id.unwrap_or_default()),
                session_id,
            },
            "NOT_RESERVED" => TrackerError::NotReserved {
                task_id,
                session_id,
            },
            "PARENT_FINISHED" => TrackerError::ParentFinished {
                parent_id: Arc::from(parent_id.unwrap_or_default()),
                session_id,
            },
            "CLOSED" | "GONE" => TrackerError::SessionClosed { session_id },
            "CLAIMED" => TrackerError::NotClaimable {
                task_id,
                session_id,
                problem: ClaimProblem::AlreadyClaimed,
            },
            "ENDED" => TrackerError::NotClaimable {
                task_id,
                session_id,
                problem: ClaimProblem::Ended(
                    SubagentStatus::from_name(detail).unwrap_or(SubagentStatus::Failed),
                ),
            },
            _ => return RedisTrackerError::Protocol(Arc::from(format!("refusal {code}"))),
        };
        refusal.into()
    }
}

/// Whether `error` is a function's refusal `GONE`: this object's incarnation has ended.
fn is_gone(error: &RedisTrackerError) -> bool {
    let RedisTrackerError::ServerError { source } = error else {
        return false;
    };
    match (source.code(), source.detail()) {
        (Some("GONE"), _) => true,
        (Some("ERR"), Some(detail)) => detail == "GONE" || detail.starts_with("GONE "),
        _ => false,
    }
}
