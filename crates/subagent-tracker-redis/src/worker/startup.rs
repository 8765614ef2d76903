//! How a worker begins: it connects (checking what retrying cannot fix before anything else), loads the server
//! functions, takes its lease, and starts its background tasks, which end when it is dropped.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use subagent_tracker::{generate_id, validate_task_id};

use super::lease::keep_lease;
use super::listener::{listen, reconcile};
use super::timers::TIMER_TICK;
use super::{lock, Runs, Worker};
use crate::connection::{Client, Connection};
use crate::error::{cluster_mismatch, configuration_error, timeout_error};
use crate::mirrors::Mirrors;
use crate::scheme_check::scheme_mismatch;
use crate::store::{self, Keys};
use crate::{RedisOptions, RedisTrackerError};

impl Worker {
    /// Connects to the Redis at `url`, loads the server functions, takes a lease and starts the background
    /// tasks: what [`RedisRegistry::connect`](crate::RedisRegistry::connect) documents.
    pub(crate) async fn connect(
        url: &str,
        options: RedisOptions,
    ) -> Result<Arc<Worker>, RedisTrackerError> {
        options.check()?;
        let id: Arc<str> = Arc::from(options.worker_id.clone().unwrap_or_else(generate_id));
        validate_task_id("worker_id", &id)?;
        let probed = match tokio::time::timeout(
            options.timeout,
            Client::probe(url, options.timeout),
        )
        .await
        {
            Ok(Ok(probed)) => probed,
            Ok(Err(error)) => {
                let failed = configuration_error(url, &error);
                return Err(match failed {
                    RedisTrackerError::Unavailable { .. } => scheme_mismatch(url, options.timeout)
                        .await
                        .unwrap_or(failed),
                    _ => failed,
                });
            }
            Err(_) => {
                return Err(scheme_mismatch(url, options.timeout)
                    .await
                    .unwrap_or_else(timeout_error))
            }
        };
        if let (Some(wanted), Some(is_cluster_node)) = (options.cluster, probed) {
            if wanted != is_cluster_node {
                return Err(cluster_mismatch(url, is_cluster_node));
            }
        }
        // A user who may not run INFO says which it is, or is taken to use one server.
        let cluster = options.cluster.or(probed).unwrap_or(false);
        let client = Client::open(url, cluster, options.timeout)
            .map_err(|error| configuration_error(url, &error))?;
        let connect = || async {
            tokio::time::timeout(options.timeout, client.connect(options.timeout))
                .await
                .map_err(|_| timeout_error())?
                .map_err(|error| configuration_error(url, &error))
        };
        let mut connection = connect().await?;
        // A small command first: a server that wants a password refuses a large unauthenticated one with a
        // protocol error that names no password.
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map_err(|error| configuration_error(url, &error))?;
        if !options.eviction_allowed {
            refuse_evicting_policy(&mut connection, url).await?;
        }
        store::load(&mut connection).await?;
        let keys = Keys::new(&options.key_prefix);
        check_prefix_is_ours(&mut connection, &keys).await?;
        let housekeeping = connect().await?;
        let replication = if options.wait_for_replicas > 0 {
            Some(connect().await?)
        } else {
            None
        };
        // Sixteen hex digits: no two processes of one worker id meet the same nonce in practice.
        let process: Arc<str> = Arc::from(format!("{id}/{}", &generate_id()[..16]));
        let worker = Arc::new(Worker {
            client: client.clone(),
            keys,
            id,
            process,
            connection,
            housekeeping,
            replication,
            options,
            mirrors: Mirrors::default(),
            runs: Mutex::new(Runs::default()),
            runtime: tokio::runtime::Handle::current(),
            background: Mutex::new(Vec::new()),
            renewed_at: Mutex::new(Instant::now()),
            lease_expiry: Mutex::new(None),
        });
        worker.renew_lease().await?;
        worker.start_background(client);
        Ok(worker)
    }

    /// Starts the worker's background tasks on the current runtime: the notification listener, and the ticks
    /// that reconcile, keep the lease, reap, and fire due timers. They stop when the worker is dropped.
    fn start_background(self: &Arc<Self>, client: Client) {
        let weak = || Arc::downgrade(self);
        let (lease, reconcile_interval) = (self.options.lease, self.options.reconcile_interval);
        let background = [
            tokio::spawn(listen(weak(), client)),
            tokio::spawn(every(weak(), reconcile_interval, reconcile)),
            // Reaping and sweeping on ticks of their own: a long round never delays a renewal.
            tokio::spawn(every(weak(), lease / 3, keep_lease)),
            tokio::spawn(every(weak(), lease / 3, |worker| async move {
                let _ = worker.reap().await;
            })),
            tokio::spawn(every(weak(), TIMER_TICK, |worker| async move {
                let _ = worker.fire_due_timers().await;
            })),
        ];
        lock(&self.background).extend(background);
    }
}

/// Runs `step` on the worker every `period`, for as long as the worker lives; a late tick is delayed, never
/// doubled. Failures of a step are retried on its next tick.
async fn every<Step, Steps>(worker: Weak<Worker>, period: Duration, step: Steps)
where
    Steps: Fn(Arc<Worker>) -> Step,
    Step: std::future::Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(worker) = worker.upgrade() else {
            return;
        };
        step(worker).await;
    }
}

/// Refuses a server whose `maxmemory-policy` may evict any key: it would drop live sessions under memory pressure
/// without a word. A server that tells neither through `CONFIG GET` nor through `INFO` (a user without those
/// commands) is taken at its word that it keeps what it is given.
async fn refuse_evicting_policy(
    connection: &mut Connection,
    url: &str,
) -> Result<(), RedisTrackerError> {
    let configured: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(connection)
        .await;
    let policy = match configured {
        Ok(pair) => pair.into_iter().nth(1),
        Err(_) => {
            let info: Result<String, _> = redis::cmd("INFO")
                .arg("memory")
                .query_async(connection)
                .await;
            info.ok().and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("maxmemory_policy:"))
                    .map(|policy| policy.trim().to_owned())
            })
        }
    };
    match policy {
        Some(policy) if policy.starts_with("allkeys-") => Err(RedisTrackerError::InvalidOption(
            format!(
                "the Redis at {} has maxmemory-policy {policy}, which evicts any key under memory pressure, \
                 live sessions included: set it to noeviction (or a volatile-* policy), or allow eviction \
                 (allow_eviction=True; Rust: RedisOptions::with_eviction_allowed) to have evicted sessions \
                 raise SessionLostError",
                crate::error::shown_url(url)
            )
            .into(),
        )),
        _ => Ok(()),
    }
}

/// Refuses a key prefix whose registry-wide keys hold other data: calls would fail with a type error, or, for
/// the reaper's lock, reaping and sweeping would silently never happen.
async fn check_prefix_is_ours(
    connection: &mut Connection,
    keys: &Keys,
) -> Result<(), RedisTrackerError> {
    for (key, ours) in keys.registry_keys() {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(connection).await?;
        // The reaper's lock is a string that always expires; one that never does is someone else's.
        let foreign = match kind.as_str() {
            "none" => false,
            "string" if ours == "string" => {
                let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(connection).await?;
                ttl == -1
            }
            kind => kind != ours,
        };
        if foreign {
            return Err(RedisTrackerError::InvalidOption(
                format!(
                    "key_prefix is used by other data in this Redis (key {key:?} holds a {kind}): choose a \
                     prefix of its own"
                )
                .into(),
            ));
        }
    }
    Ok(())
}
