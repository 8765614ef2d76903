//! The worker's lease: renewed on the server's clock, fenced by this process's own clock when it cannot be, and
//! reaped by another worker once it has passed.

use std::sync::Arc;
use std::time::Instant;

use super::announcements::forget_announcements;
use super::{lock, RemoteCancel, Worker, BATCH};
use crate::connection::Connection;
use crate::store;
use crate::RedisTrackerError;

/// The error of a task whose worker stopped renewing its lease.
pub const WORKER_LOST_ERROR: &str = "the worker running the task was lost (its lease expired)";

/// The cancel reason of a run whose own worker could not renew its lease.
pub const LEASE_LOST_REASON: &str = "this worker lost its lease on the registry";

impl Worker {
    /// Renews the lease. Returns true when Redis had lost what this process last wrote there: its lease was
    /// gone or older (a reaper forgot it, a restart from older state, a failover to a lagging replica).
    pub(super) async fn renew_lease(&self) -> Result<bool, RedisTrackerError> {
        let lease = self.options.lease.as_millis().to_string();
        let [_server_time, existed, previous, expiry]: [i64; 4] = store::call(
            &mut self.connection.clone(),
            "lease",
            &[&self.keys.workers()],
            &[&self.process, &lease],
        )
        .await?;
        *lock(&self.renewed_at) = Instant::now();
        if existed == 0 {
            // A new lease, or a reaper took this process for dead and forgot its lease and announcements.
            forget_announcements(&mut lock(&self.runs));
        }
        let written = lock(&self.lease_expiry).replace(expiry);
        Ok(written.is_some_and(|written| existed == 0 || previous != written))
    }

    /// Past a whole lease without renewal, the others may have failed this worker's runs: their runners stop.
    fn fence_if_lease_lost(&self) {
        if lock(&self.renewed_at).elapsed() < self.options.lease {
            return;
        }
        let fenced = self
            .held_runs()
            .into_iter()
            .map(|run| {
                let cancel = RemoteCancel::lease_lost(&run);
                (run, cancel)
            })
            .collect();
        self.apply_cancels(fenced);
    }

    /// Fails the tasks of the workers whose lease has passed and sweeps idle sessions, unless another worker is
    /// doing so now.
    pub(super) async fn reap(&self) -> Result<(), RedisTrackerError> {
        let mut connection = self.housekeeping.clone();
        // Held for one round (it expires by itself should this worker die meanwhile), so that every worker
        // reaps on its own ticks: the dead are found at the pace of the shortest lease.
        let round = self.options.lease / 3;
        let lock_held: Option<String> = redis::cmd("SET")
            .arg(self.keys.reaper())
            .arg(&*self.process)
            .arg("NX")
            .arg("PX")
            .arg(round.as_millis().to_string())
            .query_async(&mut connection)
            .await?;
        if lock_held.is_none() {
            return Ok(());
        }
        // Half a round for the sweep, so that the round ends before the lock expires.
        let reaped = match self.reap_expired(&mut connection).await {
            Ok(()) => self
                .sweep_idle_sessions(&mut connection, round / 2)
                .await
                .map(drop),
            failed => failed,
        };
        let _: i64 = store::call(
            &mut connection,
            "unlock",
            &[&self.keys.reaper()],
            &[&self.process],
        )
        .await?;
        reaped
    }

    async fn reap_expired(&self, connection: &mut Connection) -> Result<(), RedisTrackerError> {
        let expired: Vec<(String, String)> =
            store::call(connection, "expired", &[&self.keys.workers()], &[]).await?;
        for (process, expired_at) in expired
            .iter()
            .filter(|(process, _)| **process != *self.process)
        {
            let announced = self.keys.announced(process);
            let sessions: Vec<String> = redis::cmd("ZRANGE")
                .arg(&announced)
                .arg(0)
                .arg(-1)
                .query_async(connection)
                .await?;
            let mut all_reaped = true;
            for chunk in sessions.chunks(BATCH) {
                let keys: Vec<String> = chunk
                    .iter()
                    .map(|session_id| self.keys.session(session_id))
                    .collect();
                let calls: Vec<_> = keys
                    .iter()
                    .map(|key| {
                        (
                            vec![&**key],
                            vec![&**process, WORKER_LOST_ERROR, &**expired_at],
                        )
                    })
                    .collect();
                let reaped: Vec<Result<(i64, String, String), _>> =
                    store::call_each(connection, "reap", &calls).await?;
                for ((session_id, key), outcome) in chunk.iter().zip(&keys).zip(reaped) {
                    // A session whose live index is longer than one call reads goes on from its cursor.
                    let Ok((_, mut cursor, walks_due)) = outcome else {
                        all_reaped = false;
                        continue;
                    };
                    self.schedule_walks(session_id, &walks_due).await?;
                    while !cursor.is_empty() {
                        let args = [&**process, WORKER_LOST_ERROR, &**expired_at, &*cursor];
                        match store::call::<(i64, String, String)>(
                            connection,
                            "reap",
                            &[key],
                            &args,
                        )
                        .await
                        {
                            Ok((_, next, walks_due)) => {
                                self.schedule_walks(session_id, &walks_due).await?;
                                cursor = next;
                            }
                            Err(_) => {
                                all_reaped = false;
                                break;
                            }
                        }
                    }
                }
            }
            // Dropped together with its announcements once every session was reaped, unless it renewed
            // meanwhile (it came back, and keeps both). What it announced stays as long as its lease does,
            // however long no worker is alive.
            if all_reaped {
                let _: i64 = store::call(
                    connection,
                    "forget",
                    &[&self.keys.workers(), &announced],
                    &[process],
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// One lease tick: fences this worker if it could not renew for a whole lease, renews, and announces again the
/// sessions Redis may not know this process runs tasks in.
pub(super) async fn keep_lease(worker: Arc<Worker>) {
    // Fenced before renewing: a worker that was frozen past its lease (a stopped process, a long pause) may
    // already have been reaped, even if it can renew now.
    worker.fence_if_lease_lost();
    // The fence covers a lease that runs out while renewals fail.
    if let Ok(lost_writes) = worker.renew_lease().await {
        if lost_writes {
            let _ = worker.recover_lost_writes().await;
        }
        let _ = worker.announce_busy_sessions().await;
    }
}
