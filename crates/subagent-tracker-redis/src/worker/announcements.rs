//! The sessions this process runs tasks in, announced in Redis (in a set that lives as long as the lease) so
//! the reaper knows whose runs to fail; the registry's index of sessions; and the sweep of sessions nobody
//! uses any more.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{lock, Runs, Worker, BATCH};
use crate::connection::Connection;
use crate::maps::shrink_if_mostly_empty;
use crate::session_state::SWEEP_UNDER_WAY;
use crate::store::{self, epoch_millis};
use crate::RedisTrackerError;

/// How long the registry remembers a session the sweep found lost.
const LOST_SESSION_MEMORY: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// How many lost sessions the registry remembers at most.
const LOST_SESSIONS: usize = 10_000;

impl Worker {
    /// Records in Redis that this process runs tasks in `sessions`, with its lease (which a reaper may have
    /// forgotten: then every session with business here is announced again on the next lease tick).
    pub(super) async fn announce(&self, sessions: &[Arc<str>]) -> Result<(), RedisTrackerError> {
        let (workers, announced) = (self.keys.workers(), self.keys.announced(&self.process));
        let lease = self.options.lease.as_millis().to_string();
        for chunk in sessions.chunks(BATCH) {
            let mut args: Vec<&str> = vec![&self.process, &lease];
            args.extend(chunk.iter().map(|session_id| &**session_id));
            let lease_held: i64 = store::call(
                &mut self.connection.clone(),
                "announce",
                &[&workers, &announced],
                &args,
            )
            .await?;
            let now = Instant::now();
            let mut runs = lock(&self.runs);
            if lease_held == 0 {
                forget_announcements(&mut runs);
            }
            for session_id in chunk {
                runs.sessions
                    .entry(session_id.clone())
                    .or_default()
                    .announced_at = Some(now);
            }
        }
        Ok(())
    }

    /// Announces the sessions with business here that Redis may not know of.
    pub(super) async fn announce_busy_sessions(&self) -> Result<(), RedisTrackerError> {
        let unannounced: Vec<Arc<str>> = lock(&self.runs)
            .sessions
            .iter()
            .filter(|(_, session)| session.busy() && session.announced_at.is_none())
            .map(|(session_id, _)| session_id.clone())
            .collect();
        self.announce(&unannounced).await
    }

    /// Lists session `session_id` in the registry's index, as changed now.
    pub(crate) async fn index_session(&self, session_id: &str) -> Result<(), RedisTrackerError> {
        let _: i64 = store::call(
            &mut self.connection.clone(),
            "index",
            &[&self.keys.sessions()],
            &[session_id],
        )
        .await?;
        Ok(())
    }

    /// Removes the sessions that nothing changed for a whole `session_ttl` and that have no unfinished task, in
    /// batches of one round trip each, for at most `budget`.
    pub(super) async fn sweep_idle_sessions(
        &self,
        connection: &mut Connection,
        budget: Duration,
    ) -> Result<usize, RedisTrackerError> {
        let began = Instant::now();
        let index = self.keys.sessions();
        let ttl = self.options.session_ttl.as_millis().to_string();
        let batch = BATCH.to_string();
        let mut removed = 0;
        loop {
            let idle: Vec<String> =
                store::call(connection, "idle", &[&index], &[&ttl, &batch]).await?;
            let keys: Vec<String> = idle
                .iter()
                .map(|session_id| self.keys.session(session_id))
                .collect();
            let next_looks = Self::sweep_each(connection, &keys, &ttl).await?;
            let mut swept: Vec<&str> = vec![&ttl];
            let mut lost: Vec<&str> = Vec::new();
            let mut kept = redis::pipe();
            for (session_id, next_look) in idle.iter().zip(next_looks) {
                match next_look {
                    Ok(-1) => swept.push(session_id),
                    Ok(-2) => {
                        swept.push(session_id);
                        lost.push(session_id);
                    }
                    // Never moves an entry earlier: `session()` may have listed the id again meanwhile.
                    Ok(next_look) => {
                        kept.cmd("ZADD")
                            .arg(&index)
                            .arg("XX")
                            .arg("GT")
                            .arg(next_look)
                            .arg(session_id)
                            .ignore();
                    }
                    // A session whose sweep fails (its keys hold other data, say) is looked at again after
                    // another `session_ttl`, behind the others.
                    Err(_) => {
                        kept.cmd("ZADD")
                            .arg(&index)
                            .arg("XX")
                            .arg("GT")
                            .arg(epoch_millis(std::time::SystemTime::now()))
                            .arg(session_id)
                            .ignore();
                    }
                }
            }
            removed += swept.len() - 1;
            if swept.len() < idle.len() + 1 {
                let () = kept.query_async(connection).await?;
            }
            // Remembered as lost before they leave the index, so that they are never taken for closed.
            if !lost.is_empty() {
                self.remember_lost(connection, &lost).await?;
            }
            if swept.len() > 1 {
                let _: i64 = store::call(connection, "drop_stale", &[&index], &swept).await?;
            }
            if idle.len() < BATCH || began.elapsed() >= budget {
                return Ok(removed);
            }
        }
    }

