//! Restoring exported tasks into a session kept in Redis, checked in parts before any is written.

use std::collections::HashSet;

use subagent_tracker::{restored_snapshot, validate_task_id, SubagentTaskSnapshot, TrackerError};

use super::RedisSession;
use crate::store::{self};
use crate::RedisTrackerError;

/// The most tasks one call of `stv2_restore` writes: a restore of more goes as several calls, checked first.
const RESTORE_STEP: usize = 64;

/// The arguments of `stv2_restore` for `tasks` (each its id, field count and fields) in `mode`.
fn restore_arguments<'a>(
    incarnation: &'a str,
    mode: &'a str,
    tasks: &'a [Vec<String>],
) -> Vec<&'a str> {
    let mut args = vec![incarnation, mode];
    args.extend(tasks.iter().flatten().map(String::as_str));
    args
}

impl RedisSession {
    /// Fills the session with tasks exported from another, in the order given, as the in-memory tracker does
    /// (contract §6, export and restore; the same rule, [`restored_snapshot`]), in one call; returns how many it
    /// restored. A restored task names its old worker, but no process runs it.
    ///
    /// # Errors
    /// Nothing is restored when a snapshot's id is invalid, repeated in the list
    /// ([`TrackerError::DuplicateInBatch`]) or retained by the session ([`TrackerError::DuplicateTask`]), or the
    /// session is closed; [`RedisTrackerError::Unavailable`].
    pub async fn restore(
        &self,
        snapshots: Vec<SubagentTaskSnapshot<String>>,
    ) -> Result<usize, RedisTrackerError> {
        for snapshot in &snapshots {
            validate_task_id("task_id", &snapshot.task_id)?;
        }
        let now = std::time::SystemTime::now();
        let tasks: Vec<Vec<String>> = snapshots
            .iter()
            .map(|snapshot| {
                let fields = store::finished_task_fields(&restored_snapshot(snapshot.clone(), now));
                let mut task = vec![snapshot.task_id.to_string(), (fields.len() / 2).to_string()];
                task.extend(fields);
                task
            })
            .collect();
        let refusal = |error, offset: usize| {
            self.batch_refusal(error, |index| {
                snapshots
                    .get(offset + index)
                    .map(|snapshot| (&snapshot.task_id, None))
            })
        };
        if tasks.len() <= RESTORE_STEP {
            let args = restore_arguments(&self.incarnation, "all", &tasks);
            return self
                .call::<usize>("restore", &args)
                .await
                .map_err(|error| refusal(error, 0));
        }
        // In calls of a few tasks each, so that no call holds the node long: every refusal is found before
        // the first task is written (the first in the list's order, as in one call), and a task whose id a
        // start took meanwhile is left out (the count says so).
        let mut named = HashSet::with_capacity(snapshots.len());
        let repeated = snapshots
            .iter()
            .position(|snapshot| !named.insert(&snapshot.task_id));
        let chunks: Vec<Vec<&str>> = tasks[..repeated.unwrap_or(tasks.len())]
            .chunks(RESTORE_STEP)
            .map(|chunk| restore_arguments(&self.incarnation, "check", chunk))
            .collect();
        let calls: Vec<_> = chunks
            .iter()
            .map(|args| (vec![&*self.key], args.clone()))
            .collect();
        let checks: Vec<Result<usize, RedisTrackerError>> =
            store::call_each(&mut self.worker.connection.clone(), "restore", &calls).await?;
        for (chunk, check) in checks.into_iter().enumerate() {
            if let Err(error) = check {
                return Err(refusal(
                    self.lost_if_gone(error).await,
                    chunk * RESTORE_STEP,
                ));
            }
        }
        if let Some(index) = repeated {
            return Err(TrackerError::DuplicateInBatch {
                task_id: snapshots[index].task_id.clone(),
            }
            .into());
        }
        let mut restored = 0;
        for (chunk, tasks) in tasks.chunks(RESTORE_STEP).enumerate() {
            let args = restore_arguments(&self.incarnation, "skip", tasks);
            restored += self
                .call::<usize>("restore", &args)
                .await
                .map_err(|error| refusal(error, chunk * RESTORE_STEP))?;
        }
        Ok(restored)
    }
}
