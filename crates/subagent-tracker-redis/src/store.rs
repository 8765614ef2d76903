//! The server side: the key names of a session, and calls of the functions in `functions.lua`, which hold every
//! transition rule of the Redis store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::aio::ConnectionManager;
use redis::FromRedisValue;
use subagent_tracker::{CancelCause, SubagentStatus, SubagentTaskSnapshot};

use crate::RedisTrackerError;

/// The library of server-side functions, loaded (or replaced) when a registry connects, and again if a
/// restarted server has lost it.
const FUNCTIONS: &str = include_str!("functions.lua");

/// Where a registry's keys live, and the names of one session's keys.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: Arc<str>,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys {
            prefix: Arc::from(prefix),
        }
    }

    /// The hash of session `session_id`; the functions derive the session's other keys from it. The hash tag
    /// keeps all of them in one cluster slot.
    pub(crate) fn session(&self, session_id: &str) -> String {
        format!("{}{{{session_id}}}:session", self.prefix)
    }

    /// The stream of session `session_id`'s lifecycle events.
    pub(crate) fn events(&self, session_id: &str) -> String {
        format!("{}{{{session_id}}}:events", self.prefix)
    }

    /// The channel on which the functions publish the cancels of tasks that `worker_id` runs.
    pub(crate) fn worker_channel(&self, worker_id: &str) -> String {
        format!("{}worker:{worker_id}", self.prefix)
    }

    /// The index of sessions, by the last change seen of each (a hint: each session's own hash has the truth).
    pub(crate) fn sessions(&self) -> String {
        format!("{}sessions", self.prefix)
    }

    /// The sorted set of worker leases, by expiry on the server's clock.
    pub(crate) fn workers(&self) -> String {
        format!("{}workers", self.prefix)
    }

    /// The sorted set of sessions with timers (deadlines, claim timeouts), by when the next one falls due.
    pub(crate) fn timers(&self) -> String {
        format!("{}timers", self.prefix)
    }

    /// The lock that lets one worker at a time reap the tasks of expired workers.
    pub(crate) fn reaper(&self) -> String {
        format!("{}reaper", self.prefix)
    }

    /// The sessions in which `worker_id` has run tasks.
    pub(crate) fn worker_sessions(&self, worker_id: &str) -> String {
        format!("{}worker:{worker_id}:sessions", self.prefix)
    }
}

/// Calls the function `name` with one key, loading the library first if the server does not have it.
pub(crate) async fn call<T: FromRedisValue>(
    connection: &mut ConnectionManager,
    name: &str,
    key: &str,
    args: &[&str],
) -> Result<T, redis::RedisError> {
    let mut command = redis::cmd("FCALL");
    command.arg(name).arg(1).arg(key).arg(args);
    match command.query_async(connection).await {
        Err(error) if is_missing_function(&error) => {
            load(connection).await?;
            command.query_async(connection).await
        }
        outcome => outcome,
    }
}

/// Loads the library, replacing an older version of it.
pub(crate) async fn load(connection: &mut ConnectionManager) -> Result<(), redis::RedisError> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(FUNCTIONS)
        .query_async::<String>(connection)
        .await
        .map(drop)
}

fn is_missing_function(error: &redis::RedisError) -> bool {
    error.code() == Some("ERR")
        && error
            .detail()
            .is_some_and(|detail| detail.contains("Function not found"))
}

/// The fields of one task as the functions store them.
pub(crate) struct TaskFields(HashMap<String, String>);

impl TaskFields {
    /// From the flat list of names and values that `HGETALL` gives; `None` for an empty one (no such task).
    pub(crate) fn from_flat(values: Vec<String>) -> Option<TaskFields> {
        if values.is_empty() {
            return None;
        }
        let mut fields = HashMap::with_capacity(values.len() / 2);
        let mut values = values.into_iter();
        while let (Some(name), Some(value)) = (values.next(), values.next()) {
            fields.insert(name, value);
        }
        Some(TaskFields(fields))
    }

    fn text(&self, name: &str) -> Option<Arc<str>> {
        self.0.get(name).map(|value| Arc::from(value.as_str()))
    }

    fn time(&self, name: &str) -> Option<SystemTime> {
        let seconds: f64 = self.0.get(name)?.parse().ok()?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(seconds).ok()?)
    }

    fn flag(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(|value| value == "1")
    }

    /// The snapshot these fields describe.
    pub(crate) fn snapshot(
        &self,
        session_id: &Arc<str>,
    ) -> Result<SubagentTaskSnapshot<String>, RedisTrackerError> {
        let protocol = |what: &str| RedisTrackerError::Protocol(Arc::from(what));
        let task_id = self
            .text("id")
            .ok_or_else(|| protocol("a task without its id"))?;
        let status = self
            .0
            .get("status")
            .and_then(|status| SubagentStatus::from_name(status))
            .ok_or_else(|| protocol("a task without a known status"))?;
        let started_at = self
            .time("started_at")
            .ok_or_else(|| protocol("a task without its start time"))?;
        let mut snapshot =
            SubagentTaskSnapshot::new(task_id, session_id.clone(), status, started_at);
        snapshot.parent_id = self.text("parent");
        snapshot.agent = self.text("agent");
        snapshot.description = self.text("description");
        snapshot.metadata = self.0.get("metadata").cloned();
        snapshot.finished = self.flag("fin");
        snapshot.queued_at = self.flag("reserved").then_some(started_at);
        snapshot.claimed_at = self.time("claimed_at");
        snapshot.cancelled_at = self.time("cancelled_at");
        snapshot.ended_at = self.time("ended_at");
        snapshot.cancel_reason = self.text("reason");
        snapshot.cancel_origin = self.text("origin");
        snapshot.cancel_cause = self
            .0
            .get("cause")
            .and_then(|cause| CancelCause::from_name(cause));
        snapshot.deadline = self.time("deadline");
        snapshot.detached = self.flag("detached");
        snapshot.escalated = self.flag("escalated");
        snapshot.progress = self.text("progress");
        snapshot.progress_count = self
            .0
            .get("progress_count")
            .and_then(|count| count.parse().ok())
            .unwrap_or_default();
        snapshot.result = self.0.get("result").cloned();
        snapshot.error = self.text("error");
        snapshot.worker = self.text("worker");
        Ok(snapshot)
    }
}
