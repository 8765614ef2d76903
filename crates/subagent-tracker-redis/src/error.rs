//! Errors of the Redis store.

use std::borrow::Cow;
use std::sync::Arc;

use subagent_tracker::TrackerError;

/// Why a call on a Redis session failed. A call that returns an error has changed nothing in Redis, except
/// [`Unavailable`](Self::Unavailable), after which the outcome is unknown until the next reconcile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisTrackerError {
    /// The call broke a rule of the contract, exactly as the in-memory tracker would have refused it.
    #[error(transparent)]
    Tracker(#[from] TrackerError),
    /// Redis could not be reached, or did not answer within the registry's timeout.
    #[error("the Redis registry is unavailable: {source}")]
    Unavailable {
        /// What the client reported.
        #[source]
        source: redis::RedisError,
    },
    /// A setting that cannot work (one that [`RedisOptions::check`](crate::RedisOptions::check) refuses, a URL
    /// that does not parse or names no database, a password the server refuses, a key prefix that other data
    /// uses, another build of the server functions), and why. Retrying cannot help.
    #[error("{0}")]
    InvalidOption(Cow<'static, str>),
    /// The server answered something this crate did not send for (a different version of its functions).
    #[error("unexpected answer from Redis: {0}")]
    Protocol(Arc<str>),
}

impl From<redis::RedisError> for RedisTrackerError {
    fn from(source: redis::RedisError) -> Self {
        RedisTrackerError::Unavailable { source }
    }
}
