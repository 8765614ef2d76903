//! Cancels in Redis: by id, before a start, through a link, by filter, and of the whole session; each walks the cancelled subtree to fire this process's tokens.

use std::sync::Arc;

use subagent_tracker::{validate_task_id, SubagentStatus, TaskFilter, DEFAULT_CANCEL_REASON};

use super::RedisSession;
use crate::store::{self};
use crate::RedisTrackerError;

impl RedisSession {
    /// Cancels a pending task and its pending descendants, in whatever processes they run. True exactly when
    /// this call moved the task; of concurrent cancels from any processes, exactly one is true.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    /// [`RedisTrackerError::NotReplicated`] with `wait_for_replicas`, when fewer replicas confirm the cancel.
    pub async fn cancel(
        &self,
        task_id: &str,
        reason: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        self.cancel_with(task_id, reason, "requested", "", "").await
    }

    /// Cancels the task `task_id` if it is pending, as [`cancel`](Self::cancel) does; otherwise records the
    /// cancel, so that the next start or reservation of the id begins `Cancelled` (contract §3, cancel before
    /// start). The record waits the session's `early_cancel_ttl`. True only when this call cancelled a pending
    /// task.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid id; [`RedisTrackerError::Unavailable`].
    pub async fn cancel_before_start(
        &self,
        task_id: &str,
        reason: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        self.cancel_with(task_id, reason, "requested", "1", "")
            .await
    }

    /// A linked token's cancel: it reaches `run` only, never a later run of the same id, whose start the token
    /// was not linked to (section 4).
    pub(super) async fn cancel_linked(
        &self,
        task_id: &str,
        run: &str,
        reason: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        self.cancel_with(task_id, reason, "linked", "", run).await
    }

    /// `run` "" aims at whichever run the id names now.
    pub(super) async fn cancel_with(
        &self,
        task_id: &str,
        reason: Option<&str>,
        cause: &str,
        before_start: &str,
        run: &str,
    ) -> Result<bool, RedisTrackerError> {
        let reason = reason.unwrap_or(DEFAULT_CANCEL_REASON);
        let ((moved, walk, due, _), unconfirmed): ((i64, String, String, String), _) = self
            .cancelling(
                "cancel",
                &[
                    &self.incarnation,
                    task_id,
                    reason,
                    cause,
                    before_start,
                    run,
                    &self.worker.process,
                ],
                |(moved, _, _, _)| *moved == 1,
                |(_, _, _, told)| Some(told),
            )
            .await?;
        self.finish_walk(&walk, &due).await?;
        confirmed(unconfirmed, moved == 1)
    }

    /// Takes the remaining steps of the cascade a cancel left under way (`walk`, "" for none; its timer `due`,
    /// which the registry's index learns first, so that a worker takes the steps on should this process stop
    /// taking them): a cancel returns once its cascade is done (contract §3, cascades in steps), even when fewer
    /// replicas confirm its steps. Returns how many the steps moved, and the matching tasks they moved (a cancel
    /// by filter), or the first step's refusal for want of replicas once every step is taken.
    pub(super) async fn finish_walk(
        &self,
        walk: &str,
        due: &str,
    ) -> Result<(usize, Vec<String>), RedisTrackerError> {
        let (mut moved, mut matched) = (0, Vec::new());
        if walk.is_empty() {
            return Ok((moved, matched));
        }
        self.schedule(due).await?;
        let mut unconfirmed = None;
        loop {
            let (mut reply, refusal): (Vec<String>, _) = self
                .cancelling(
                    "walk",
                    &[&self.incarnation, walk, &self.worker.process],
                    |_| true,
                    |reply: &Vec<String>| reply.get(2),
                )
                .await?;
            unconfirmed = unconfirmed.or(refusal);
            if reply.len() < 3 {
                return Err(RedisTrackerError::Protocol(Arc::from("stv2_walk")));
            }
            matched.extend(reply.split_off(3));
            moved += reply[1].parse::<usize>().unwrap_or(0);
            if reply[0] == "1" {
                return confirmed(unconfirmed, (moved, matched));
            }
        }
    }

