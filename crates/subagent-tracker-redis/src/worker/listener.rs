//! How a cancel made anywhere reaches the tokens of this process's runs: a push on the worker's channel
//! (prompt), and a reconcile of every run the worker holds, after each (re)subscription and on a timer
//! (nothing lost). The reconcile also ends the orphans of calls whose reply never came.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use subagent_tracker::{CancelCause, WaitForHandlers};

use super::{lock, RunKey, Worker};
use crate::connection::Client;
use crate::store;
use crate::RedisTrackerError;

/// How many notifications for runs this worker does not know (yet) it keeps, for a start whose reply races
/// the cancel's notification.
const UNMATCHED_NOTIFICATIONS: usize = 1024;

/// How long the listener waits before it reconnects to a server that dropped it.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// The error of a task whose start or claim took effect in Redis but whose runner never got its handle (the
/// reply was lost).
pub const ORPHANED_RUN_ERROR: &str =
    "the task's start took effect but its runner never got the handle (the reply was lost)";

impl Worker {
    /// Compares `runs` with Redis and brings each mirror in line: a cancel, a resume or an end by id made there
    /// and missed here is applied, and the handlers of cancels are reported done.
    pub(crate) async fn reconcile(&self, runs: Vec<RunKey>) -> Result<(), RedisTrackerError> {
        let mut connection = self.connection.clone();
        for (session_id, runs) in by_session(runs) {
            let args = run_arguments(&runs);
            let key = self.keys.session(&session_id);
            let statuses: Vec<Vec<String>> =
                store::call(&mut connection, "status", &[&key], &args).await?;
            if self.mirrors.get(&session_id).is_none() {
                continue;
            }
            let mut applied = Vec::new();
            for (run, status) in runs.iter().zip(statuses) {
                match status.as_slice() {
                    [status, resume_value, pauses, ..] if status == "running" => {
                        self.apply_resume(run, pauses, resume_value);
                    }
                    [status, ..] if matches!(status.as_str(), "completed" | "failed") => {
                        self.apply_end(run);
                    }
                    [status, reason, origin, cause, handling]
                        if status == "cancelled" && lock(&self.runs).held.contains(run) =>
                    {
                        let cause = CancelCause::from_name(cause).unwrap_or(CancelCause::Requested);
                        let handlers = self.apply_cancel(run, reason, cause, origin);
                        if handling == "1" {
                            applied.push((run.clone(), handlers));
                        }
                    }
                    _ => {}
                }
            }
            self.report_handled(applied).await;
        }
        Ok(())
    }

    /// Ends the runs Redis records as this process's that it neither holds nor has a call under way for: their
    /// start or claim took effect, but the reply was lost, so no runner will ever end them. Only sessions where
    /// a call went unanswered are looked at; runs younger than twice the call timeout may still have their
    /// reply on the way, and are left for a later look.
    async fn end_orphans(&self) -> Result<(), RedisTrackerError> {
        let grace = self.options.timeout * 2;
        let unsettled: Vec<(Arc<str>, Vec<Arc<str>>)> = {
            let runs = lock(&self.runs);
            let mut held: HashMap<&Arc<str>, Vec<Arc<str>>> = HashMap::new();
            for run in &runs.held {
                held.entry(&run.session_id)
                    .or_default()
                    .push(run.task_id.clone());
            }
            runs.sessions
                .iter()
                .filter(|(_, session)| session.unsettled_since.is_some())
                .map(|(session_id, session)| {
                    let mut kept = held.remove(session_id).unwrap_or_default();
                    kept.extend(session.in_flight.iter().cloned());
                    (session_id.clone(), kept)
                })
                .collect()
        };
        let grace_ms = grace.as_millis().to_string();
        let mut connection = self.connection.clone();
        for (session_id, kept) in unsettled {
            let looked_at = Instant::now();
            let mut args: Vec<&str> = vec![&self.process, &grace_ms, ORPHANED_RUN_ERROR];
            args.extend(kept.iter().map(|task_id| &**task_id));
            let [_ended, young]: [i64; 2] = store::call(
                &mut connection,
                "orphans",
                &[&self.keys.session(&session_id)],
                &args,
            )
            .await?;
            let mut runs = lock(&self.runs);
            if let Some(session) = runs.sessions.get_mut(&session_id) {
                // Settled once no unheld run is left and no unanswered call is younger than the grace: a call
                // that took effect later than that would have been refused by its own timeout.
                let settled = young == 0
                    && session
                        .unsettled_since
                        .is_some_and(|since| looked_at.duration_since(since) > grace);
                if settled {
                    session.unsettled_since = None;
                }
            }
        }
        Ok(())
    }

    /// Applies a cancel made in Redis to the mirror of `run`, and returns the wait for the cancel handlers that
    /// it (or an earlier cancel) ran here: `None` when the mirror no longer holds the run.
    fn apply_cancel(
        &self,
        run: &RunKey,
        reason: &str,
        cause: CancelCause,
        origin: &str,
    ) -> Option<WaitForHandlers> {
        let mirror = self.mirrors.get(&run.session_id)?;
        // Taken before the cancel: the run may end, and leave the mirror, as soon as its token fires.
        let handlers = mirror
            .tracker
            .token(&run.task_id)
            .ok()
            .map(|token| token.wait_for_handlers());
        mirror
            .tracker
            .apply_remote_cancel(&run.task_id, reason, cause, origin);
        handlers
    }

