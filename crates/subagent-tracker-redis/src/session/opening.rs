//! Opening tasks in Redis, one or a batch: the arguments each server call takes, checked first, and the local runs and links they set up.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use subagent_tracker::{
    generate_id, validate_task_id, CancelCallback, CancelCause, SubagentStatus, SubagentTaskToken,
    TaskStart, TrackerError, BATCH_REFUSED_REASON, DEADLINE_REASON,
};

use super::{Outcome, RedisSession};
use crate::store::epoch_millis;
use crate::worker::{RemoteCancel, SessionCall};
use crate::RedisTrackerError;

/// The most tasks one call of `stv2_open_batch` opens: a batch of more goes as several calls, checked first.
pub const OPEN_BATCH_STEP: usize = 32;

/// What `open` gives: the task's id, its run and status, the links' registrations, and the call.
pub(super) type Opened = (Arc<str>, OpenedRun, Vec<CancelCallback>, SessionCall);

/// What `open_batch` gives per task: its id, its run and status, and the links' registrations.
pub(super) type OpenedInBatch = (Arc<str>, OpenedRun, Vec<CancelCallback>);

/// A run as the function that opened or claimed it reports it.
pub(super) struct OpenedRun {
    pub(super) run: String,
    pub(super) status: String,
    /// The cancel the run begins with, when the reply carries it: the runner's token fires from it before the
    /// handle is handed out, with no further call that a broken connection could lose (contract §§3, 18, 20).
    pub(super) cancel: Option<RemoteCancel>,
}

impl OpenedRun {
    /// From the reply's run, status, reason, origin, cause and handling flag (`open_task` in
    /// `lua/includes/open.lua`, and `stv2_claim`).
    pub(super) fn from_reply(
        [run, status, reason, origin, cause, handling]: [String; 6],
    ) -> OpenedRun {
        let cancel =
            (status == SubagentStatus::Cancelled.as_str() && !cause.is_empty()).then(|| {
                RemoteCancel {
                    reason,
                    origin,
                    cause: CancelCause::from_name(&cause).unwrap_or(CancelCause::Requested),
                    handling: handling == "1",
                }
            });
        OpenedRun {
            run,
            status,
            cancel,
        }
    }
}

/// One task to open, checked, with the arguments its server function takes.
pub(super) struct Opening {
    task_id: Arc<str>,
    parent_id: Option<String>,
    linked: Vec<SubagentTaskToken>,
    reserved: bool,
    /// A deadline or a claim timeout: the registry's index of timers must learn of it.
    timed: bool,
    /// The task as `stv2_open` and `stv2_open_batch` take it (`opening_at` in `lua/includes/open.lua`).
    arguments: Vec<String>,
}

impl RedisSession {
    /// A start (`reservation` `None`) or a reservation (with its claim timeout, if any). Returns the task's id,
    /// run and status, the links' registrations, and the call, to settle once the caller is done with it (a
    /// start once its run is held). An error or a dropped future leaves the call unsettled: what it may have done
    /// in Redis is found by the reconcile (an orphaned run, a timer missing from the index).
    pub(super) async fn open(
        &self,
        start: TaskStart<String>,
        reservation: Option<Option<Duration>>,
        runner_here: bool,
    ) -> Result<Opened, RedisTrackerError> {
        let opening = self.opening(start, reservation, runner_here)?;
        let call = self.begin(&opening).await?;
        let Opening {
            task_id,
            parent_id,
            linked,
            arguments,
            ..
        } = opening;
        let reply = match self.calls.opens.call(arguments, &self.worker.runtime).await {
            Ok([run, code, ..]) if run.is_empty() => {
                Err(self.refusal_of(&code, "", &task_id, parent_id.as_deref()))
            }
            Ok(reply) => Ok(reply),
            Err(error) => Err(self.refusal(
                self.lost_if_gone(error).await,
                &task_id,
                parent_id.as_deref(),
            )),
        };
        let [run, status, reason, next_due, origin, cause, handling] = match reply {
            Ok(reply) => reply,
            Err(error) => {
                if matches!(error, RedisTrackerError::Tracker(_)) {
                    // Refused: nothing changed in Redis.
                    call.settle();
                }
                return Err(error);
            }
        };
        self.schedule(&next_due).await?;
        let opened = OpenedRun::from_reply([run, status, reason, origin, cause, handling]);
        let (links, opened) = self.opened(&task_id, linked, opened).await?;
        Ok((task_id, opened, links, call))
    }

