//! Deadlines and claim timeouts on Redis: kept in the registry's index of timers and fired by whichever worker
//! looks first, on its tick.

use std::sync::Arc;
use std::time::Duration;

use super::{lock, Worker};
use crate::connection::Connection;
use crate::store;
use crate::RedisTrackerError;

/// How often a worker looks for due timers (deadlines and claim timeouts) of any session: the precision with
/// which they fire.
pub(super) const TIMER_TICK: Duration = Duration::from_millis(50);

impl Worker {
    /// Records that session `session_id` has a timer due at `due_ms` (unless one is due earlier).
    pub(crate) async fn schedule(
        &self,
        session_id: &str,
        due_ms: u64,
    ) -> Result<(), RedisTrackerError> {
        let _: i64 = store::call(
            &mut self.connection.clone(),
            "schedule",
            &[&self.keys.timers(), &self.keys.timer_changes()],
            &[session_id, &due_ms.to_string()],
        )
        .await?;
        Ok(())
    }

    /// Fires the due timers of every session; any worker may, and firing twice changes nothing.
    pub(super) async fn fire_due_timers(&self) -> Result<(), RedisTrackerError> {
        let mut connection = self.connection.clone();
        let (timers, changes) = (self.keys.timers(), self.keys.timer_changes());
        let due: Vec<(String, String)> =
            store::call(&mut connection, "due", &[&timers, &changes], &[]).await?;
        for (session_id, seen_changes) in due {
            let next = self.fire(&mut connection, &session_id).await?;
            let _: i64 = store::call(
                &mut connection,
                "retime",
                &[&timers, &changes],
                &[&session_id, &next.to_string(), &seen_changes],
            )
            .await?;
        }
        Ok(())
    }

    /// Fires the session's due timers; returns when its next one falls due (-1: none).
    async fn fire(
        &self,
        connection: &mut Connection,
        session_id: &str,
    ) -> Result<i64, RedisTrackerError> {
        store::call(
            connection,
            "fire",
            &[&self.keys.session(session_id)],
            &[subagent_tracker::DEADLINE_REASON],
        )
        .await
    }

    /// Puts back the registry's index entries of timers that a lost reply may have left out.
    /// Lists session `session_id` in the registry's index of timers at `walks_due` (a server function's reply:
    /// when the cascade it left under way is due, "" for none), so that a worker's timer loop takes the
    /// remaining steps of a cascade that no caller takes (one the reaper or the orphan check set off).
    pub(super) async fn schedule_walks(
        &self,
        session_id: &str,
        walks_due: &str,
    ) -> Result<(), RedisTrackerError> {
        match walks_due.parse::<u64>() {
            Ok(due) => self.schedule(session_id, due).await,
            Err(_) => Ok(()),
        }
    }

    pub(super) async fn reschedule_timers(&self) -> Result<(), RedisTrackerError> {
        let unscheduled: Vec<Arc<str>> = lock(&self.runs)
            .sessions
            .iter()
            .filter(|(_, session)| session.unscheduled)
            .map(|(session_id, _)| session_id.clone())
            .collect();
        let mut connection = self.connection.clone();
        for session_id in unscheduled {
            // Cleared first: a call that leaves it unscheduled meanwhile marks it again.
            if let Some(session) = lock(&self.runs).sessions.get_mut(&session_id) {
                session.unscheduled = false;
            }
            let repaired = match self.fire(&mut connection, &session_id).await {
                Ok(next) => match u64::try_from(next) {
                    Ok(next) => self.schedule(&session_id, next).await,
                    Err(_) => Ok(()),
                },
                Err(error) => Err(error),
            };
            if let Err(error) = repaired {
                lock(&self.runs)
                    .sessions
                    .entry(session_id)
                    .or_default()
                    .unscheduled = true;
                return Err(error);
            }
        }
        Ok(())
    }
}
