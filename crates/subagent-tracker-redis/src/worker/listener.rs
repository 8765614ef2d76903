//! How a cancel made anywhere reaches the tokens of this process's runs: a push on the worker's channel
//! (prompt), and a reconcile of every run the worker holds, after each (re)subscription and on a timer
//! (nothing lost). The reconcile also ends the orphans of calls whose reply never came.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use subagent_tracker::{CancelCause, WaitForHandlers};

use super::lease::{LEASE_LOST_REASON, WORKER_LOST_ERROR};
use super::{lock, RunKey, Worker};
use crate::connection::Client;
use crate::store;
use crate::RedisTrackerError;

/// How many notifications for runs this worker does not know (yet) it keeps, for a start whose reply races
/// the cancel's notification.
const UNMATCHED_NOTIFICATIONS: usize = 1024;

/// The cancel reason of a run whose session's keys are gone from Redis though nobody closed it (evicted): the
/// runner's work can no longer be recorded, so it stops.
pub const SESSION_LOST_REASON: &str =
    "the session was lost: its keys are gone from Redis though nobody closed it (evicted)";

/// How long the listener waits before it reconnects to a server that dropped it.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// The error of a task recorded as run by a worker process that holds no runner of it: the reply to its start or
/// claim never came, or Redis lost the task's end and the run is back (contract §21).
pub const ORPHANED_RUN_ERROR: &str =
    "no runner of its worker process holds the task: the reply to its start or \
     claim was lost, or Redis lost the task's end (a restart from older state, a failover)";

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
            let lost = statuses
                .iter()
                .any(|status| status.len() == 1 && status[0] == "lost")
                && self.is_session_lost(&session_id).await;
            if lost {
                // What is left of the runs it held goes now (nothing indexes them any more); the rest is the
                // sweep's.
                let _: Result<i64, _> =
                    store::call(&mut connection, "drop_lost", &[&key], &args).await;
                // Listed, if eviction took it from the index too, so that the sweep finds what is left of it; an
                // entry still there keeps its time, so that the session goes idle.
                let _: Result<i64, _> = redis::cmd("ZADD")
                    .arg(self.keys.sessions())
                    .arg("NX")
                    .arg(store::epoch_millis(std::time::SystemTime::now()))
                    .arg(&*session_id)
                    .query_async(&mut connection)
                    .await;
            }
            let mut cancels = Vec::new();
            // Runs whose token fires with the others' before their mirror ends.
            let mut ended = Vec::new();
            for (run, status) in runs.iter().zip(statuses) {
                match status.as_slice() {
                    [status] if status == "lost" && lost => {
                        let cancel = RemoteCancel::of_this_process(
                            run,
                            SESSION_LOST_REASON,
                            CancelCause::Session,
                        );
                        cancels.push((run.clone(), cancel));
                        ended.push(run);
                    }
                    [status, resume_value, pauses, ..] if status == "running" => {
                        self.apply_resume(run, pauses, resume_value);
                    }
                    [status, .., error] if status == "failed" && error == WORKER_LOST_ERROR => {
                        // A reaper took this live process for dead (Redis lost its lease renewals): its runner
                        // stops as a fenced one would (contract §21), then the mirror ends.
                        cancels.push((run.clone(), RemoteCancel::lease_lost(run)));
                        ended.push(run);
                    }
                    [status, ..] if matches!(status.as_str(), "completed" | "failed") => {
                        self.apply_end(run);
                    }
                    [status, reason, origin, cause, handling, _]
                        if status == "cancelled" && lock(&self.runs).held.contains(run) =>
                    {
                        let cancel = RemoteCancel {
                            reason: reason.clone(),
                            origin: origin.clone(),
                            cause: CancelCause::from_name(cause).unwrap_or(CancelCause::Requested),
                            handling: handling == "1",
                        };
                        cancels.push((run.clone(), cancel));
                    }
                    _ => {}
                }
            }
            let applied = self
                .apply_cancels(cancels)
                .into_iter()
                .filter(|(_, handling, _)| *handling)
                .map(|(run, _, handlers)| (run, handlers))
                .collect();
            for run in ended {
                self.apply_end(run);
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
            let key = self.keys.session(&session_id);
            let kept: std::collections::HashSet<Arc<str>> = kept.into_iter().collect();
            // The process's unheld runs still younger than the grace: left for a later look.
            let mut young = 0;
            let mut cursor = String::new();
            loop {
                let page: Vec<String> = store::call(
                    &mut connection,
                    "orphans",
                    &[&key],
                    &[&self.process, &cursor],
                )
                .await?;
                let (next, runs) = page
                    .split_first()
                    .ok_or_else(|| RedisTrackerError::Protocol(Arc::from("stv2_orphans")))?;
                let mut orphans = Vec::new();
                for run in runs.chunks_exact(3) {
                    if kept.contains(run[0].as_str()) {
                        continue;
                    }
                    if run[2]
                        .parse::<u128>()
                        .is_ok_and(|age| age > grace.as_millis())
                    {
                        orphans.push([run[0].as_str(), run[1].as_str()]);
                    } else {
                        young += 1;
                    }
                }
                // Each end is a run's whole end (its event, its group's rules): a few per call.
                for chunk in orphans.chunks(ORPHANS_PER_CALL) {
                    let mut args: Vec<&str> = vec![&self.process, &grace_ms, ORPHANED_RUN_ERROR];
                    args.extend(chunk.iter().flatten());
                    let (_ended, walks_due): (i64, String) =
                        store::call(&mut connection, "end_orphans", &[&key], &args).await?;
                    self.schedule_walks(&session_id, &walks_due).await?;
                }
                if next.is_empty() {
                    break;
                }
                cursor.clone_from(next);
            }
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

    /// After Redis lost writes of this process (a restart from older state, a failover to a lagging replica),
    /// what it did may be undone: a run it ended may be running again with nobody to end it, and a run it holds
    /// may have been reaped. Every session that this process has business with, or that Redis records it as
    /// running tasks in, goes to the orphan check (contract §§2, 21), and the held runs are reconciled at once.
    pub(super) async fn recover_lost_writes(&self) -> Result<(), RedisTrackerError> {
        let announced: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.announced(&self.process))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.connection.clone())
            .await?;
        {
            let now = Instant::now();
            let mut runs = lock(&self.runs);
            let known: Vec<Arc<str>> = runs.sessions.keys().cloned().collect();
            for session_id in announced.into_iter().map(Arc::from).chain(known) {
                runs.sessions.entry(session_id).or_default().unsettled_since = Some(now);
            }
        }
        self.reconcile(self.held_runs()).await?;
        self.end_orphans().await
    }

    /// Applies cancels to the mirrors of their runs: those of one session together, so that no waiter or
    /// callback of one runs before the others' tokens have fired (a cascade reaches a process's runs in one
    /// message). Returns each run, whether Redis waits for its handlers' report (`RemoteCancel::handling`), and
    /// the wait for the cancel handlers that this (or an earlier) cancel ran here: `None` when the mirror no
    /// longer holds the run.
    pub(super) fn apply_cancels(
        &self,
        cancels: Vec<(RunKey, RemoteCancel)>,
    ) -> Vec<(RunKey, bool, Option<WaitForHandlers>)> {
        let mut applied = Vec::with_capacity(cancels.len());
        let mut by_session: HashMap<Arc<str>, Vec<(RunKey, RemoteCancel)>> = HashMap::new();
        for (run, cancel) in cancels {
            by_session
                .entry(run.session_id.clone())
                .or_default()
                .push((run, cancel));
        }
        for (session_id, cancels) in by_session {
            let Some(mirror) = self.mirrors.get(&session_id) else {
                applied.extend(
                    cancels
                        .into_iter()
                        .map(|(run, cancel)| (run, cancel.handling, None)),
                );
                continue;
            };
            // Taken before the cancels: a run may end, and leave the mirror, as soon as its token fires.
            for (run, cancel) in &cancels {
                let handlers = mirror
                    .tracker
                    .token(&run.task_id)
                    .ok()
                    .map(|token| token.wait_for_handlers());
                applied.push((run.clone(), cancel.handling, handlers));
            }
            mirror
                .tracker
                .apply_remote_cancels(cancels.iter().map(|(run, cancel)| {
                    (
                        &*run.task_id,
                        cancel.reason.as_str(),
                        cancel.cause,
                        cancel.origin.as_str(),
                    )
                }));
        }
        applied
    }

    /// Fires the token of `run`, which this process has just begun to hold, with the cancel that the reply of
    /// its start or claim carried; reports its handlers done, in a task of its own, when Redis waits for that.
    pub(crate) fn apply_cancel_from_reply(
        worker: &Arc<Worker>,
        run: &RunKey,
        cancel: RemoteCancel,
    ) {
        let applied: Vec<_> = worker
            .apply_cancels(vec![(run.clone(), cancel)])
            .into_iter()
            .filter(|(_, handling, _)| *handling)
            .map(|(run, _, handlers)| (run, handlers))
            .collect();
        worker.report_handled_apart(applied);
    }

    /// Reports to Redis, once their handlers are done, the cancels applied here (contract §3, cancel and wait):
    /// each run as soon as its own handlers are done, those done together in one call per session, so that a
    /// slow handler holds up no other run's report. A report that fails is made again by a later reconcile,
    /// which finds the runs' marks still set.
    pub(super) async fn report_handled(&self, applied: Vec<(RunKey, Option<WaitForHandlers>)>) {
        let mut done = Vec::with_capacity(applied.len());
        let mut waiting = tokio::task::JoinSet::new();
        for (run, handlers) in applied {
            match handlers {
                None => done.push(run),
                Some(handlers) => {
                    waiting.spawn(async move {
                        handlers.await;
                        run
                    });
                }
            }
        }
        loop {
            if !done.is_empty() {
                self.report_done(std::mem::take(&mut done)).await;
            }
            let Some(finished) = waiting.join_next().await else {
                return;
            };
            done.extend(finished.ok());
            while let Some(finished) = waiting.try_join_next() {
                done.extend(finished.ok());
            }
        }
    }

    /// Clears the marks of `done`, runs whose handlers are done: one call per session.
    async fn report_done(&self, done: Vec<RunKey>) {
        let mut connection = self.connection.clone();
        for (session_id, runs) in by_session(done) {
            let args = run_arguments(&runs);
            let key = self.keys.session(&session_id);
            let _: Result<i64, _> = store::call(&mut connection, "handled", &[&key], &args).await;
        }
    }

    /// Applies what the reply of a call this process made told it: the message the call also pushed, so that a
    /// cancel, a resume or an end by id returns with this process's own runs told (contract §20, as in memory)
    /// however late the push comes. A message applied twice changes nothing the second time: a fired token
    /// stays fired, a resume or an end applies to the pause it ended or a run still held, and a run's handlers
    /// are reported done twice at most. A run not held is kept for its start (`unmatched`) only while a start of
    /// its task is under way here: otherwise it has ended, and the push, if it finds it so, keeps it.
    pub(crate) fn apply_told(self: &Arc<Self>, payload: &[u8]) {
        self.apply_notifications(payload, false);
    }

    /// Applies one message of notifications (see [`notified`](Self::notified)), a push when `pushed`. Reports
    /// the handlers in a task of its own: they may take long, and notifications keep coming.
    fn apply_notifications(self: &Arc<Self>, payload: &[u8], pushed: bool) {
        if payload.is_empty() {
            return;
        }
        let applied = self.notified(parse_notifications(payload), pushed);
        self.report_handled_apart(applied);
    }

    /// Reports the handlers of `applied` done once they are, in a task of its own: they may take long, and the
    /// caller goes on.
    fn report_handled_apart(self: &Arc<Self>, applied: Vec<(RunKey, Option<WaitForHandlers>)>) {
        if !applied.is_empty() {
            let reporter = self.clone();
            self.runtime
                .spawn(async move { reporter.report_handled(applied).await });
        }
    }

    /// The notifications of one message: runs cancelled in Redis, with each cancel's details, or resumed, or
    /// ended. The cancels apply together (see [`apply_cancels`](Self::apply_cancels)). Returns, for each cancel
    /// applied here, the run and the wait for its handlers, to report once they are done. A cancel of a run not
    /// held yet is kept for the start whose reply races it: every one a push brings, and those a reply brings
    /// while a call of the task is under way.
    fn notified(
        &self,
        notifications: Vec<Notification>,
        pushed: bool,
    ) -> Vec<(RunKey, Option<WaitForHandlers>)> {
        let mut cancels = Vec::new();
        for notification in notifications {
            if notification.cause == ENDED_CAUSE {
                self.apply_end(&notification.run);
                continue;
            }
            if notification.cause == RESUME_CAUSE {
                // The value travels as the reason, and the number of the pause it ends as the origin.
                self.apply_resume(
                    &notification.run,
                    &notification.origin,
                    &notification.reason,
                );
                continue;
            }
            let run = notification.run;
            {
                let mut runs = lock(&self.runs);
                if !runs.held.contains(&run) {
                    let starting = pushed
                        || runs
                            .sessions
                            .get(&run.session_id)
                            .is_some_and(|session| session.in_flight.contains(&run.task_id));
                    if !starting {
                        continue;
                    }
                    if runs.unmatched.len() == UNMATCHED_NOTIFICATIONS {
                        runs.unmatched.pop_front();
                    }
                    runs.unmatched.push_back(run);
                    continue;
                }
            }
            let cancel = RemoteCancel {
                cause: CancelCause::from_name(&notification.cause)
                    .unwrap_or(CancelCause::Requested),
                reason: notification.reason,
                origin: notification.origin,
                handling: true,
            };
            cancels.push((run, cancel));
        }
        self.apply_cancels(cancels)
            .into_iter()
            .map(|(run, _, handlers)| (run, handlers))
            .collect()
    }
}

