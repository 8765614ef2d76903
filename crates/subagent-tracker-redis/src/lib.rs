//! One subagent-tracker session across processes and machines, kept in Redis.
//!
//! [`RedisRegistry`] is a registry of sessions over one Redis server; every process that connects to it sees
//! the same sessions. The rules of the in-memory tracker hold across processes: each transition (start,
//! reserve, claim, end, cancel with its cascade, session cancel and close) is a function that runs atomically
//! on the server (one Lua file per function, in `lua/`), so the first transition wins wherever it was made. Each process keeps an
//! in-memory mirror of the runs it executes, so a runner's token is a local read; cancels reach it by a push
//! on the worker's channel and, in any case, by a reconcile on a timer.
//!

#![forbid(unsafe_code)]

mod coalesce;
mod connection;
mod error;
mod events;
mod handle;
mod library;
mod maps;
mod mirrors;
mod options;
mod registry;
mod scheme_check;
mod session;
mod session_state;
mod shared_handle;
mod store;
mod watched_tokens;
mod worker;

pub use error::RedisTrackerError;
pub use events::RedisEventSubscription;
pub use handle::RedisTaskHandle;
pub use options::{
    RedisOptions, DEFAULT_KEY_PREFIX, DEFAULT_LEASE, DEFAULT_RECONCILE_INTERVAL,
    DEFAULT_SESSION_TTL, DEFAULT_TIMEOUT, MIN_INTERVAL, MIN_LEASE,
};
pub use registry::{RedisRegistry, EVENT_BUFFER_REFUSED};
pub use session::{RedisSession, MAX_PAGE, OPEN_BATCH_STEP};
pub use shared_handle::SharedTaskHandle;
pub use worker::lease::{LEASE_LOST_REASON, WORKER_LOST_ERROR};
pub use worker::listener::{ORPHANED_RUN_ERROR, SESSION_LOST_REASON};