    /// A cancel's function, which this process's runs that it reached learn from its reply (`told` finds what
    /// the reply told this process), whatever happens next. Returns the reply, and the refusal for the caller to
    /// return once the cascade is done (`confirmed`), if any.
    ///
    /// With [`RedisOptions::wait_for_replicas`](crate::RedisOptions::wait_for_replicas), it goes through the
    /// registry's replication connection followed by `WAIT` (for three quarters of the timeout, so that the
    /// answer arrives within it), and a cancel fewer replicas confirm is refused with
    /// [`RedisTrackerError::NotReplicated`] once it has moved something (`moved` says whether it did).
    pub(super) async fn cancelling<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: &[&str],
        moved: impl Fn(&T) -> bool,
        told: impl Fn(&T) -> Option<&String>,
    ) -> Result<(T, Option<RedisTrackerError>), RedisTrackerError> {
        let wanted = self.worker.options.wait_for_replicas;
        let Some(connection) = &self.worker.replication else {
            let answer = self.transition(name, args).await?;
            if let Some(message) = told(&answer) {
                self.worker.apply_told(message.as_bytes());
            }
            return Ok((answer, None));
        };
        let wait = self.worker.options.timeout * 3 / 4;
        let (answer, acknowledged): (T, usize) = store::call_and_wait(
            &mut connection.clone(),
            name,
            &[&self.key],
            args,
            wanted,
            wait,
        )
        .await
        .map_err(|error| self.refusal(error, "", None))?;
        // The cancel took effect on the primary: this process's runs are cancelled there, confirmed or not.
        if let Some(message) = told(&answer) {
            self.worker.apply_told(message.as_bytes());
        }
        let unconfirmed =
            (acknowledged < wanted && moved(&answer)).then_some(RedisTrackerError::NotReplicated {
                wanted,
                acknowledged,
            });
        Ok((answer, unconfirmed))
    }

    /// Cancels every pending task of the session; returns how many moved.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    /// [`RedisTrackerError::NotReplicated`] with `wait_for_replicas`, when fewer replicas confirm the cancel.
    pub async fn cancel_all(&self, reason: Option<&str>) -> Result<usize, RedisTrackerError> {
        self.cancel_everything(reason, false).await
    }

    /// Cancels the pending tasks that `filter` matches, each with its pending descendants and cause `Requested`
    /// as [`cancel`](Self::cancel) does, in one atomic call, and returns the ids of the matching tasks it moved,
    /// in start order (contract §3, cancel by filter). The metadata filter is a JSON object (as the tasks'
    /// metadata is JSON text): a task matches when its metadata holds every key of it with an equal JSON value.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    /// [`RedisTrackerError::NotReplicated`] with `wait_for_replicas`, when fewer replicas confirm the cancel.
    pub async fn cancel_matching(
        &self,
        filter: &TaskFilter<'_, &str>,
        reason: Option<&str>,
    ) -> Result<Vec<Arc<str>>, RedisTrackerError> {
        let reason = reason.unwrap_or(DEFAULT_CANCEL_REASON);
        let given =
            |value: Option<&str>| value.map_or_else(String::new, |value| format!("={value}"));
        let agent = given(filter.wanted_agent());
        let status = given(filter.wanted_status().map(SubagentStatus::as_str));
        let metadata = filter.wanted_metadata().copied().unwrap_or("");
        let (mut reply, unconfirmed): (Vec<String>, _) = self
            .cancelling(
                "cancel_matching",
                &[
                    &self.incarnation,
                    reason,
                    &agent,
                    &status,
                    metadata,
                    &self.worker.process,
                ],
                |reply: &Vec<String>| reply.len() > 3,
                |reply: &Vec<String>| reply.get(2),
            )
            .await?;
        if reply.len() < 3 {
            return Err(RedisTrackerError::Protocol(Arc::from(
                "stv2_cancel_matching",
            )));
        }
        let mut moved: Vec<String> = reply.split_off(3);
        moved.extend(self.finish_walk(&reply[0], &reply[1]).await?.1);
        confirmed(unconfirmed, moved.into_iter().map(Arc::from).collect())
    }

    /// Cancels every pending task and refuses new starts from then on, in every process. Closing again keeps
    /// the first reason.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    /// [`RedisTrackerError::NotReplicated`] with `wait_for_replicas`, when fewer replicas confirm the cancel.
    pub async fn close(&self, reason: Option<&str>) -> Result<usize, RedisTrackerError> {
        self.cancel_everything(reason, true).await
    }

    pub(super) async fn cancel_everything(
        &self,
        reason: Option<&str>,
        close: bool,
    ) -> Result<usize, RedisTrackerError> {
        let reason = reason.unwrap_or(DEFAULT_CANCEL_REASON);
        let closing = if close { "1" } else { "0" };
        // A close changes the session even when nothing was pending: it must be confirmed as a cancel is.
        let ((moved, walk, due, _), unconfirmed): ((usize, String, String, String), _) = self
            .cancelling(
                "cancel_all",
                &[&self.incarnation, reason, closing, &self.worker.process],
                |(moved, _, _, _)| *moved > 0 || close,
                |(_, _, _, told)| Some(told),
            )
            .await?;
        let walked = self.finish_walk(&walk, &due).await?.0;
        confirmed(unconfirmed, moved + walked)
    }
}

/// `value`, or the refusal of a cancel fewer replicas confirmed, returned once its cascade is done.
fn confirmed<V>(unconfirmed: Option<RedisTrackerError>, value: V) -> Result<V, RedisTrackerError> {
    unconfirmed.map_or(Ok(value), Err)
}
