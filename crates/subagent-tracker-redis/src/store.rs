//! The server side: the key names of a session, and calls of the server functions (`lua/`, assembled by `library`), which hold every
//! transition rule of the Redis store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::FromRedisValue;
use subagent_tracker::{
    epoch_seconds, CancelCause, ProgressEntry, SubagentStatus, SubagentTaskSnapshot,
};

use crate::connection::Connection;
use crate::library::{CODE, LIBRARY};
use crate::RedisTrackerError;

/// The version that the library's name, its function names and the key layout carry together: processes of
/// different versions share a server without running each other's rules or reading each other's keys. Written
/// here alone: the library's name, its functions' prefix and every key's prefix are made from it.
macro_rules! layout_version {
    () => {
        "v2"
    };
}
pub(crate) use layout_version;

/// [`layout_version!`] as a value.
pub(crate) const LAYOUT_VERSION: &str = layout_version!();

/// The prefix of the library's functions' names (`stv2_open`): the layout version's.
pub(crate) const FUNCTION_PREFIX: &str = concat!("st", layout_version!(), "_");

/// The name of a session's hash, which the registry hands the functions: the session's other keys derive from it.
const SESSION_HASH: &str = "session";
/// The name of a session's stream of events, which the registry also reads.
const SESSION_EVENTS: &str = "events";

/// The names of a session's keys after `<prefix>{s:<id>}:`, by the name the server functions give each: they
/// derive every key from the session's hash key (`base .. KEY.live` in `lua/`), and the library writes this
/// table into the Lua, so that each name is written once. A name ending in `:` is followed by a task's id, a run
/// or a walk's id.
pub(crate) const SESSION_KEYS: [(&str, &str); 13] = [
    ("session", SESSION_HASH),
    ("events", SESSION_EVENTS),
    ("live", "live"),
    ("finished", "finished"),
    ("timers", "timers"),
    ("linked", "linked"),
    ("walks", "walks"),
    ("early", "early"),
    ("early_order", "early_order"),
    ("task", "t:"),
    ("children", "c:"),
    ("walk", "w:"),
    ("walk_frontier", "wf:"),
];

/// Where a registry's keys live, and the names of one session's keys.
///
/// Ids are user input, so none may form another key: a session's id sits in its keys' hash tag, percent-encoded
/// (`%`, `{` and `}`), so that the tag ends exactly where the id does; a task's id comes last, after a fixed name
/// that no other key of the session starts with.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// `<key_prefix>v2:`, in front of every key and channel.
    prefix: Arc<str>,
}

impl Keys {
    pub(crate) fn new(key_prefix: &str) -> Keys {
        Keys {
            prefix: Arc::from(format!("{key_prefix}{LAYOUT_VERSION}:")),
        }
    }

    /// The hash of session `session_id`; the functions derive the session's other keys from it. The hash tag
    /// keeps all of them in one cluster slot.
    pub(crate) fn session(&self, session_id: &str) -> String {
        format!("{}{{s:{}}}:{SESSION_HASH}", self.prefix, encode(session_id))
    }

    /// The stream of session `session_id`'s lifecycle events.
    pub(crate) fn events(&self, session_id: &str) -> String {
        format!(
            "{}{{s:{}}}:{SESSION_EVENTS}",
            self.prefix,
            encode(session_id)
        )
    }

    /// The channel on which the functions publish the cancels of the runs of worker process `process`.
    pub(crate) fn worker_channel(&self, process: &str) -> String {
        format!("{}worker:{process}", self.prefix)
    }

    /// The index of sessions, by the last change seen of each (a hint: each session's own hash has the truth).
    pub(crate) fn sessions(&self) -> String {
        format!("{}{{registry}}:sessions", self.prefix)
    }

    /// The sorted set of worker processes' leases, by expiry on the server's clock.
    pub(crate) fn workers(&self) -> String {
        format!("{}{{registry}}:workers", self.prefix)
    }

    /// The sorted set of sessions with timers (deadlines, claim timeouts), by when the next one falls due.
    pub(crate) fn timers(&self) -> String {
        format!("{}{{registry}}:timers", self.prefix)
    }

    /// The lock that lets one worker at a time reap the tasks of expired workers and sweep idle sessions.
    pub(crate) fn reaper(&self) -> String {
        format!("{}{{registry}}:reaper", self.prefix)
    }

    /// The sessions in which worker process `process` runs tasks, by when it announced each (server time): what a
    /// reaper walks when its lease expires. In the registry's slot, so that its lease and this go together.
    pub(crate) fn announced(&self, process: &str) -> String {
        format!("{}{{registry}}:w:{process}", self.prefix)
    }