    /// Opens every task of a batch in one call of `stv2_open_batch`, or none. Returns, per task, its id, run
    /// and status and its links' registrations, and the calls to settle once the caller is done with them.
    pub(super) async fn open_batch(
        &self,
        batch: Vec<(TaskStart<String>, Option<Option<Duration>>)>,
    ) -> Result<(Vec<OpenedInBatch>, Vec<SessionCall>), RedisTrackerError> {
        let openings = batch
            .into_iter()
            .map(|(start, reservation)| self.opening(start, reservation, reservation.is_none()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut named = HashSet::with_capacity(openings.len());
        if let Some(repeated) = openings
            .iter()
            .find(|opening| !named.insert(opening.task_id.clone()))
        {
            return Err(TrackerError::DuplicateInBatch {
                task_id: repeated.task_id.clone(),
            }
            .into());
        }
        let mut calls = Vec::with_capacity(openings.len());
        for opening in &openings {
            calls.push(self.begin(opening).await?);
        }
        let refusal = |error, offset: usize| {
            self.batch_refusal(error, |index| {
                openings
                    .get(offset + index)
                    .map(|opening| (&opening.task_id, opening.parent_id.as_deref()))
            })
        };
        let parts: Vec<&[Opening]> = openings.chunks(OPEN_BATCH_STEP).collect();
        if parts.len() > 1 {
            if let Err((offset, error)) = self.check_batch(&parts).await {
                let error = refusal(error, offset);
                if matches!(error, RedisTrackerError::Tracker(_)) {
                    calls.into_iter().for_each(SessionCall::settle);
                }
                return Err(error);
            }
        }
        let mut reply: Vec<String> = Vec::with_capacity(openings.len() * 7);
        for (index, part) in parts.iter().enumerate() {
            let mut args: Vec<&str> = vec![&self.incarnation, DEADLINE_REASON, "open", "0"];
            for opening in *part {
                args.extend(opening.arguments.iter().map(String::as_str));
            }
            match self.call::<Vec<String>>("open_batch", &args).await {
                Ok(opened) => reply.extend(opened),
                Err(error) => {
                    let error = refusal(error, index * OPEN_BATCH_STEP);
                    // Something changed since the check (a start of one of the ids, a parent's end, a close):
                    // the tasks the earlier parts opened go as in memory, cancelled and finished at once.
                    let ended = self
                        .abandon(&openings[..index * OPEN_BATCH_STEP], &reply)
                        .await;
                    if matches!(error, RedisTrackerError::Tracker(_)) {
                        // A task opened and not ended keeps its call unsettled, for the orphan check.
                        let never_opened = std::iter::repeat(true);
                        calls
                            .into_iter()
                            .zip(ended.into_iter().chain(never_opened))
                            .filter(|(_, ended)| *ended)
                            .for_each(|(call, _)| call.settle());
                    }
                    return Err(error);
                }
            }
        }
        if reply.len() != openings.len() * 7 {
            return Err(RedisTrackerError::Protocol(Arc::from("stv2_open_batch")));
        }
        let mut replies = reply.into_iter();
        let mut opened = Vec::with_capacity(openings.len());
        let mut earliest_due: Option<u64> = None;
        let mut parts = Vec::with_capacity(openings.len());
        for _ in &openings {
            let mut next = || replies.next().unwrap_or_default();
            let [run, status, reason, next_due, origin, cause, handling] =
                std::array::from_fn(|_| next());
            if let Ok(due) = next_due.parse::<u64>() {
                earliest_due = Some(earliest_due.map_or(due, |earliest| earliest.min(due)));
            }
            parts.push(OpenedRun::from_reply([
                run, status, reason, origin, cause, handling,
            ]));
        }
        if let Some(due) = earliest_due {
            self.worker.schedule(&self.session_id, due).await?;
        }
        for (opening, part) in openings.into_iter().zip(parts) {
            let (links, part) = self.opened(&opening.task_id, opening.linked, part).await?;
            opened.push((opening.task_id, part, links));
        }
        Ok((opened, calls))
    }

    /// Checks every part of a batch larger than one call, a call per part, in order: the first refusal in the
    /// batch's order, with the index of its part's first task.
    pub(super) async fn check_batch(
        &self,
        parts: &[&[Opening]],
    ) -> Result<(), (usize, RedisTrackerError)> {
        // What each check found of its tasks as they would open (whether one finishes as it opens, say): a part
        // that names a parent of an earlier part is told, since none of them is open yet.
        let mut found: HashMap<&str, String> = HashMap::new();
        for (index, part) in parts.iter().enumerate() {
            let known: HashSet<&str> = part
                .iter()
                .filter_map(|opening| opening.parent_id.as_deref())
                .filter(|parent_id| found.contains_key(parent_id))
                .collect();
            let count = known.len().to_string();
            let mut args: Vec<&str> = vec![&self.incarnation, DEADLINE_REASON, "check", &count];
            for parent_id in known {
                args.extend([parent_id, found[parent_id].as_str()]);
            }
            for opening in *part {
                args.extend(opening.arguments.iter().map(String::as_str));
            }
            let states: Vec<String> = self
                .call("open_batch", &args)
                .await
                .map_err(|error| (index * OPEN_BATCH_STEP, error))?;
            found.extend(part.iter().map(|opening| &*opening.task_id).zip(states));
        }
        Ok(())
    }

    /// Cancels, with [`BATCH_REFUSED_REASON`], and finishes at once the tasks a refused batch had opened (their
    /// runs in `reply`, seven values each): no runner ever held them. Returns, per task, whether its end was
    /// written; one that failed to end is left to the orphan check, which ends the runs of this process that
    /// nobody holds, once its call is dropped unsettled.
    pub(super) async fn abandon(&self, openings: &[Opening], reply: &[String]) -> Vec<bool> {
        let mut ended = vec![false; openings.len()];
        for (index, (opening, opened)) in openings.iter().zip(reply.chunks(7)).enumerate().rev() {
            ended[index] = self
                .end_run(
                    &opening.task_id,
                    &opened[0],
                    &Outcome::Stopped(Some(BATCH_REFUSED_REASON)),
                )
                .await
                .is_ok();
        }
        ended
    }

    /// A task to open, checked and put into the arguments `stv2_open` and `stv2_open_batch` take. A start whose
    /// runner is not here (`runner_here` false: an event-sourced start) names no worker process, so no reaper
    /// ends it: its end comes by id.
    pub(super) fn opening(
        &self,
        start: TaskStart<String>,
        reservation: Option<Option<Duration>>,
        runner_here: bool,
    ) -> Result<Opening, RedisTrackerError> {
        let reserved = reservation.is_some();
        let parts = start.into_parts();
        let task_id = match parts.task_id {
            Some(task_id) => {
                validate_task_id("task_id", &task_id)?;
                task_id
            }
            None => Arc::from(generate_id()),
        };
        if let Some(parent_id) = &parts.parent_id {
            validate_task_id("parent_id", parent_id)?;
        }
        let claim_timeout = reservation.flatten();
        // Deadlines are wall-clock instants (a timeout was turned into one by the caller's clock): Redis fires
        // them by its own clock, so they are as exact as the two clocks agree.
        let deadline_ms = parts
            .deadline
            .map(|deadline| epoch_millis(deadline).to_string())
            .unwrap_or_default();
        let process = if runner_here {
            &*self.worker.process
        } else {
            ""
        };
        let common_path = parts.parent_id.is_none()
            && parts.agent.is_none()
            && parts.description.is_none()
            && parts.metadata.is_none()
            && !parts.detached
            && !parts.structured
            && !reserved
            && runner_here
            && deadline_ms.is_empty();
        let arguments = if common_path {
            vec!["s".to_owned(), task_id.to_string(), process.to_owned()]
        } else {
            vec![
                "l".to_owned(),
                task_id.to_string(),
                parts.parent_id.clone().unwrap_or_default(),
                parts.agent.as_deref().unwrap_or_default().to_owned(),
                parts.description.as_deref().unwrap_or_default().to_owned(),
                parts.metadata.unwrap_or_default(),
                if parts.detached { "1" } else { "0" }.to_owned(),
                // "2": a start recorded from an event, which never restarts a finished run of its id.
                match (reserved, runner_here) {
                    (true, _) => "1",
                    (false, true) => "0",
                    (false, false) => "2",
                }
                .to_owned(),
                process.to_owned(),
                deadline_ms,
                claim_timeout
                    .map(|timeout| timeout.as_millis().to_string())
                    .unwrap_or_default(),
                claim_timeout
                    .map(subagent_tracker::claim_timeout_error)
                    .unwrap_or_default(),
                if parts.structured { "1" } else { "0" }.to_owned(),
            ]
        };
        Ok(Opening {
            timed: parts.deadline.is_some() || claim_timeout.is_some(),
            reserved,
            task_id,
            parent_id: parts.parent_id,
            linked: parts.linked,
            arguments,
        })
    }

    /// The worker's record of a call under way for `opening` (a start announces the session first).
    pub(super) async fn begin(&self, opening: &Opening) -> Result<SessionCall, RedisTrackerError> {
        if opening.reserved {
            Ok(self
                .worker
                .track_call(&self.session_id, &opening.task_id, opening.timed))
        } else {
            self.worker
                .begin_call(&self.session_id, &opening.task_id, opening.timed)
                .await
        }
    }

    /// Puts a timer the function reported due (`next_due`, or "" for none) into the registry's index of timers.
    pub(super) async fn schedule(&self, next_due: &str) -> Result<(), RedisTrackerError> {
        if let Ok(next_due) = next_due.parse::<u64>() {
            // The timer exists in the session; the registry's index of timers is another key (another slot), so
            // a failure here is repaired by the reconcile.
            self.worker.schedule(&self.session_id, next_due).await?;
        }
        Ok(())
    }

    /// Links a task just opened to its tokens; returns the registrations and the run as the runner must see
    /// it.
    pub(super) async fn opened(
        &self,
        task_id: &Arc<str>,
        linked: Vec<SubagentTaskToken>,
        mut opened: OpenedRun,
    ) -> Result<(Vec<CancelCallback>, OpenedRun), RedisTrackerError> {
        let (links, fired) = self.link(task_id, &opened.run, linked).await?;
        // A link that had already fired cancelled the task after its start: the runner must get it cancelled
        // (the hold reads that cancel's details from Redis, unless the task began cancelled).
        if fired {
            opened.status = SubagentStatus::Cancelled.as_str().to_owned();
        }
        Ok((links, opened))
    }

    /// Cancels the task's `run` (cause `linked`, with the token's reason) when any of `tokens` fires: at once for
    /// one that has. Returns the registrations, for the runner's handle to remove when the task ends, and whether
    /// a token had fired.
    pub(super) async fn link(
        &self,
        task_id: &Arc<str>,
        run: &str,
        tokens: Vec<SubagentTaskToken>,
    ) -> Result<(Vec<CancelCallback>, bool), RedisTrackerError> {
        let mut links = Vec::with_capacity(tokens.len());
        for token in tokens {
            if token.is_cancelled() {
                self.cancel_linked(task_id, run, token.reason().as_deref())
                    .await?;
                return Ok((links, true));
            }
            let (session, task_id, source) = (self.clone(), task_id.clone(), token.clone());
            let run: Arc<str> = Arc::from(run);
            links.push(token.on_cancel(move || {
                // Runs in whatever thread fired the token: the cancel goes to the registry's runtime.
                let runtime = session.worker.runtime.clone();
                runtime.spawn(async move {
                    let reason = source.reason();
                    // Lost only if Redis is unreachable now; the runner's own token has fired regardless.
                    let _ = session
                        .cancel_linked(&task_id, &run, reason.as_deref())
                        .await;
                });
            }));
        }
        Ok((links, false))
    }
}
