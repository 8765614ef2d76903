//! Settings of a Redis registry.

use std::time::Duration;

use crate::RedisTrackerError;

/// How often a worker compares the tasks it runs with Redis by default, so that a lost cancel notification
/// delays a cancel by at most this long.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(2);

/// How long a call may wait for Redis by default before it fails with
/// [`Unavailable`](crate::RedisTrackerError::Unavailable).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a worker's lease lasts by default: a worker that has not renewed it for this long is taken for
/// dead, and its running tasks fail.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// How long a session may go unchanged by default before it is removed from Redis (once none of its tasks is
/// unfinished).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The prefix of every key and channel by default.
pub const DEFAULT_KEY_PREFIX: &str = "subagent-tracker:";

/// The shortest lease: it is renewed three times per lease, and a renewal needs a millisecond at least.
pub const MIN_LEASE: Duration = Duration::from_millis(3);

/// The shortest reconcile interval and call timeout: the registry's clocks count whole milliseconds, so anything
/// shorter would be a busy loop, or a call that fails before it is sent.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Settings of a [`RedisRegistry`](crate::RedisRegistry), built with chained setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisOptions {
    /// This process's worker id; generated when `None`.
    pub worker_id: Option<String>,
    /// How often the worker reconciles the tasks it runs with Redis.
    pub reconcile_interval: Duration,
    /// The bound on each call's wait for Redis.
    pub timeout: Duration,
    /// The prefix of every key and channel, so that several deployments can share one Redis.
    pub key_prefix: String,
    /// How long the worker's lease lasts; it is renewed three times per lease.
    pub lease: Duration,
    /// How long a session may go unchanged before it is removed, once none of its tasks is unfinished.
    pub session_ttl: Duration,
    /// Whether the URL names a node of a Redis Cluster: the registry then reaches the whole cluster through it,
    /// routing each call to the primary of its slot. `None` asks the server when connecting.
    pub cluster: Option<bool>,
    /// How many replicas must acknowledge a cancel (`WAIT`, on the session's primary, within `timeout`) before
    /// it returns true, so that a cancel acknowledged to the caller survives a failover. Zero waits for none.
    pub wait_for_replicas: usize,
    /// Whether to connect to a server whose `maxmemory-policy` may evict any key (`allkeys-lru`,
    /// `allkeys-lfu`, `allkeys-random`), as managed Redis used as a cache often is. Such a server evicts live
    /// sessions under memory pressure, so it is refused by default
    /// ([`RedisTrackerError::InvalidOption`]); with this set, a session whose keys were evicted raises
    /// [`RedisTrackerError::SessionLost`], and its runners' tokens fire.
    pub eviction_allowed: bool,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            worker_id: None,
            reconcile_interval: DEFAULT_RECONCILE_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            lease: DEFAULT_LEASE,
            session_ttl: DEFAULT_SESSION_TTL,
            cluster: None,
            wait_for_replicas: 0,
            eviction_allowed: false,
        }
    }
}

impl RedisOptions {
    /// These settings with the worker id `worker_id`.
    #[must_use]
    pub fn with_worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.worker_id = Some(worker_id.into());
        self
    }

    /// These settings reconciling every `interval`.
    #[must_use]
    pub fn with_reconcile_interval(mut self, interval: Duration) -> Self {
        self.reconcile_interval = interval;
        self
    }

    /// These settings with calls bounded by `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These settings with a lease of `lease`.
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// These settings removing sessions unchanged for `session_ttl`.
    #[must_use]
    pub fn with_session_ttl(mut self, session_ttl: Duration) -> Self {
        self.session_ttl = session_ttl;
        self
    }

    /// These settings for a Redis Cluster reached through the node the URL names (`true`), or for one server
    /// (`false`), rather than asking the server which it is. A server that answers `INFO` and says otherwise
    /// is refused when connecting ([`RedisTrackerError::InvalidOption`]).
    #[must_use]
    pub fn with_cluster(mut self, cluster: bool) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// These settings making a cancel wait until `replicas` replicas have it before it returns true.
    #[must_use]
    pub fn with_wait_for_replicas(mut self, replicas: usize) -> Self {
        self.wait_for_replicas = replicas;
        self
    }

    /// These settings connecting to a server whose `maxmemory-policy` may evict any key, or not (the default).
    #[must_use]
    pub fn with_eviction_allowed(mut self, allowed: bool) -> Self {
        self.eviction_allowed = allowed;
        self
    }

    /// These settings with keys and channels under `key_prefix`.
    #[must_use]
    pub fn with_key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        self.key_prefix = key_prefix.into();
        self
    }

    /// Checks the settings before anything connects: a lease of at least [`MIN_LEASE`], a reconcile interval
    /// and a timeout of at least [`MIN_INTERVAL`] (a session TTL may be zero: idle sessions go at the next
    /// sweep), and a key prefix without `{` or `}`, since a session's id is its keys' hash tag.
    ///
    /// # Errors
    /// [`RedisTrackerError::InvalidOption`] naming the first setting refused and what it must be.
    pub fn check(&self) -> Result<(), RedisTrackerError> {
        let at_least = |name: &str, value: Duration, minimum: Duration| {
            if value < minimum {
                return Err(RedisTrackerError::InvalidOption(
                    format!(
                        "{name} must be at least {} seconds, got {}",
                        minimum.as_secs_f64(),
                        value.as_secs_f64()
                    )
                    .into(),
                ));
            }
            Ok(())
        };
        at_least("lease", self.lease, MIN_LEASE)?;
        at_least("reconcile_interval", self.reconcile_interval, MIN_INTERVAL)?;
        at_least("timeout", self.timeout, MIN_INTERVAL)?;
        if self.key_prefix.contains(['{', '}']) {
            return Err(RedisTrackerError::InvalidOption(
                "key_prefix must not contain '{' or '}': the session's id is the keys' hash tag"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(options: &RedisOptions) -> String {
        match options.check() {
            Err(RedisTrackerError::InvalidOption(message)) => message.into_owned(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn settings_too_short_to_act_on_are_refused_by_name() {
        let defaults = RedisOptions::default();
        assert!(defaults.check().is_ok());
        assert_eq!(
            refusal(&defaults.clone().with_lease(Duration::from_millis(2))),
            "lease must be at least 0.003 seconds, got 0.002"
        );
        assert_eq!(
            refusal(&defaults.clone().with_reconcile_interval(Duration::ZERO)),
            "reconcile_interval must be at least 0.001 seconds, got 0"
        );
        assert_eq!(
            refusal(&defaults.clone().with_timeout(Duration::from_micros(999))),
            "timeout must be at least 0.001 seconds, got 0.000999"
        );
        assert!(refusal(&defaults.clone().with_key_prefix("app{1}:")).contains("must not contain"));
    }

    #[test]
    fn the_shortest_settings_pass() {
        let shortest = RedisOptions::default()
            .with_lease(MIN_LEASE)
            .with_reconcile_interval(MIN_INTERVAL)
            .with_timeout(MIN_INTERVAL)
            .with_session_ttl(Duration::ZERO);
        assert!(shortest.check().is_ok());
    }
}