    /// How often each session's timer entry changed (`stv2_schedule`), so that a retime that read the session
    /// before a change leaves its entry alone.
    pub(crate) fn timer_changes(&self) -> String {
        format!("{}{{registry}}:timer-changes", self.prefix)
    }

    /// Every registry-wide key, with the type it holds, for the check that a prefix is not another's.
    pub(crate) fn registry_keys(&self) -> [(String, &'static str); 6] {
        [
            (self.workers(), "zset"),
            (self.timers(), "zset"),
            (self.timer_changes(), "hash"),
            (self.sessions(), "zset"),
            (self.lost_sessions(), "zset"),
            (self.reaper(), "string"),
        ]
    }

    /// The sessions whose keys the sweep found gone though nobody had closed them (evicted), by when, so that
    /// their objects say they are lost, not closed, after their last key has gone.
    pub(crate) fn lost_sessions(&self) -> String {
        format!("{}{{registry}}:lost", self.prefix)
    }
}

/// A session id as it stands in a key: `%`, `{` and `}` percent-encoded, so no id can end the hash tag early.
fn encode(session_id: &str) -> std::borrow::Cow<'_, str> {
    if !session_id.contains(['%', '{', '}']) {
        return std::borrow::Cow::Borrowed(session_id);
    }
    let mut encoded = String::with_capacity(session_id.len() + 8);
    for character in session_id.chars() {
        match character {
            '%' => encoded.push_str("%25"),
            '{' => encoded.push_str("%7B"),
            '}' => encoded.push_str("%7D"),
            other => encoded.push(other),
        }
    }
    std::borrow::Cow::Owned(encoded)
}

/// The session id that `encode` made `encoded`; `None` for text it cannot have made.
pub(crate) fn decode_session_id(encoded: &str) -> Option<String> {
    let mut decoded = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(index) = rest.find('%') {
        decoded.push_str(&rest[..index]);
        let escape = rest.get(index..index + 3)?;
        decoded.push(match escape {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        });
        rest = &rest[index + 3..];
    }
    decoded.push_str(rest);
    Some(decoded)
}

/// Calls the library's function `name` (without its version prefix) on `keys`, loading the library first if the
/// server does not have it.
pub(crate) async fn call<T: FromRedisValue>(
    connection: &mut Connection,
    name: &str,
    keys: &[&str],
    args: &[&str],
) -> Result<T, RedisTrackerError> {
    let command = function_call(name, keys, args);
    match command.query_async(connection).await {
        Err(error) if is_missing_function(&error) => {
            load(connection).await?;
            Ok(command.query_async(connection).await?)
        }
        outcome => Ok(outcome?),
    }
}

/// The replies of one `stv2_end` call.
pub(crate) struct EndReplies {
    /// Per end, 1 when it moved its task, else 0.
    pub(crate) moved: Vec<i64>,
    /// The call left a cascade under way (a task group's rule) for its caller to finish (`finish_walks`).
    pub(crate) walks_left: bool,
    /// What the ends' cascades told the caller's worker process of its own runs ("" for nothing), for it to
    /// apply before the ends return (`Worker::apply_told`).
    pub(crate) told: Vec<u8>,
}

/// Reads the reply of one `stv2_end` call.
pub(crate) fn end_replies(reply: Vec<redis::Value>) -> Result<EndReplies, RedisTrackerError> {
    let mut replies = EndReplies {
        moved: Vec::with_capacity(reply.len()),
        walks_left: false,
        told: Vec::new(),
    };
    let mut values = reply.into_iter();
    while let Some(value) = values.next() {
        match value {
            redis::Value::Int(transitioned) => replies.moved.push(transitioned),
            redis::Value::BulkString(marker) if marker == b"walk" => replies.walks_left = true,
            redis::Value::BulkString(marker) if marker == b"told" => match values.next() {
                Some(redis::Value::BulkString(told)) => replies.told = told,
                _ => return Err(RedisTrackerError::Protocol(Arc::from("stv2_end"))),
            },
            _ => return Err(RedisTrackerError::Protocol(Arc::from("stv2_end"))),
        }
    }
    Ok(replies)
}

