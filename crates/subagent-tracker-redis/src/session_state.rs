//! A session's state as the server functions report it, and what it says about the session's life.

use std::sync::Arc;

use crate::RedisTrackerError;

/// What `stv2_touch` replies while it removes, in steps, the incarnation before the one it makes: the caller
/// calls again.
pub(crate) const REMOVAL_UNDER_WAY: &str = "removing";

/// What `stv2_sweep` replies while it removes a session in steps: the sweep calls again.
pub(crate) const SWEEP_UNDER_WAY: i64 = -3;

/// A session's state as `stv2_session` and `stv2_touch` give it.
pub(crate) struct SessionState {
    /// The incarnation: the session's first run number.
    pub(crate) incarnation: String,
    pub(crate) closed: bool,
    pub(crate) unfinished: u64,
    /// The retention bound the incarnation was made with.
    pub(crate) max_finished_tasks: usize,
}

impl SessionState {
    /// A session is live until it is closed with every task finished: then it has left.
    pub(crate) fn is_live(&self) -> bool {
        !self.closed || self.unfinished != 0
    }
}

/// A session's state from the functions' `{incarnation, closed, unfinished, max_finished}`; `None` for no
/// session.
pub(crate) fn session_state(state: Vec<String>) -> Result<Option<SessionState>, RedisTrackerError> {
    let malformed = || RedisTrackerError::Protocol(Arc::from("a session's state"));
    if state.is_empty() {
        return Ok(None);
    }
    let [incarnation, closed, unfinished, max]: [String; 4] =
        state.try_into().map_err(|_| malformed())?;
    Ok(Some(SessionState {
        incarnation,
        closed: closed == "1",
        unfinished: unfinished.parse().map_err(|_| malformed())?,
        max_finished_tasks: max.parse().map_err(|_| malformed())?,
    }))
}