    /// What `stv2_sweep` says of each session of `keys`: a session being removed is called again until its
    /// removal, made of calls of a bounded number of its tasks each, is over.
    async fn sweep_each(
        connection: &mut Connection,
        keys: &[String],
        ttl: &str,
    ) -> Result<Vec<Result<i64, RedisTrackerError>>, RedisTrackerError> {
        let mut next_looks: Vec<Result<i64, RedisTrackerError>> =
            keys.iter().map(|_| Ok(SWEEP_UNDER_WAY)).collect();
        loop {
            let under_way: Vec<usize> = (0..keys.len())
                .filter(|&index| matches!(next_looks[index], Ok(SWEEP_UNDER_WAY)))
                .collect();
            if under_way.is_empty() {
                return Ok(next_looks);
            }
            let calls: Vec<_> = under_way
                .iter()
                .map(|&index| (vec![&*keys[index]], vec![ttl]))
                .collect();
            let replies: Vec<Result<i64, _>> =
                store::call_each(connection, "sweep", &calls).await?;
            for (index, reply) in under_way.into_iter().zip(replies) {
                next_looks[index] = reply;
            }
        }
    }

    /// Records that the sweep found `sessions` lost, for [`LOST_SESSION_MEMORY`], so that their objects keep
    /// saying so once their last key has gone; the oldest beyond [`LOST_SESSIONS`] are forgotten.
    async fn remember_lost(
        &self,
        connection: &mut Connection,
        sessions: &[&str],
    ) -> Result<(), RedisTrackerError> {
        let key = self.keys.lost_sessions();
        let now = epoch_millis(std::time::SystemTime::now());
        let forgotten_before =
            now.saturating_sub(u64::try_from(LOST_SESSION_MEMORY.as_millis()).unwrap_or(u64::MAX));
        let mut pipeline = redis::pipe();
        for session_id in sessions {
            pipeline
                .cmd("ZADD")
                .arg(&key)
                .arg(now)
                .arg(*session_id)
                .ignore();
        }
        pipeline
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(forgotten_before)
            .ignore()
            .cmd("ZREMRANGEBYRANK")
            .arg(&key)
            .arg(0)
            .arg(-i64::try_from(LOST_SESSIONS).unwrap_or(i64::MAX) - 1)
            .ignore();
        let () = pipeline.query_async(connection).await?;
        Ok(())
    }

    /// Whether session `session_id`'s keys are gone though nobody removed them
    /// ([`RedisTrackerError::SessionLost`]): its hash is missing while this process runs a task of it (a session
    /// with an unfinished task is never removed), while the registry's index lists it, or after the sweep found
    /// it so. False when Redis cannot say: the caller's own error stands.
    pub(crate) async fn is_session_lost(&self, session_id: &str) -> bool {
        let mut connection = self.connection.clone();
        let exists: Result<bool, _> = redis::cmd("EXISTS")
            .arg(self.keys.session(session_id))
            .query_async(&mut connection)
            .await;
        if !matches!(exists, Ok(false)) {
            return false;
        }
        if lock(&self.runs)
            .held
            .iter()
            .any(|run| &*run.session_id == session_id)
        {
            return true;
        }
        for index in [self.keys.sessions(), self.keys.lost_sessions()] {
            let listed: Result<Option<f64>, _> = redis::cmd("ZSCORE")
                .arg(index)
                .arg(session_id)
                .query_async(&mut connection)
                .await;
            if matches!(listed, Ok(Some(_))) {
                return true;
            }
        }
        false
    }

    /// Lets go of the sessions this process has no business with any more, and withdraws their announcements.
    pub(super) async fn forget_idle_sessions(&self) -> Result<(), RedisTrackerError> {
        // An announcement stays for two call timeouts at least, so that a withdrawal never overtakes a newer
        // announcement on its way.
        let grace = self.options.timeout * 2;
        let withdrawn: Vec<Arc<str>> = {
            let mut runs = lock(&self.runs);
            let mut withdrawn = Vec::new();
            runs.sessions.retain(|session_id, session| {
                if !session.idle(grace * 2) {
                    return true;
                }
                if session.announced_at.is_some() {
                    withdrawn.push(session_id.clone());
                }
                false
            });
            shrink_if_mostly_empty(&mut runs.sessions);
            withdrawn
        };
        let grace_ms = grace.as_millis().to_string();
        let key = self.keys.announced(&self.process);
        for chunk in withdrawn.chunks(BATCH) {
            let mut args: Vec<&str> = vec![&grace_ms];
            args.extend(chunk.iter().map(|session_id| &**session_id));
            let _: i64 =
                store::call(&mut self.connection.clone(), "drop_stale", &[&key], &args).await?;
        }
        Ok(())
    }
}

/// Takes every announcement of this process for unknown to Redis: a reaper forgot them with its lease. The
/// sessions with business here are announced again on the next lease tick.
pub(super) fn forget_announcements(runs: &mut Runs) {
    for session in runs.sessions.values_mut() {
        session.announced_at = None;
    }
}