/// Takes the steps of every cascade the session's incarnation `incarnation` has under way (contract §3:
/// cascades proceed in steps), as an end that left one does before it returns. Hands `told` what each step told
/// the worker process `caller` of its own runs (see [`EndReplies::told`]) as the step returns.
pub(crate) async fn finish_walks(
    connection: &mut Connection,
    key: &str,
    incarnation: &str,
    caller: &str,
    told: impl Fn(&[u8]),
) -> Result<(), RedisTrackerError> {
    loop {
        let reply: Vec<String> =
            call(connection, "walk", &[key], &[incarnation, "", caller]).await?;
        if let Some(message) = reply.get(2) {
            told(message.as_bytes());
        }
        if reply.first().is_none_or(|done| done == "1") {
            return Ok(());
        }
    }
}

/// Calls the function `name` once per entry of `calls` (its keys and arguments), in one round trip on one
/// server (on a cluster, where the calls may work in different slots, all at once, each to its slot's primary).
/// Each call has its own outcome: one that fails (a key of the wrong type, say) stops none of the others.
///
/// # Errors
/// [`RedisTrackerError::Unavailable`] when the round trip itself failed.
pub(crate) async fn call_each<T: FromRedisValue>(
    connection: &mut Connection,
    name: &str,
    calls: &[(Vec<&str>, Vec<&str>)],
) -> Result<Vec<Result<T, RedisTrackerError>>, RedisTrackerError> {
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    if connection.is_cluster() {
        let each = calls.iter().map(|(keys, args)| {
            let mut connection = connection.clone();
            async move { call(&mut connection, name, keys, args).await }
        });
        let outcomes = futures_util::future::join_all(each).await;
        // As a pipeline that could not be sent: the round failed, not one call.
        if let Some(index) = outcomes
            .iter()
            .position(|outcome| matches!(outcome, Err(RedisTrackerError::Unavailable { .. })))
        {
            return Err(outcomes
                .into_iter()
                .nth(index)
                .and_then(Result::err)
                .unwrap_or_else(|| RedisTrackerError::Protocol(Arc::from("call_each"))));
        }
        return Ok(outcomes);
    }
    let mut pipeline = redis::pipe();
    pipeline.ignore_errors();
    for (keys, args) in calls {
        pipeline.add_command(function_call(name, keys, args));
    }
    let mut outcomes: Vec<redis::RedisResult<T>> = pipeline.query_async(connection).await?;
    if outcomes
        .iter()
        .any(|outcome| outcome.as_ref().is_err_and(is_missing_function))
    {
        load(connection).await?;
        outcomes = pipeline.query_async(connection).await?;
    }
    Ok(outcomes
        .into_iter()
        .map(|outcome| outcome.map_err(RedisTrackerError::from))
        .collect())
}

/// Calls the function `name`, then `WAIT replicas` for up to `wait`, in one pipeline: the wait counts this very
/// connection's writes, and no reconnect can come between the two (a connection that breaks fails both). Gives
/// the function's answer and how many replicas acknowledged it.
pub(crate) async fn call_and_wait<T: FromRedisValue>(
    connection: &mut Connection,
    name: &str,
    keys: &[&str],
    args: &[&str],
    replicas: usize,
    wait: Duration,
) -> Result<(T, usize), RedisTrackerError> {
    let mut pipeline = redis::pipe();
    pipeline.add_command(function_call(name, keys, args));
    pipeline
        .cmd("WAIT")
        .arg(replicas)
        .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1));
    match pipeline.query_async(connection).await {
        Err(error) if is_missing_function(&error) => {
            load(connection).await?;
            Ok(pipeline.query_async(connection).await?)
        }
        outcome => Ok(outcome?),
    }
}

/// A call of the function `name`. Beyond the keys its caller names, it declares its slot's guard: a key that is
/// never written. While the slot moves between cluster nodes, a call that declares a key the node lacks is
/// refused before it runs (`ASK`, then `TRYAGAIN` on the node the slot moves to), so the guard keeps every
/// function off a slot in migration: none runs on half of a session's keys, or writes part of a transition and
/// then fails on a key that has moved (a task's hash, a children set, named at run time). Outside a migration a
/// missing key changes nothing.
fn function_call(name: &str, keys: &[&str], args: &[&str]) -> redis::Cmd {
    let guard = keys.first().map(|key| slot_guard(key));
    let mut command = redis::cmd("FCALL");
    command
        .arg(format!("{FUNCTION_PREFIX}{name}"))
        .arg(keys.len() + usize::from(guard.is_some()))
        .arg(keys)
        .arg(guard)
        .arg(args);
    command
}