/// At most this many orphans are ended in one call (`stv2_end_orphans`).
const ORPHANS_PER_CALL: usize = 32;

/// At most this many runs go in one call that names runs (a reconcile, a report of handlers done), so that no
/// call holds the server long however many runs a process holds in one session.
const RUNS_PER_CALL: usize = 50;

/// `runs` grouped by their session, in groups of at most `RUNS_PER_CALL`, for one call each.
fn by_session(runs: Vec<RunKey>) -> Vec<(Arc<str>, Vec<RunKey>)> {
    let mut grouped: HashMap<Arc<str>, Vec<RunKey>> = HashMap::new();
    for run in runs {
        grouped.entry(run.session_id.clone()).or_default().push(run);
    }
    let mut calls = Vec::new();
    for (session_id, runs) in grouped {
        // Each run moved once: a process may hold a hundred thousand runs of one session.
        let mut runs = runs.into_iter().peekable();
        while runs.peek().is_some() {
            calls.push((
                session_id.clone(),
                runs.by_ref().take(RUNS_PER_CALL).collect(),
            ));
        }
    }
    calls
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

/// A cancel to apply to a run of this process: made in Redis (a notification, a reconcile, the reply of a start
/// or a claim), or decided here about its own runs (a lost lease, a lost session).
pub(crate) struct RemoteCancel {
    pub(crate) reason: String,
    pub(crate) origin: String,
    pub(crate) cause: CancelCause,
    /// Redis waits for this process to report the cancel's handlers done (`stv2_handled`).
    pub(crate) handling: bool,
}

impl RemoteCancel {
    /// A cancel this process decides about its own run, with the run as its origin.
    pub(crate) fn of_this_process(run: &RunKey, reason: &str, cause: CancelCause) -> RemoteCancel {
        RemoteCancel {
            reason: reason.to_owned(),
            origin: run.task_id.to_string(),
            cause,
            handling: false,
        }
    }

    /// The fence's cancel (contract §21): cause `lease`, reason [`LEASE_LOST_REASON`].
    pub(crate) fn lease_lost(run: &RunKey) -> RemoteCancel {
        RemoteCancel::of_this_process(run, LEASE_LOST_REASON, CancelCause::Lease)
    }
}

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
    let mut resubscribed = false;
    loop {
        let channel = match worker.upgrade() {
            Some(worker) => worker.keys.worker_channel(&worker.process),
            None => return,
        };
        if let Ok(mut messages) = client.subscribe(&channel).await {
            if let Some(worker) = worker.upgrade() {
                // A subscription that dropped may mean a server that restarted, or a failover: what Redis
                // holds now may be older than what this process did.
                let _ = if resubscribed {
                    worker.recover_lost_writes().await
                } else {
                    worker.reconcile(worker.held_runs()).await
                };
            }
            resubscribed = true;
            while let Some(message) = messages.next().await {
                let Some(worker) = worker.upgrade() else {
                    return;
                };
                if let Ok(payload) = message.get_payload::<Vec<u8>>() {
                    worker.apply_notifications(&payload, true);
                }
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// The runs a notification names: six fields each, every field written `<byte length>:<bytes>` (`fields_message`
/// in `lua/includes/cascade.lua`), the session as its keys encode it. A malformed message yields what came before the fault.
fn parse_notifications(payload: &[u8]) -> Vec<Notification> {
    let mut rest = payload;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(session_id: &str, count: usize) -> Vec<RunKey> {
        (0..count)
            .map(|index| RunKey {
                session_id: Arc::from(session_id),
                task_id: Arc::from(format!("t{index}")),
                run: index.to_string(),
            })
            .collect()
    }

    /// A process that holds many runs in one session names them in calls of at most `RUNS_PER_CALL`, every run
    /// once.
    #[test]
    fn runs_go_to_the_server_in_calls_of_a_bounded_size() {
        let mut all = runs("big", 2 * RUNS_PER_CALL + 7);
        all.extend(runs("small", 3));
        let calls = by_session(all);
        let mut sizes: Vec<(String, usize)> = calls
            .iter()
            .map(|(session_id, runs)| (session_id.to_string(), runs.len()))
            .collect();
        sizes.sort();
        assert_eq!(
            sizes,
            [
                ("big".to_owned(), 7),
                ("big".to_owned(), RUNS_PER_CALL),
                ("big".to_owned(), RUNS_PER_CALL),
                ("small".to_owned(), 3)
            ]
        );
        let named: std::collections::HashSet<_> = calls
            .iter()
            .flat_map(|(_, runs)| runs.iter().map(|run| run.task_id.clone()))
            .collect();
        assert_eq!(named.len(), 2 * RUNS_PER_CALL + 7);
    }
}