    /// Reports to Redis, once their handlers are done, the cancels applied here (contract §3, cancel and wait):
    /// one call per session. A report that fails is made again by a later reconcile, which finds the runs'
    /// marks still set.
    pub(super) async fn report_handled(&self, applied: Vec<(RunKey, Option<WaitForHandlers>)>) {
        let mut done = Vec::with_capacity(applied.len());
        for (run, handlers) in applied {
            if let Some(handlers) = handlers {
                handlers.await;
            }
            done.push(run);
        }
        let mut connection = self.connection.clone();
        for (session_id, runs) in by_session(done) {
            let args = run_arguments(&runs);
            let key = self.keys.session(&session_id);
            let _: Result<i64, _> = store::call(&mut connection, "handled", &[&key], &args).await;
        }
    }

    /// A notification that run `run` was cancelled in Redis, with the cancel's details, or resumed, or ended.
    /// Returns, for a cancel applied here, the run and the wait for its handlers, to report once they are done.
    fn notified(&self, notification: Notification) -> Option<(RunKey, Option<WaitForHandlers>)> {
        if notification.cause == ENDED_CAUSE {
            self.apply_end(&notification.run);
            return None;
        }
        if notification.cause == RESUME_CAUSE {
            // The value travels as the reason, and the number of the pause it ends as the origin.
            self.apply_resume(
                &notification.run,
                &notification.origin,
                &notification.reason,
            );
            return None;
        }
        let run = notification.run;
        {
            let mut runs = lock(&self.runs);
            if !runs.held.contains(&run) {
                if runs.unmatched.len() == UNMATCHED_NOTIFICATIONS {
                    runs.unmatched.pop_front();
                }
                runs.unmatched.push_back(run);
                return None;
            }
        }
        let cause = CancelCause::from_name(&notification.cause).unwrap_or(CancelCause::Requested);
        let handlers = self.apply_cancel(&run, &notification.reason, cause, &notification.origin);
        Some((run, handlers))
    }
}

/// `runs` grouped by their session, for one call per session.
fn by_session(runs: Vec<RunKey>) -> HashMap<Arc<str>, Vec<RunKey>> {
    let mut grouped: HashMap<Arc<str>, Vec<RunKey>> = HashMap::new();
    for run in runs {
        grouped.entry(run.session_id.clone()).or_default().push(run);
    }
    grouped
}

/// The arguments that name `runs` to a function: each run's task id, then its run.
fn run_arguments(runs: &[RunKey]) -> Vec<&str> {
    runs.iter()
        .flat_map(|run| [&*run.task_id, run.run.as_str()])
        .collect()
}

/// The cause a notification of a resume carries in a cancel's place (`stv2_resume`).
const RESUME_CAUSE: &str = "resume";

/// The cause a notification of a paused run's end by id carries in a cancel's place (`stv2_end`).
const ENDED_CAUSE: &str = "ended";

/// A cancel of a run this worker executes, as the functions publish it (or a resume, in its framing).
struct Notification {
    run: RunKey,
    reason: String,
    origin: String,
    cause: String,
}

/// Receives the worker's notifications, resubscribing (and reconciling what it may have missed) whenever the
/// server drops the subscription.
pub(super) async fn listen(worker: Weak<Worker>, client: Client) {
    loop {
        let channel = match worker.upgrade() {
            Some(worker) => worker.keys.worker_channel(&worker.process),
            None => return,
        };
        if let Ok(mut messages) = client.subscribe(&channel).await {
            if let Some(worker) = worker.upgrade() {
                let _ = worker.reconcile(worker.held_runs()).await;
            }
            while let Some(message) = messages.next().await {
                let Some(worker) = worker.upgrade() else {
                    return;
                };
                let applied: Vec<_> = parse_notifications(&message)
                    .into_iter()
                    .filter_map(|notification| worker.notified(notification))
                    .collect();
                if !applied.is_empty() {
                    // Reported in a task of its own: handlers may take long, and notifications keep coming.
                    let reporter = worker.clone();
                    tokio::spawn(async move { reporter.report_handled(applied).await });
                }
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// The runs a notification names: six fields each, every field written `<byte length>:<bytes>` (`fields_message`
/// in `lua/includes/cascade.lua`), the session as its keys encode it. A malformed message yields what came before the fault.
fn parse_notifications(message: &redis::Msg) -> Vec<Notification> {
    let Ok(payload) = message.get_payload::<Vec<u8>>() else {
        return Vec::new();
    };
    let mut rest = payload.as_slice();
    let mut field = || -> Option<String> {
        let colon = rest.iter().position(|byte| *byte == b':')?;
        let length: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        let value = rest.get(colon + 1..colon + 1 + length)?;
        rest = &rest[colon + 1 + length..];
        String::from_utf8(value.to_vec()).ok()
    };
    let mut notifications = Vec::new();
    while let Some(session_id) = field() {
        let mut next = || -> Option<Notification> {
            Some(Notification {
                run: RunKey {
                    session_id: Arc::from(store::decode_session_id(&session_id)?),
                    task_id: Arc::from(field()?),
                    run: field()?,
                },
                reason: field()?,
                origin: field()?,
                cause: field()?,
            })
        };
        match next() {
            Some(notification) => notifications.push(notification),
            None => break,
        }
    }
    notifications
}

/// One reconcile: the held runs' statuses, orphans, lost timers, and the sessions this worker is done with.
pub(super) async fn reconcile(worker: Arc<Worker>) {
    let _ = worker.reconcile(worker.held_runs()).await;
    let _ = worker.end_orphans().await;
    let _ = worker.reschedule_timers().await;
    let _ = worker.forget_idle_sessions().await;
}