/// The guard of the slot of `key` (see [`function_call`]): the key's prefix through its hash tag, then `guard`.
fn slot_guard(key: &str) -> String {
    let tag_end = key.find('}').map_or(0, |end| end + 1);
    format!("{}:guard", &key[..tag_end])
}

/// Loads the library unless the server has it. A library of this name whose code differs is another build of
/// this version: it is never replaced, since the processes that loaded it run its rules.
///
/// # Errors
/// [`RedisTrackerError::InvalidOption`] for another build of the library; [`RedisTrackerError::Unavailable`].
pub(crate) async fn load(connection: &mut Connection) -> Result<(), RedisTrackerError> {
    let loaded = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(CODE.as_str())
        .query_async::<String>(connection)
        .await;
    match loaded {
        Ok(_) => Ok(()),
        Err(error)
            if error
                .detail()
                .is_some_and(|detail| detail.contains("already exists")) =>
        {
            if loaded_code(connection).await?.as_deref() == Some(CODE.as_str()) {
                Ok(())
            } else {
                Err(RedisTrackerError::InvalidOption(
                    format!(
                        "this Redis has another build of the {LIBRARY} functions loaded, which other processes \
                         run; it is not replaced: deploy one build per version (see the upgrade steps in \
                         docs/across-processes.md), or remove it with FUNCTION DELETE {LIBRARY} once no process \
                         uses it"
                    )
                    .into(),
                ))
            }
        }
        Err(error) => Err(error.into()),
    }
}

/// The code of the library the server has under this version's name, if any.
async fn loaded_code(connection: &mut Connection) -> Result<Option<String>, RedisTrackerError> {
    let listed: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(LIBRARY)
        .arg("WITHCODE")
        .query_async(connection)
        .await?;
    // A list of libraries, each a map (RESP3) or a flat list of names and values (RESP2); the pattern of the
    // name can match other libraries too.
    let libraries: Vec<HashMap<String, redis::Value>> = redis::from_redis_value(listed)
        .map_err(|_| RedisTrackerError::Protocol(Arc::from("FUNCTION LIST")))?;
    for library in libraries {
        let name: Option<String> = library
            .get("library_name")
            .and_then(|name| redis::from_redis_value_ref(name).ok());
        if name.as_deref() == Some(LIBRARY) {
            return Ok(library
                .get("library_code")
                .and_then(|code| redis::from_redis_value_ref(code).ok()));
        }
    }
    Ok(None)
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

    /// The progress log: the fields `pl<number>` in the order of their numbers, each
    /// `<at>:<message's byte length>:<message><data>` (`stv2_progress` writes them). A field that does not read
    /// so is passed over.
    fn progress_log(&self) -> Vec<ProgressEntry<String>> {
        let mut numbered: Vec<(u64, ProgressEntry<String>)> = self
            .0
            .iter()
            .filter_map(|(name, value)| {
                let number = name.strip_prefix("pl")?.parse().ok()?;
                Some((number, progress_entry(value)?))
            })
            .collect();
        numbered.sort_unstable_by_key(|(number, _)| *number);
        numbered.into_iter().map(|(_, entry)| entry).collect()
    }

    /// The run these fields are of.
    pub(crate) fn run(&self) -> Option<String> {
        self.0.get("run").cloned()
    }

    pub(crate) fn task_id(&self) -> Option<String> {
        self.0.get("id").cloned()
    }

    /// Whether the task is pending (the core's rule, `SubagentStatus::is_pending`).
    pub(crate) fn is_pending(&self) -> bool {
        self.0
            .get("status")
            .and_then(|status| subagent_tracker::SubagentStatus::from_name(status))
            .is_some_and(subagent_tracker::SubagentStatus::is_pending)
    }

    /// Whether these are the fields of run `run`.
    pub(crate) fn is_run(&self, run: &str) -> bool {
        self.0.get("run").is_some_and(|stored| stored == run)
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
        snapshot.pause_reason = self.text("pause_reason");
        snapshot.deadline = self.time("deadline");
        snapshot.detached = self.flag("detached");
        snapshot.escalated = self.flag("escalated");
        snapshot.progress = self.text("progress");
        snapshot.progress_count = self
            .0
            .get("progress_count")
            .and_then(|count| count.parse().ok())
            .unwrap_or_default();
        snapshot.progress_log = self.progress_log();
        snapshot.result = self.0.get("result").cloned();
        snapshot.error = self.text("error");
        snapshot.error_type = self.text("error_type");
        snapshot.error_code = self.text("error_code");
        // The process's key: the worker id, a slash and the process's nonce; users see the id.
        snapshot.worker = self.0.get("worker").map(|process| {
            Arc::from(
                process
                    .rsplit_once('/')
                    .map_or(process.as_str(), |(id, _)| id),
            )
        });
        Ok(snapshot)
    }
}

