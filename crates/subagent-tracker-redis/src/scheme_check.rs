//! A URL whose scheme does not match its server: `rediss://` to a plain server, or `redis://` to a TLS port.
//!
//! Neither says so by itself. A plain server never answers a TLS handshake (it waits for the end of a line
//! that never comes), so `rediss://` looks like a server that does not answer in time; a TLS port closes a
//! plain connection at once, so `redis://` looks like a server that went away. After such a failure, one plain
//! `PING` (for `rediss://`) or one TLS handshake (for `redis://`), on a connection of its own, tells a mismatch
//! from a server that is down or slow: only a server of the other kind answers it.

use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{shown_url, tls_error};
use crate::RedisTrackerError;

/// The longest the check may take: it only runs after a failure, and any server answers it in far less.
const CHECK_BOUND: Duration = Duration::from_secs(1);

/// The error for a URL whose scheme does not match the server at its address, if it does not; `None` if the
/// server does not answer the other kind either (it is down, slow, or something else).
pub(crate) async fn scheme_mismatch(url: &str, timeout: Duration) -> Option<RedisTrackerError> {
    let info = url.into_connection_info().ok()?;
    let bound = timeout.min(CHECK_BOUND);
    let shown = shown_url(url);
    let problem = match info.addr() {
        ConnectionAddr::TcpTls { host, port, .. }
            if answers_plain_ping(host, *port, bound).await =>
        {
            format!(
                "the server at {shown} does not speak TLS: it answered a plain PING but not a TLS handshake. \
                 Use redis:// for it, or the port where it takes TLS"
            )
        }
        ConnectionAddr::Tcp(host, port) if takes_tls_handshake(host, *port, bound).await => {
            format!(
                "the server at {shown} speaks TLS: it closed a plain connection but took a TLS handshake. Use \
                 rediss:// for it"
            )
        }
        _ => return None,
    };
    Some(RedisTrackerError::InvalidOption(problem.into()))
}

/// Whether the server answers `PING` over plain TCP as Redis does: `+PONG`, or an error reply such as `-NOAUTH`.
async fn answers_plain_ping(host: &str, port: u16, bound: Duration) -> bool {
    let ping = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut first = [0_u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        Some(matches!(first[0], b'+' | b'-'))
    };
    tokio::time::timeout(bound, ping)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Whether the server takes a TLS handshake: it completes, or fails on what only a TLS server sends (a
/// certificate this process does not trust, or an alert), or the server answers it with a Redis reply.
async fn takes_tls_handshake(host: &str, port: u16, bound: Duration) -> bool {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let Ok(client) = redis::Client::open(format!("rediss://{host}:{port}/")) else {
        return false;
    };
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(bound))
        .set_response_timeout(Some(bound));
    match tokio::time::timeout(
        bound,
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
    {
        Ok(Ok(_)) => true,
        Ok(Err(error)) => {
            error.code().is_some()
                || matches!(
                    tls_error(&error),
                    Some(
                        rustls::Error::InvalidCertificate(_)
                            | rustls::Error::NoCertificatesPresented
                            | rustls::Error::AlertReceived(_)
                            | rustls::Error::PeerIncompatible(_)
                    )
                )
        }
        Err(_) => false,
    }
}
