//! The registry of sessions kept in Redis: connecting, and finding or making sessions. Each registry is a
//! worker (see `worker`), which keeps the tokens of this process's runners in step with Redis.

use std::sync::Arc;

use subagent_tracker::{generate_id, validate_task_id, TrackerConfig, DEFAULT_EVENT_BUFFER};

use crate::session_state::{session_state, REMOVAL_UNDER_WAY};
use crate::store;
use crate::worker::{Worker, BATCH};
use crate::{RedisOptions, RedisSession, RedisTrackerError};

/// Sessions kept in Redis, shared by every process that connects to the same server with the same prefix.
///
/// Each registry is a worker: a process with an id (shown in snapshots, and shared by several processes if they
/// are given one) and a lease of its own. The tasks it starts or claims are its runs, and the cancels of those
/// runs reach its tokens wherever the cancel was made. Cheap to clone; the worker stops when the last clone is
/// dropped.
#[derive(Clone)]
pub struct RedisRegistry {
    worker: Arc<Worker>,
}

impl RedisRegistry {
    /// Connects to the Redis at `url` (`redis://127.0.0.1:6379/0`), loads the server-side functions, and starts
    /// the worker: its notification listener and its reconcile timer, on the current tokio runtime.
    ///
    /// # Errors
    /// [`RedisTrackerError::InvalidOption`] for what retrying cannot fix: settings that [`RedisOptions::check`]
    /// refuses (before anything connects), a URL that does not parse, a database the server does not have, a
    /// password it refuses or wants, a key prefix used by other data, another build of the server functions;
    /// [`RedisTrackerError::Unavailable`] when the server cannot be reached within the timeout.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, RedisTrackerError> {
        Ok(RedisRegistry {
            worker: Worker::connect(url, options).await?,
        })
    }

    /// This process's worker id.
    #[must_use]
    pub fn worker_id(&self) -> &str {
        &self.worker.id
    }

    /// How many sessions this process keeps anything for now (mirrors of its runs' tokens, or business with
    /// Redis): follows what it runs, not every session it ever touched.
    #[must_use]
    pub fn sessions_in_use(&self) -> usize {
        self.worker
            .mirrors
            .len()
            .max(self.worker.sessions_with_business())
    }

    /// The session `session_id`, created with `config` if no process has made it (an existing session keeps
    /// its own bound). `None` creates one with a generated id. A closed session whose tasks are all finished
    /// has left: its id names a new one.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid id; [`RedisTrackerError::Unavailable`].
    pub async fn session(
        &self,
        session_id: Option<&str>,
        config: TrackerConfig,
    ) -> Result<RedisSession, RedisTrackerError> {
        let session_id: Arc<str> = match session_id {
            Some(session_id) => {
                validate_task_id("session_id", session_id)?;
                Arc::from(session_id)
            }
            None => Arc::from(generate_id()),
        };
        if config.event_buffer != DEFAULT_EVENT_BUFFER {
            return Err(RedisTrackerError::InvalidOption(
                EVENT_BUFFER_REFUSED.into(),
            ));
        }
        let key = self.worker.keys.session(&session_id);
        let max = config.max_finished_tasks.to_string();
        // In microseconds, the precision of the server's clock and of the times it records.
        let max_age = config
            .max_finished_age
            .map(|age| age.as_micros().to_string())
            .unwrap_or_default();
        let early_ttl = config.early_cancel_ttl.as_micros().to_string();
        let log_size = config.progress_log_size.to_string();
        // A closed session whose tasks have all finished is removed before its id names a new incarnation, in
        // calls of a bounded number of its tasks each: `stv2_touch` says "removing" until the last.
        let state = loop {
            let state: Vec<String> = store::call(
                &mut self.worker.connection.clone(),
                "touch",
                &[&key],
                &[&max, &max_age, &early_ttl, &log_size],
            )
            .await?;
            if state != [REMOVAL_UNDER_WAY] {
                break state;
            }
        };
        let state = session_state(state)?
            .ok_or_else(|| RedisTrackerError::Protocol(Arc::from("stv2_touch")))?;
        self.worker.index_session(&session_id).await?;
        Ok(RedisSession::new(
            self.worker.clone(),
            session_id,
            key,
            &state,
        ))
    }

    /// The session `session_id` if some process made it and it has not left (a closed session leaves once
    /// its tasks are finished); never creates one.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid id; [`RedisTrackerError::Unavailable`].
    pub async fn get_session(
        &self,
        session_id: &str,
    ) -> Result<Option<RedisSession>, RedisTrackerError> {
        validate_task_id("session_id", session_id)?;
        let key = self.worker.keys.session(session_id);
        let state: Vec<String> =
            store::call(&mut self.worker.connection.clone(), "session", &[&key], &[]).await?;
        Ok(match session_state(state)? {
            Some(state) if state.is_live() => Some(RedisSession::new(
                self.worker.clone(),
                Arc::from(session_id),
                key,
                &state,
            )),
            _ => None,
        })
    }

    /// The ids of the live sessions, from the registry's index of sessions.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn sessions(&self) -> Result<Vec<String>, RedisTrackerError> {
        let mut connection = self.worker.connection.clone();
        let indexed: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.worker.keys.sessions())
            .arg(0)
            .arg(-1)
            .query_async(&mut connection)
            .await?;
        let mut live = Vec::new();
        for chunk in indexed.chunks(BATCH) {
            let keys: Vec<String> = chunk
                .iter()
                .map(|session_id| self.worker.keys.session(session_id))
                .collect();
            let calls: Vec<_> = keys.iter().map(|key| (vec![&**key], vec![])).collect();
            let states: Vec<Result<Vec<String>, _>> =
                store::call_each(&mut connection, "session", &calls).await?;
            for (session_id, state) in chunk.iter().zip(states) {
                if session_state(state?)?.is_some_and(|state| state.is_live()) {
                    live.push(session_id.clone());
                }
            }
        }
        live.sort_unstable();
        Ok(live)
    }
}

/// Why `RedisRegistry::session` refuses an `event_buffer` other than the default.
pub const EVENT_BUFFER_REFUSED: &str = "event_buffer does not apply to a Redis session: its events wait in \
     the session's stream in Redis (about the last 10,000), not in a buffer per subscriber; leave it unset";