/// The fields of a task's hash that a finished `snapshot` is read back from ([`TaskFields::snapshot`] in
/// reverse), as flat field and value pairs: what `stv2_restore` writes beside the id, the run and `fin`.
pub(crate) fn finished_task_fields(snapshot: &SubagentTaskSnapshot<String>) -> Vec<String> {
    let mut fields: Vec<(&str, String)> = vec![
        ("status", snapshot.status.as_str().to_owned()),
        ("started_at", clock_text(snapshot.started_at)),
    ];
    let texts = [
        ("parent", snapshot.parent_id.as_deref()),
        ("agent", snapshot.agent.as_deref()),
        ("description", snapshot.description.as_deref()),
        ("metadata", snapshot.metadata.as_deref()),
        ("worker", snapshot.worker.as_deref()),
        ("reason", snapshot.cancel_reason.as_deref()),
        ("origin", snapshot.cancel_origin.as_deref()),
        ("cause", snapshot.cancel_cause.map(CancelCause::as_str)),
        ("progress", snapshot.progress.as_deref()),
        ("result", snapshot.result.as_deref()),
        ("error", snapshot.error.as_deref()),
        ("error_type", snapshot.error_type.as_deref()),
        ("error_code", snapshot.error_code.as_deref()),
        ("pause_reason", snapshot.pause_reason.as_deref()),
    ];
    fields.extend(
        texts
            .into_iter()
            .filter_map(|(name, text)| Some((name, text?.to_owned()))),
    );
    let times = [
        ("ended_at", snapshot.ended_at),
        ("claimed_at", snapshot.claimed_at),
        ("cancelled_at", snapshot.cancelled_at),
    ];
    fields.extend(
        times
            .into_iter()
            .filter_map(|(name, time)| Some((name, clock_text(time?)))),
    );
    if let Some(deadline) = snapshot.deadline {
        fields.push(("deadline", format!("{:.3}", epoch_seconds(deadline))));
    }
    for (name, set) in [
        ("detached", snapshot.detached),
        ("reserved", snapshot.queued_at.is_some()),
        ("escalated", snapshot.escalated),
    ] {
        if set {
            fields.push((name, "1".to_owned()));
        }
    }
    if snapshot.progress_count > 0 {
        fields.push(("progress_count", snapshot.progress_count.to_string()));
    }
    let first_logged = snapshot
        .progress_count
        .saturating_sub(snapshot.progress_log.len() as u64)
        + 1;
    let mut log = Vec::with_capacity(snapshot.progress_log.len());
    for (number, entry) in (first_logged..).zip(&snapshot.progress_log) {
        let data = entry.data.as_deref().unwrap_or_default();
        log.push((
            format!("pl{number}"),
            format!(
                "{}:{}:{}{data}",
                clock_text(entry.at),
                entry.message.len(),
                entry.message
            ),
        ));
    }
    fields
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .chain(log)
        .flat_map(|(name, value)| [name, value])
        .collect()
}

/// `time` as the functions' clock writes it: seconds and microseconds since the epoch, `<s>.<6 digits>`.
fn clock_text(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:06}", since.as_secs(), since.subsec_micros())
}

/// One progress report as its field holds it (see [`TaskFields::progress_log`]).
fn progress_entry(field: &str) -> Option<ProgressEntry<String>> {
    let (at, rest) = field.split_once(':')?;
    let (length, rest) = rest.split_once(':')?;
    let length: usize = length.parse().ok()?;
    let message = rest.get(..length)?;
    let data = &rest[length..];
    let seconds: f64 = at.parse().ok()?;
    Some(ProgressEntry {
        at: SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(seconds).ok()?)?,
        message: Arc::from(message),
        data: (!data.is_empty()).then(|| data.to_owned()),
    })
}

/// `time` in milliseconds since the epoch, rounded up.
pub(crate) fn epoch_millis(time: SystemTime) -> u64 {
    // Rounded up, so that a deadline never fires before its instant.
    let millis = (epoch_seconds(time) * 1000.0).ceil();
    if millis.is_finite() && millis > 0.0 {
        // Finite, positive and far below 2^53 for any instant a caller can give (at most `MAX_SECONDS` away).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let millis = millis as u64;
        millis
    } else {
        0
    }
}
