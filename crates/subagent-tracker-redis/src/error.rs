//! Errors of the Redis store, and which of them a retry may cure.

use std::borrow::Cow;
use std::sync::Arc;

use subagent_tracker::TrackerError;

/// Why a call on a Redis session failed. A call that returns an error has changed nothing in Redis, except
/// [`Unavailable`](Self::Unavailable), after which the outcome is unknown until the next reconcile, and
/// [`NotReplicated`](Self::NotReplicated), whose cancel took effect.
///
/// Each error the client or the server gives falls in one class (see `From<redis::RedisError>`):
///
/// | what happened | variant | retry? |
/// |---|---|---|
/// | connection refused, lost or timed out; `OOM`, `READONLY`, `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `NOREPLICAS`, `MOVED`, `ASK`, `UNBLOCKED`, `MISCONF`, `BUSY` | [`Unavailable`](Self::Unavailable) | yes |
/// | a password wanted or refused (`NOAUTH`, `WRONGPASS`), a command the user may not run (`NOPERM`), a server without functions (before Redis 7) | [`InvalidOption`](Self::InvalidOption) | no: fix the set-up |
/// | a rule of the contract (a function's refusal: `DUPLICATE`, `CLOSED`, ...) | [`Tracker`](Self::Tracker) | no |
/// | a session whose keys are gone though nobody closed it (evicted) | [`SessionLost`](Self::SessionLost) | no |
/// | a cancel fewer replicas confirmed than `wait_for_replicas` asks | [`NotReplicated`](Self::NotReplicated) | no: it took effect |
/// | any other error reply, or an answer of another shape | [`ServerError`](Self::ServerError), [`Protocol`](Self::Protocol) | no |
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisTrackerError {
    /// The call broke a rule of the contract, exactly as the in-memory tracker would have refused it.
    #[error(transparent)]
    Tracker(#[from] TrackerError),
    /// Redis could not be reached, did not answer within the registry's timeout, or said to try again later.
    #[error("the Redis registry is unavailable: {source}")]
    Unavailable {
        /// What the client reported.
        #[source]
        source: redis::RedisError,
    },
    /// A setting that cannot work (one that [`RedisOptions::check`](crate::RedisOptions::check) refuses, a URL
    /// that does not parse or names no database, a password the server refuses, a key prefix that other data
    /// uses, another build of the server functions, a server or user that cannot run them), and why. Retrying
    /// cannot help.
    #[error("{0}")]
    InvalidOption(Cow<'static, str>),
    /// The session's keys are gone from Redis though nobody closed it: evicted under a `maxmemory-policy`
    /// that evicts any key (see [`RedisOptions::eviction_allowed`](crate::RedisOptions::eviction_allowed)), or
    /// lost otherwise while the registry still listed the session. Nothing of it can be read or changed any
    /// more; its runners' tokens fire with [`SESSION_LOST_REASON`](crate::SESSION_LOST_REASON). Retrying cannot
    /// help.
    #[error(
        "session {session_id:?} is lost: its keys are gone from Redis though nobody closed it (evicted under a \
         maxmemory-policy that evicts any key, or lost with writes Redis did not keep)"
    )]
    SessionLost {
        /// The session's id.
        session_id: Arc<str>,
    },
    /// The server answered something this crate did not send for: an error it does not know, or a reply of a
    /// different version of its functions. Retrying cannot help.
    #[error("unexpected answer from Redis: {0}")]
    Protocol(Arc<str>),
    /// With [`RedisOptions::wait_for_replicas`](crate::RedisOptions::wait_for_replicas): the cancel took effect
    /// on the session's primary, but fewer replicas than asked confirmed it in time, so a failover now could lose
    /// it. A cancel of the task called again returns false (it is cancelled already); read the task once the
    /// servers are healthy to know whether the cancel survived.
    #[error(
        "the cancel took effect on the session's primary, but {acknowledged} of the {wanted} replicas asked for \
         confirmed it in time: a failover now could lose it"
    )]
    NotReplicated {
        /// The replicas asked for.
        wanted: usize,
        /// The replicas that confirmed the cancel.
        acknowledged: usize,
    },
    /// An error reply this crate does not expect (the functions' own refusals become
    /// [`Tracker`](Self::Tracker) errors): a protocol error, like [`Protocol`](Self::Protocol). Retrying cannot
    /// help.
    #[error("Redis answered with an error this crate does not expect: {source}")]
    ServerError {
        /// The server's reply.
        #[source]
        source: redis::RedisError,
    },
}

/// Server error codes of a state that passes: short of memory, loading, a replica or a primary cut off from its
/// replicas (or from enough of them to write), a slot moving or the cluster reconfiguring (a cluster client that
/// hears `MOVED` or `ASK` after a failover has a stale map of the slots, which it refreshes), a blocked read
/// released by a failover, a snapshot failing to write, or a script running too long.
const RETRYABLE_CODES: &[&str] = &[
    "OOM",
    "READONLY",
    "LOADING",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "NOREPLICAS",
    "MOVED",
    "ASK",
    "UNBLOCKED",
    "MISCONF",
    "BUSY",
];

impl From<redis::RedisError> for RedisTrackerError {
    fn from(source: redis::RedisError) -> Self {
        let code = source.code();
        if code.is_some_and(|code| RETRYABLE_CODES.contains(&code))
            || is_slot_in_motion(&source)
            || source.is_io_error()
            || source.is_timeout()
            || source.is_connection_dropped()
            || source.is_connection_refusal()
            || source.kind() == redis::ErrorKind::ClusterConnectionNotFound
        {
            return RedisTrackerError::Unavailable { source };
        }
        if let Some(problem) = set_up_problem(&source) {
            return RedisTrackerError::InvalidOption(problem.into());
        }
        if code.is_some() {
            return RedisTrackerError::ServerError { source };
        }
        RedisTrackerError::Protocol(Arc::from(source.to_string()))
    }
}

/// A script stopped because a key it named at run time is not on this node (its slot is moving, or has just
/// moved), or because the cluster is down: the same call succeeds once the cluster is stable. The functions
/// declare their slot's guard, so that the cluster refuses them before they run in such a state; this covers
/// whatever still reaches a script.
fn is_slot_in_motion(error: &redis::RedisError) -> bool {
    let text = error.to_string();
    [
        "Script attempted to access a non local key",
        "Script attempted to execute a command while the cluster is down",
        "Script attempted to execute a write command while the cluster is down",
    ]
    .iter()
    .any(|message| text.contains(message))
}

/// What to fix when the server refuses a call for its set-up rather than for the call.
fn set_up_problem(error: &redis::RedisError) -> Option<String> {
    if error.kind() == redis::ErrorKind::AuthenticationFailed {
        return Some(format!(
            "the Redis server refused to authenticate ({error}): give the password in the URL, as \
             redis://:password@host:port/db or redis://user:password@host:port/db"
        ));
    }
    let detail = error.detail().unwrap_or_default();
    match error.code()? {
        "NOAUTH" | "WRONGPASS" => Some(format!(
            "the Redis server refused to authenticate ({error}): give the password in the URL, as \
             redis://:password@host:port/db or redis://user:password@host:port/db"
        )),
        "NOPERM" => Some(format!(
            "the Redis user may not run what the registry needs ({error}): grant it FUNCTION, FCALL and the \
             commands of its functions on the registry's keys"
        )),
        "ERR"
            if detail.contains("unknown command")
                && (detail.contains("FUNCTION") || detail.contains("FCALL")) =>
        {
            Some(format!(
                "the Redis server has no functions ({error}): the registry needs Redis 7.0 or later"
            ))
        }
        _ => None,
    }
}

/// The URL as the user wrote it, for a message, but never its password.
pub(crate) fn shown_url(url: &str) -> String {
    redis::parse_redis_url(url).map_or_else(
        || {
            if url.contains('@') {
                "the URL".to_owned()
            } else {
                format!("{url:?}")
            }
        },
        |mut parsed| {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            format!("{parsed}")
        },
    )
}

/// The refusal of a `cluster` setting that the node contradicts. A one-server client on a cluster node would
/// retry its `MOVED` answers until the timeout, and a cluster client on a plain server cannot start: neither
/// is a state that a retry can fix.
pub(crate) fn cluster_mismatch(url: &str, is_cluster_node: bool) -> RedisTrackerError {
    let shown = shown_url(url);
    let problem = if is_cluster_node {
        format!(
            "the Redis at {shown} is a node of a Redis Cluster, but the cluster setting says it is one server: \
             set it to true, or leave it unset so that the registry asks the node"
        )
    } else {
        format!(
            "the Redis at {shown} is not a node of a Redis Cluster, but the cluster setting says it is: set it \
             to false, or leave it unset so that the registry asks the node"
        )
    };
    RedisTrackerError::InvalidOption(problem.into())
}

/// The error for a URL or server that cannot work as configured, naming the URL; otherwise the error's own class
/// (see [`RedisTrackerError`]).
pub(crate) fn configuration_error(url: &str, error: &redis::RedisError) -> RedisTrackerError {
    let shown = shown_url(url);
    let problem = if error.kind() == redis::ErrorKind::InvalidClientConfig {
        // redis-rs's own words add something only when it names what is wrong (a port, a database): its
        // generic "Redis URL did not parse - InvalidClientConfig" repeats this sentence in its own jargon.
        let detail = error
            .detail()
            .map_or_else(String::new, |detail| format!(" ({detail})"));
        format!(
            "{shown} is not a Redis URL{detail}: expected redis://[[user]:password@]host[:port][/db], \
             rediss://... or unix:///path/to/socket"
        )
    } else if error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
        || error.detail().is_some_and(|detail| {
            detail.contains("invalid password") || detail.contains("invalid username-password")
        })
    {
        format!(
            "the Redis server at {shown} refused to authenticate ({error}): give the password in the URL, \
             as redis://:password@host:port/db or redis://user:password@host:port/db"
        )
    } else if is_untrusted_certificate(error) {
        format!(
            "the Redis server at {shown} presented a TLS certificate that did not verify ({error}): trust the \
             authority that signed it (set SSL_CERT_FILE to a bundle that holds it), and name the server as \
             its certificate does"
        )
    } else if error.kind() == redis::ErrorKind::Parse {
        // The parser's own words quote the bytes it met, over several lines: a sentence is enough.
        format!(
            "the server at {shown} does not speak Redis's protocol: its answer did not parse as a Redis \
             reply. Check the host and the port"
        )
    } else if error
        .detail()
        .is_some_and(|detail| detail.contains("DB index is out of range"))
    {
        format!(
            "the Redis server at {shown} has no such database ({error}): choose a database it has"
        )
    } else {
        return RedisTrackerError::from(error.clone());
    };
    RedisTrackerError::InvalidOption(problem.into())
}

/// Whether the TLS handshake failed on the server's certificate.
fn is_untrusted_certificate(error: &redis::RedisError) -> bool {
    matches!(
        tls_error(error),
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

/// The rustls error behind `cause`: redis-rs keeps it in a shared I/O error.
pub(crate) fn tls_error<'a>(
    cause: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    if let Some(shared) = cause.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
        return tls_error(&**shared);
    }
    if let Some(inner) = cause
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        return tls_error(inner);
    }
    cause.source().and_then(tls_error)
}

pub(crate) fn timeout_error() -> RedisTrackerError {
    RedisTrackerError::Unavailable {
        source: redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "Redis did not answer within the registry's timeout",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, detail: &str) -> RedisTrackerError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned())).into()
    }

    #[test]
    fn a_state_that_passes_is_unavailable() {
        for code in RETRYABLE_CODES {
            assert!(
                matches!(
                    server(code, "for now"),
                    RedisTrackerError::Unavailable { .. }
                ),
                "{code}"
            );
        }
        for kind in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut,
        ] {
            let error: RedisTrackerError =
                redis::RedisError::from(std::io::Error::new(kind, "gone")).into();
            assert!(
                matches!(error, RedisTrackerError::Unavailable { .. }),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_script_stopped_by_a_slot_in_motion_is_unavailable() {
        for detail in [
            "Script attempted to access a non local key in a cluster node script: stv2_end, on @user_function:324.",
            "Script attempted to execute a command while the cluster is down",
        ] {
            assert!(
                matches!(server("ERR", detail), RedisTrackerError::Unavailable { .. }),
                "{detail}"
            );
        }
    }

    #[test]
    fn a_set_up_that_cannot_work_says_what_to_fix() {
        for (code, detail, says) in [
            ("NOAUTH", "Authentication required.", "password"),
            ("WRONGPASS", "invalid username-password pair", "password"),
            (
                "NOPERM",
                "User u has no permissions to run the 'fcall' command",
                "grant",
            ),
            (
                "ERR",
                "unknown command 'FCALL', with args beginning with:",
                "Redis 7.0",
            ),
        ] {
            match server(code, detail) {
                RedisTrackerError::InvalidOption(message) => {
                    assert!(message.contains(says), "{code}: {message}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_answer_this_crate_does_not_expect_is_never_retryable() {
        assert!(matches!(
            server(
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value"
            ),
            RedisTrackerError::ServerError { .. }
        ));
        assert!(matches!(
            server("ERR", "something new"),
            RedisTrackerError::ServerError { .. }
        ));
        let unparsed: RedisTrackerError =
            redis::RedisError::from((redis::ErrorKind::Parse, "not RESP")).into();
        assert!(matches!(unparsed, RedisTrackerError::Protocol(_)));
    }
}
