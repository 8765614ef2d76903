//! One session kept in Redis, seen from one process.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use subagent_tracker::{
    check_batch_ends, generate_id, restored_snapshot, validate_task_id, CancelCallback,
    CancelCause, ClaimProblem, EndTarget, RecordedEvent, SubagentEventKind, SubagentStatus,
    SubagentTaskSnapshot, SubagentTaskToken, TaskEnd, TaskFailure, TaskFilter, TaskStart,
    TrackerError, BATCH_REFUSED_REASON, DEADLINE_REASON, DEFAULT_CANCEL_REASON,
};

use crate::coalesce::{CoalescedCalls, MAX_ITEMS_PER_CALL};
use crate::mirrors::Mirror;
use crate::session_state::{session_state, SessionState};
use crate::store::{self, epoch_millis, TaskFields};
use crate::worker::{RemoteCancel, RunKey, SessionCall, Worker};
use crate::{RedisEventSubscription, RedisTaskHandle, RedisTrackerError};

/// The most tasks one call of `stv2_open_batch` opens: a batch of more goes as several calls, checked first.
pub const OPEN_BATCH_STEP: usize = 32;

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

/// The most items of a walk's frontier one call of `stv2_handling` takes (`HANDLING_STEP` in
/// `lua/functions/handling.lua`): a call reads that many tasks or children sets, whatever the size of the tree.
const HANDLING_STEP: usize = 32;

/// The most tasks one page of a listing reads (`stv2_list`): a page's call stays short.
pub const MAX_PAGE: usize = 100;

/// The reason a local mirror run ends with when Redis says its run is over and a new one takes its id.
const SUPERSEDED: &str = "superseded by a new run of the task in Redis";

/// A session kept in Redis: every process that opens it sees the same tasks, and the rules of the in-memory
/// tracker hold across all of them (the transitions are functions that run atomically on the server).
///
/// An object belongs to one incarnation of its session id: the one that was live when the registry handed it
/// out. Once that incarnation has ended (closed with every task finished and its id opened anew, swept after
/// `session_ttl` idle, or lost with a server that restarted empty), its transitions and queries fail with
/// [`TrackerError::SessionClosed`], and its runners' ends return false.
///
/// Cheap to clone. Every method is one round trip to Redis, except those that start or claim a run, which also
/// set up the run's local token.
#[derive(Clone)]
pub struct RedisSession {
    worker: Arc<Worker>,
    session_id: Arc<str>,
    key: Arc<str>,
    /// The incarnation this object belongs to (the session's first run number).
    incarnation: Arc<str>,
    max_finished_tasks: usize,
    /// The in-memory mirror of this worker's runs in the session: their tokens.
    mirror: Arc<Mirror>,
    /// The incarnation's starts and ends in this process, coalesced (`coalesce.rs`).
    calls: Arc<CoalescedCalls>,
}

/// What `open` gives: the task's id, its run and status, the links' registrations, and the call.
type Opened = (Arc<str>, OpenedRun, Vec<CancelCallback>, SessionCall);

/// What `open_batch` gives per task: its id, its run and status, and the links' registrations.
type OpenedInBatch = (Arc<str>, OpenedRun, Vec<CancelCallback>);

/// A run as the function that opened or claimed it reports it.
struct OpenedRun {
    run: String,
    status: String,
    /// The cancel the run begins with, when the reply carries it: the runner's token fires from it before the
    /// handle is handed out, with no further call that a broken connection could lose (contract §§3, 18, 20).
    cancel: Option<RemoteCancel>,
}

impl OpenedRun {
    /// From the reply's run, status, reason, origin, cause and handling flag (`open_task` in
    /// `lua/includes/open.lua`, and `stv2_claim`).
    fn from_reply([run, status, reason, origin, cause, handling]: [String; 6]) -> OpenedRun {
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
struct Opening {
    task_id: Arc<str>,
    parent_id: Option<String>,
    linked: Vec<SubagentTaskToken>,
    reserved: bool,
    /// A deadline or a claim timeout: the registry's index of timers must learn of it.
    timed: bool,
    /// The task as `stv2_open` and `stv2_open_batch` take it (`opening_at` in `lua/includes/open.lua`).
    arguments: Vec<String>,
}

/// How a runner's end is written in Redis.
pub(crate) enum Outcome<'a> {
    Completed(Option<&'a str>),
    Failed(&'a TaskFailure),
    /// The runner stopped on a cancel (one of its own, with this reason, if the store has not seen one).
    Stopped(Option<&'a str>),
    /// The handle was dropped without an end.
    Dropped,
}

impl RedisSession {
    pub(crate) fn new(
        worker: Arc<Worker>,
        session_id: Arc<str>,
        key: String,
        state: &SessionState,
    ) -> RedisSession {
        let mirror = worker.mirrors.use_session(&session_id);
        let key: Arc<str> = Arc::from(key);
        let incarnation: Arc<str> = Arc::from(state.incarnation.as_str());
        let calls = mirror.calls(&incarnation, || {
            CoalescedCalls::new(&worker.connection, &key, &incarnation)
        });
        RedisSession {
            worker,
            session_id,
            key,
            incarnation,
            max_finished_tasks: state.max_finished_tasks,
            mirror,
            calls,
        }
    }

    /// The session's id.
    #[must_use]
    pub fn session_id(&self) -> &Arc<str> {
        &self.session_id
    }

    /// How many finished tasks the session keeps: the bound its incarnation was made with (a session that
    /// existed keeps its own). Fixed for the incarnation, so reading it never touches the network.
    #[must_use]
    pub fn max_finished_tasks(&self) -> usize {
        self.max_finished_tasks
    }

    /// Whether this object's incarnation is closed: closed by any process, or ended (closed and drained with
    /// its id opened again, swept, or lost with the server). One round trip.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn is_closed(&self) -> Result<bool, RedisTrackerError> {
        let state: Vec<String> = store::call(
            &mut self.worker.connection.clone(),
            "session",
            &[&self.key],
            &[],
        )
        .await?;
        Ok(match session_state(state)? {
            Some(state) => state.closed || *state.incarnation != *self.incarnation,
            None => true,
        })
    }

    /// True when this and `other` are the same incarnation of a session seen through the same registry.
    #[must_use]
    pub fn same_session(&self, other: &RedisSession) -> bool {
        Arc::ptr_eq(&self.worker, &other.worker)
            && self.session_id == other.session_id
            && self.incarnation == other.incarnation
    }

    /// Starts a task run by this process and returns the runner's handle (section 5 of the contract, across
    /// processes).
    ///
    /// # Errors
    /// The in-memory tracker's refusals as [`RedisTrackerError::Tracker`]; [`RedisTrackerError::Unavailable`].
    pub async fn start(
        &self,
        start: TaskStart<String>,
    ) -> Result<RedisTaskHandle, RedisTrackerError> {
        let (task_id, opened, links, call) = self.open(start, None, true).await?;
        let mut handle = self.hold(task_id, opened).await?;
        handle.keep_links(links);
        call.settle();
        Ok(handle)
    }

    /// Reserves a task for a runner in any process to claim (section 18), and returns its id. A reservation
    /// not claimed within `claim_timeout` fails.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn reserve(
        &self,
        start: TaskStart<String>,
        claim_timeout: Option<Duration>,
    ) -> Result<Arc<str>, RedisTrackerError> {
        // The links of a reservation stay until their token fires or ends: no handle here owns them.
        let (task_id, _, _links, call) = self.open(start, Some(claim_timeout), false).await?;
        call.settle();
        Ok(task_id)
    }

    /// Starts many tasks run by this process, and returns their handles in the batch's order: all of them or
    /// none (contract §22). A task may name as parent one earlier in the batch. Up to [`OPEN_BATCH_STEP`] tasks
    /// are one call; a larger batch is checked whole, then opened a part at a time.
    ///
    /// # Errors
    /// As [`start`](Self::start) for the first task refused, and [`TrackerError::DuplicateInBatch`]: each
    /// refuses the whole batch, and nothing changes in Redis, unless something changed between the check and
    /// the last part: the tasks the batch had opened are then cancelled with [`BATCH_REFUSED_REASON`] and
    /// finished.
    pub async fn start_batch(
        &self,
        starts: Vec<TaskStart<String>>,
    ) -> Result<Vec<RedisTaskHandle>, RedisTrackerError> {
        let batch = starts.into_iter().map(|start| (start, None)).collect();
        let (opened, calls) = self.open_batch(batch).await?;
        let mut handles = Vec::with_capacity(opened.len());
        for (task_id, opened, links) in opened {
            let mut handle = self.hold(task_id, opened).await?;
            handle.keep_links(links);
            handles.push(handle);
        }
        calls.into_iter().for_each(SessionCall::settle);
        Ok(handles)
    }

    /// Reserves many tasks in one round trip, each with its claim timeout, and returns their ids in the
    /// batch's order: all of them or none, as [`start_batch`](Self::start_batch).
    ///
    /// # Errors
    /// As [`start_batch`](Self::start_batch).
    pub async fn reserve_batch(
        &self,
        reservations: Vec<(TaskStart<String>, Option<Duration>)>,
    ) -> Result<Vec<Arc<str>>, RedisTrackerError> {
        let batch = reservations
            .into_iter()
            .map(|(start, claim_timeout)| (start, Some(claim_timeout)))
            .collect();
        let (opened, calls) = self.open_batch(batch).await?;
        calls.into_iter().for_each(SessionCall::settle);
        Ok(opened.into_iter().map(|(task_id, _, _)| task_id).collect())
    }

    /// A start (`reservation` `None`) or a reservation (with its claim timeout, if any). Returns the task's id,
    /// run and status, the links' registrations, and the call, to settle once the caller is done with it (a
    /// start once its run is held). An error or a dropped future leaves the call unsettled: what it may have done
    /// in Redis is found by the reconcile (an orphaned run, a timer missing from the index).
    async fn open(
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
    async fn open_batch(
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
    async fn check_batch(&self, parts: &[&[Opening]]) -> Result<(), (usize, RedisTrackerError)> {
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
    async fn abandon(&self, openings: &[Opening], reply: &[String]) -> Vec<bool> {
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
    fn opening(
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
    async fn begin(&self, opening: &Opening) -> Result<SessionCall, RedisTrackerError> {
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
    async fn schedule(&self, next_due: &str) -> Result<(), RedisTrackerError> {
        if let Ok(next_due) = next_due.parse::<u64>() {
            // The timer exists in the session; the registry's index of timers is another key (another slot), so
            // a failure here is repaired by the reconcile.
            self.worker.schedule(&self.session_id, next_due).await?;
        }
        Ok(())
    }

    /// Links a task just opened to its tokens; returns the registrations and the run as the runner must see
    /// it.
    async fn opened(
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
    async fn link(
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

    /// Claims a reserved task for a runner in this process (section 18).
    ///
    /// # Errors
    /// [`TrackerError::NotReserved`] and [`TrackerError::NotClaimable`] as
    /// [`RedisTrackerError::Tracker`]; [`RedisTrackerError::Unavailable`].
    pub async fn claim(&self, task_id: &str) -> Result<RedisTaskHandle, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        let task_id: Arc<str> = Arc::from(task_id);
        let call = self
            .worker
            .begin_call(&self.session_id, &task_id, false)
            .await?;
        let args = [&*self.incarnation, &*task_id, &self.worker.process];
        let reply: Vec<String> = match self.call("claim", &args).await {
            Ok(reply) => reply,
            Err(error) => {
                let error = self.refusal(error, &task_id, None);
                if matches!(error, RedisTrackerError::Tracker(_)) {
                    call.settle();
                }
                return Err(error);
            }
        };
        let reply: [String; 6] = reply
            .try_into()
            .map_err(|_| RedisTrackerError::Protocol(Arc::from("stv2_claim")))?;
        let handle = self.hold(task_id, OpenedRun::from_reply(reply)).await?;
        call.settle();
        Ok(handle)
    }

    /// Mirrors a run this process now executes, and returns its handle.
    async fn hold(
        &self,
        task_id: Arc<str>,
        opened: OpenedRun,
    ) -> Result<RedisTaskHandle, RedisTrackerError> {
        let OpenedRun {
            run,
            status,
            cancel,
        } = opened;
        let mirror = &self.mirror.tracker;
        let local = match mirror.start(TaskStart::new().task_id(task_id.clone())) {
            Err(TrackerError::DuplicateTask { .. }) => {
                // An earlier run of this id ended in Redis while its runner here still runs.
                mirror.end(&task_id, Err(SUPERSEDED));
                mirror.start(TaskStart::new().task_id(task_id.clone()))?
            }
            started => started?,
        };
        let key = RunKey {
            session_id: self.session_id.clone(),
            task_id: task_id.clone(),
            run,
        };
        let announced = self.worker.hold(key.clone());
        // Made before any further wait: should the caller stop waiting, dropping the handle ends the run.
        let handle = RedisTaskHandle::new(self.clone(), key.clone(), local);
        if let Some(cancel) = cancel {
            // Cancelled before this run began here (under a cancelled parent, by its deadline, before its
            // claim): the reply said how, so the token fires before the runner gets it, whatever Redis does next.
            Worker::apply_cancel_from_reply(&self.worker, &key, cancel);
        } else if announced || status == SubagentStatus::Cancelled.as_str() {
            // Cancelled just after its start, with the notification first, or by a link that had fired: the
            // reconcile reads the cancel's reason, origin and cause, and fires the token before the runner gets
            // it. Should Redis fail now, the periodic reconcile fires it instead: the run exists, so its handle
            // must reach the runner.
            let _ = self.worker.reconcile(vec![key]).await;
        }
        Ok(handle)
    }

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
    async fn cancel_linked(
        &self,
        task_id: &str,
        run: &str,
        reason: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        self.cancel_with(task_id, reason, "linked", "", run).await
    }

    /// `run` "" aims at whichever run the id names now.
    async fn cancel_with(
        &self,
        task_id: &str,
        reason: Option<&str>,
        cause: &str,
        before_start: &str,
        run: &str,
    ) -> Result<bool, RedisTrackerError> {
        let reason = reason.unwrap_or(DEFAULT_CANCEL_REASON);
        let (moved, walk, due): (i64, String, String) = self
            .cancelling(
                "cancel",
                &[&self.incarnation, task_id, reason, cause, before_start, run],
                |(moved, _, _)| *moved == 1,
            )
            .await?;
        self.finish_walk(&walk, &due).await?;
        Ok(moved == 1)
    }

    /// A cancel's function. With [`RedisOptions::wait_for_replicas`](crate::RedisOptions::wait_for_replicas),
    /// it goes through the registry's replication connection followed by `WAIT` (for three quarters of the
    /// timeout, so that the answer arrives within it), and a cancel fewer replicas confirm is
    /// [`RedisTrackerError::NotReplicated`] once it has moved something (`moved` says whether it did).
    /// Takes the remaining steps of the cascade a cancel left under way (`walk`, "" for none; its timer `due`,
    /// which the registry's index learns first, so that a worker takes the steps on should this process stop
    /// taking them): a cancel returns once its cascade is done (contract §3, cascades in steps). Returns how many
    /// the steps moved, and the matching tasks they moved (a cancel by filter).
    async fn finish_walk(
        &self,
        walk: &str,
        due: &str,
    ) -> Result<(usize, Vec<String>), RedisTrackerError> {
        let (mut moved, mut matched) = (0, Vec::new());
        if walk.is_empty() {
            return Ok((moved, matched));
        }
        self.schedule(due).await?;
        loop {
            let mut reply: Vec<String> = self
                .cancelling("walk", &[&self.incarnation, walk], |_| true)
                .await?;
            if reply.len() < 2 {
                return Err(RedisTrackerError::Protocol(Arc::from("stv2_walk")));
            }
            matched.extend(reply.split_off(2));
            moved += reply[1].parse::<usize>().unwrap_or(0);
            if reply[0] == "1" {
                return Ok((moved, matched));
            }
        }
    }

    async fn cancelling<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: &[&str],
        moved: impl Fn(&T) -> bool,
    ) -> Result<T, RedisTrackerError> {
        let wanted = self.worker.options.wait_for_replicas;
        let Some(connection) = &self.worker.replication else {
            return self.transition(name, args).await;
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
        if acknowledged < wanted && moved(&answer) {
            return Err(RedisTrackerError::NotReplicated {
                wanted,
                acknowledged,
            });
        }
        Ok(answer)
    }

    /// Records the end of a task without its handle (by id, from any process). The first transition wins.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn end(
        &self,
        task_id: &str,
        outcome: Result<Option<&str>, &str>,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        match outcome {
            Ok(result) => self.end_run(task_id, "", &Outcome::Completed(result)).await,
            Err(error) => self.fail(task_id, &TaskFailure::new(error)).await,
        }
    }

    /// Records the failure of a task without its handle, with the failure's type and code if given (contract
    /// §5). The first transition wins.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn fail(
        &self,
        task_id: &str,
        failure: &TaskFailure,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        self.end_run(task_id, "", &Outcome::Failed(failure)).await
    }

    pub(crate) async fn end_run(
        &self,
        task_id: &str,
        run: &str,
        outcome: &Outcome<'_>,
    ) -> Result<bool, RedisTrackerError> {
        let item = end_item(task_id, run, outcome);
        let transitioned = match self.calls.ends.call(item, &self.worker.runtime).await {
            Ok(reply) => reply,
            // A runner's end of a run whose incarnation has ended: the run is over, and this end changed nothing.
            Err(error) if !run.is_empty() && is_gone(&error) => return Ok(false),
            Err(error) => return Err(self.refusal(self.lost_if_gone(error).await, "", None)),
        };
        Ok(transitioned == 1)
    }

    /// Ends many tasks in one round trip, in order, each on its own as its own end would (a handle's
    /// `complete` or `fail_with`, or [`end`](Self::end) and [`fail`](Self::fail) by id), and returns per end
    /// whether it moved its task (contract §22, batch ends): the first transition wins, and an unknown or
    /// finished id, or a handle whose run has ended, is false. A handle ended here reports no further end, as
    /// after its own. Batches beyond the server's call size go as several calls in the one round trip.
    ///
    /// # Errors
    /// [`TrackerError::InvalidId`] and [`TrackerError::HandleOfAnotherSession`] refuse the whole batch before
    /// any end is sent; [`TrackerError::SessionClosed`] when this object's incarnation has ended and the batch
    /// names an id (its handles' runs are over: they are released); [`RedisTrackerError::Unavailable`]: some
    /// ends may have been recorded, and ending again is safe.
    pub async fn end_batch(
        &self,
        mut ends: Vec<(EndTarget<&mut RedisTaskHandle>, TaskEnd<String>)>,
    ) -> Result<Vec<bool>, RedisTrackerError> {
        check_batch_ends(
            &self.session_id,
            &ends,
            |handle| handle.session().same_session(self),
            |handle| Arc::from(handle.task_id()),
        )?;
        let mut sent = Vec::with_capacity(ends.len());
        let mut items = Vec::with_capacity(ends.len());
        for (index, (target, end)) in ends.iter().enumerate() {
            let (task_id, run) = match target {
                // Answered by the handle, as its own later ends are.
                EndTarget::Handle(handle) if handle.has_reported_end() => continue,
                EndTarget::Handle(handle) => (handle.task_id(), handle.run()),
                EndTarget::TaskId(task_id) => (&**task_id, ""),
            };
            let outcome = match end {
                TaskEnd::Completed(result) => Outcome::Completed(result.as_deref()),
                TaskEnd::Failed(failure) => Outcome::Failed(failure),
            };
            items.push(end_item(task_id, run, &outcome));
            sent.push(index);
        }
        let mut calls = Vec::new();
        for chunk in items.chunks(MAX_ITEMS_PER_CALL) {
            let mut args: Vec<&str> = vec![&self.incarnation];
            args.extend(chunk.iter().flatten().map(String::as_str));
            calls.push((vec![&*self.key], args));
        }
        let mut connection = self.worker.connection.clone();
        let outcomes: Vec<Result<Vec<redis::Value>, RedisTrackerError>> =
            store::call_each(&mut connection, "end", &calls).await?;
        let mut walks_left = false;
        let mut moved = vec![false; ends.len()];
        let mut sent = sent.into_iter();
        let mut refusal = None;
        for (outcome, chunk) in outcomes.into_iter().zip(items.chunks(MAX_ITEMS_PER_CALL)) {
            let replies = match outcome.and_then(store::end_replies) {
                Ok((replies, left)) if replies.len() == chunk.len() => {
                    walks_left |= left;
                    replies
                }
                Ok(_) => return Err(RedisTrackerError::Protocol(Arc::from("stv2_end"))),
                // The incarnation has ended: every run of the batch is over, and no id can be ended.
                Err(error) if is_gone(&error) => {
                    refusal = Some(error);
                    vec![0; chunk.len()]
                }
                Err(error) => return Err(error),
            };
            for transitioned in replies {
                let Some(index) = sent.next() else { break };
                moved[index] = transitioned == 1;
                if let (EndTarget::Handle(handle), _) = &mut ends[index] {
                    handle.release_after_end();
                }
            }
        }
        if walks_left {
            store::finish_walks(&mut connection, &self.key, &self.incarnation).await?;
        }
        match refusal {
            Some(error)
                if ends
                    .iter()
                    .any(|(target, _)| matches!(target, EndTarget::TaskId(_))) =>
            {
                Err(self.refusal(self.lost_if_gone(error).await, "", None))
            }
            _ => Ok(moved),
        }
    }

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

    /// Records one event of another runtime's stream, as the in-memory tracker does (contract §5, event-sourced
    /// ingestion; see [`InMemorySubagentTaskTracker::record_event`](subagent_tracker::InMemorySubagentTaskTracker::record_event)),
    /// and returns whether it changed the session. A task started by an event names no worker process: its
    /// end comes as an event, from any process.
    ///
    /// # Errors
    /// As [`start`](Self::start) for a start the session refuses other than as a repeat;
    /// [`RedisTrackerError::Unavailable`].
    pub async fn record_event(
        &self,
        event: RecordedEvent<String>,
    ) -> Result<bool, RedisTrackerError> {
        match event {
            RecordedEvent::Started(start) => {
                let task_id = start
                    .given_task_id()
                    .cloned()
                    .unwrap_or_else(|| Arc::from(generate_id()));
                validate_task_id("task_id", &task_id)?;
                self.open_without_runner(start.task_id(task_id)).await
            }
            RecordedEvent::Progress {
                task_id,
                message,
                data,
            } => {
                validate_task_id("task_id", &task_id)?;
                self.record_progress(&task_id, "", &message, data.as_deref())
                    .await
            }
            RecordedEvent::Ended { task_id, outcome } => {
                validate_task_id("task_id", &task_id)?;
                match self.read(&task_id, None, true).await? {
                    Some(task) if task.finished => return Ok(false),
                    Some(_) => {}
                    // An end whose start was never seen: the task is recorded started, then ended.
                    None => {
                        self.open_without_runner(TaskStart::new().task_id(task_id.clone()))
                            .await?;
                    }
                }
                match &outcome {
                    Ok(result) => self.end(&task_id, Ok(result.as_deref())).await,
                    Err(failure) => self.fail(&task_id, failure).await,
                }
            }
        }
    }

    /// Opens a task run elsewhere: true when it opened, false when its id was retained already, live or finished
    /// (a repeat: such a start never restarts a finished run).
    async fn open_without_runner(
        &self,
        start: TaskStart<String>,
    ) -> Result<bool, RedisTrackerError> {
        match self.open(start, None, false).await {
            Ok((_, _, _links, call)) => {
                call.settle();
                Ok(true)
            }
            Err(RedisTrackerError::Tracker(TrackerError::DuplicateTask { .. })) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Resumes the task `task_id`, which its runner paused, handing the runner `value` (JSON text) wherever it
    /// runs (contract §5, pause and resume). True exactly when this call resumed it: false for an unknown id or a
    /// task not paused.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid id; [`RedisTrackerError::Unavailable`].
    pub async fn resume(
        &self,
        task_id: &str,
        value: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        let mut args = vec![&*self.incarnation, task_id];
        args.extend(value);
        let resumed: i64 = self.transition("resume", &args).await?;
        Ok(resumed == 1)
    }

    /// Records a pause of run `run`; returns its number among the run's pauses, 0 when refused.
    pub(crate) async fn pause_run(
        &self,
        task_id: &str,
        run: &str,
        reason: Option<&str>,
    ) -> Result<u64, RedisTrackerError> {
        let mut args = vec![&*self.incarnation, task_id, run];
        args.extend(reason);
        self.call("pause", &args).await
    }

    pub(crate) async fn record_escalation(
        &self,
        task_id: &str,
        run: &str,
    ) -> Result<bool, RedisTrackerError> {
        let recorded: i64 = self
            .call("escalate", &[&self.incarnation, task_id, run])
            .await?;
        Ok(recorded == 1)
    }

    pub(crate) async fn record_progress(
        &self,
        task_id: &str,
        run: &str,
        message: &str,
        data: Option<&str>,
    ) -> Result<bool, RedisTrackerError> {
        let message = subagent_tracker::kept_progress_message(message);
        let data = data.unwrap_or_default();
        let recorded: i64 = self
            .call(
                "progress",
                &[&self.incarnation, task_id, run, message, data],
            )
            .await?;
        Ok(recorded == 1)
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
        let mut reply: Vec<String> = self
            .cancelling(
                "cancel_matching",
                &[&self.incarnation, reason, &agent, &status, metadata],
                |reply: &Vec<String>| reply.len() > 2,
            )
            .await?;
        if reply.len() < 2 {
            return Err(RedisTrackerError::Protocol(Arc::from(
                "stv2_cancel_matching",
            )));
        }
        let mut moved: Vec<String> = reply.split_off(2);
        moved.extend(self.finish_walk(&reply[0], &reply[1]).await?.1);
        Ok(moved.into_iter().map(Arc::from).collect())
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

    async fn cancel_everything(
        &self,
        reason: Option<&str>,
        close: bool,
    ) -> Result<usize, RedisTrackerError> {
        let reason = reason.unwrap_or(DEFAULT_CANCEL_REASON);
        let closing = if close { "1" } else { "0" };
        // A close changes the session even when nothing was pending: it must be confirmed as a cancel is.
        let (moved, walk, due): (usize, String, String) = self
            .cancelling(
                "cancel_all",
                &[&self.incarnation, reason, closing],
                |(moved, _, _)| *moved > 0 || close,
            )
            .await?;
        Ok(moved + self.finish_walk(&walk, &due).await?.0)
    }

    /// A snapshot of the retained task `task_id`, or `None`. One round trip.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn get(
        &self,
        task_id: &str,
    ) -> Result<Option<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.read(task_id, None, false).await
    }

    /// A snapshot of run `run` of task `task_id`, or `None` once that run is not retained: evicted, or
    /// replaced by a later run of the id. A handle reads its own run this way, never a successor's.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn get_run(
        &self,
        task_id: &str,
        run: &str,
    ) -> Result<Option<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.read(task_id, Some(run), true).await
    }

    /// The retained task `task_id` (only if its current run is `run`, when given). A task older than the
    /// session's `max_finished_age` is shown only to a reader that follows that task (its handle, a wait): no
    /// query shows one, as in memory, where those readers hold the run itself.
    async fn read(
        &self,
        task_id: &str,
        run: Option<&str>,
        include_aged: bool,
    ) -> Result<Option<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        let include_aged = if include_aged { "1" } else { "" };
        let fields: Vec<String> = self
            .transition("get", &[&self.incarnation, task_id, include_aged])
            .await?;
        TaskFields::from_flat(fields)
            .filter(|fields| run.is_none_or(|run| fields.is_run(run)))
            .map(|fields| fields.snapshot(&self.session_id))
            .transpose()
    }

    /// Forgets the finished tasks that ended at least `older_than` ago, as the retention bound evicts them, and
    /// returns how many it forgot (contract §7). Pending tasks are never forgotten.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn forget_finished(&self, older_than: Duration) -> Result<usize, RedisTrackerError> {
        // In microseconds, the precision of the server's clock and of the times it records.
        let older_than_us = older_than.as_micros().to_string();
        // A bounded number per call, as many calls as it takes.
        let mut forgotten = 0;
        loop {
            let (count, more): (usize, i64) = self
                .transition("forget_finished", &[&self.incarnation, &older_than_us])
                .await?;
            forgotten += count;
            if more == 0 {
                return Ok(forgotten);
            }
        }
    }

    /// Snapshots of every retained task, in start order, read page by page (contract §6: no call holds the
    /// server long, whatever the size of the session): each task as it was at some moment while the listing
    /// paged; a task started or finished meanwhile may or may not be listed.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn tasks(&self) -> Result<Vec<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.list(false).await
    }

    /// Snapshots of the pending tasks, in start order, read page by page as [`tasks`](Self::tasks) is.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn pending(&self) -> Result<Vec<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.list(true).await
    }

    /// One page of the session's retained tasks (or, with `pending`, of its pending tasks), from `cursor` (`None`
    /// for the first page), at most `limit` of them read, and at most [`MAX_PAGE`]: the tasks, and the cursor of
    /// the next page (`None` once the listing is done). Unfinished tasks come in start order, then (for a listing
    /// of every retained task) the finished ones in the order they finished. A task that finishes while the
    /// listing pages may come twice (keep its last), and one started meanwhile may or may not come.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`]; [`TrackerError::SessionClosed`] once the incarnation has ended.
    pub async fn tasks_page(
        &self,
        pending: bool,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<SubagentTaskSnapshot<String>>, Option<String>), RedisTrackerError> {
        let cursor = cursor.unwrap_or("");
        // A cursor as `stv2_list` gives them: "<run>" for pending tasks, "l<run>" or "f<position>" for every one.
        let digits =
            |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
        let valid = cursor.is_empty()
            || if pending {
                digits(cursor)
            } else {
                cursor
                    .strip_prefix('l')
                    .or_else(|| cursor.strip_prefix('f'))
                    .is_some_and(digits)
            };
        if !valid {
            return Err(TrackerError::InvalidCursor {
                cursor: Arc::from(cursor),
            }
            .into());
        }
        let (page, next) = self.page(pending, cursor, limit).await?;
        let tasks = page
            .into_iter()
            .map(|fields| fields.snapshot(&self.session_id))
            .collect::<Result<_, _>>()?;
        Ok((tasks, next))
    }

    async fn page(
        &self,
        pending: bool,
        cursor: &str,
        limit: usize,
    ) -> Result<(Vec<TaskFields>, Option<String>), RedisTrackerError> {
        let limit = limit.clamp(1, MAX_PAGE).to_string();
        let which = if pending { "pending" } else { "all" };
        let mut listed: Vec<redis::Value> = self
            .transition("list", &[&self.incarnation, which, cursor, &limit])
            .await?;
        if listed.is_empty() {
            return Err(RedisTrackerError::Protocol(Arc::from("stv2_list")));
        }
        let protocol = |_| RedisTrackerError::Protocol(Arc::from("stv2_list"));
        let tasks = listed.split_off(1);
        let next: String = redis::from_redis_value(listed.swap_remove(0)).map_err(protocol)?;
        let tasks = tasks
            .into_iter()
            .map(redis::from_redis_value::<Vec<String>>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(protocol)?
            .into_iter()
            .filter_map(TaskFields::from_flat)
            .collect();
        Ok((tasks, (!next.is_empty()).then_some(next)))
    }

    /// Every page of a listing, each task's last snapshot, in start order.
    async fn list(
        &self,
        pending: bool,
    ) -> Result<Vec<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        let mut by_id: std::collections::HashMap<String, (u64, TaskFields)> =
            std::collections::HashMap::new();
        let mut cursor = String::new();
        loop {
            let (page, next) = self.page(pending, &cursor, MAX_PAGE).await?;
            for fields in page {
                let (Some(task_id), Some(run)) = (fields.task_id(), fields.run()) else {
                    continue;
                };
                by_id.insert(task_id, (run.parse().unwrap_or(u64::MAX), fields));
            }
            match next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        let mut listed: Vec<(u64, TaskFields)> = by_id.into_values().collect();
        listed.sort_by_key(|(run, _)| *run);
        listed
            .into_iter()
            .filter(|(_, fields)| !pending || fields.is_pending())
            .map(|(_, fields)| fields.snapshot(&self.session_id))
            .collect()
    }

    /// Subscribes to the session's lifecycle events from this moment on, whichever process makes them.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn subscribe(&self) -> Result<RedisEventSubscription, RedisTrackerError> {
        RedisEventSubscription::open(
            self.worker.client.clone(),
            self.worker.options.timeout,
            [
                self.worker.keys.events(&self.session_id),
                self.key.to_string(),
            ],
            self.session_id.clone(),
            self.incarnation.clone(),
        )
        .await
    }

    /// Waits until the task `task_id` has finished, in whatever process it runs, and returns its final
    /// snapshot. Bound it with `tokio::time::timeout`.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] (as [`RedisTrackerError::Tracker`]) for a task that is not retained;
    /// [`RedisTrackerError::Unavailable`].
    pub async fn wait_finished(
        &self,
        task_id: &str,
    ) -> Result<SubagentTaskSnapshot<String>, RedisTrackerError> {
        // Subscribed before the first look, so an end between the two is not missed.
        let mut events = self.subscribe().await?;
        loop {
            match self.read(task_id, None, true).await? {
                None => {
                    return Err(TrackerError::UnknownTask {
                        task_id: Arc::from(task_id),
                        session_id: self.session_id.clone(),
                    }
                    .into())
                }
                Some(snapshot) if snapshot.finished => return Ok(snapshot),
                Some(_) => {}
            }
            loop {
                let event = events.next().await?;
                let ended = event.kind == SubagentEventKind::Ended && &*event.task_id == task_id;
                if ended || event.kind == SubagentEventKind::Lagged {
                    break;
                }
            }
        }
    }

    /// Cancels the task `task_id` as [`cancel`](Self::cancel) does, then waits until its runner has ended and the
    /// worker processes that run the task and its descendants have reported their cancel handlers done
    /// (contract §3, cancel and wait); returns the final snapshot. A task cancelled or finished before is waited
    /// for all the same.
    ///
    /// # Errors
    /// [`RedisTrackerError::Tracker`] for an invalid or unknown id (or one no longer retained once finished);
    /// [`RedisTrackerError::Unavailable`].
    pub async fn cancel_and_wait(
        &self,
        task_id: &str,
        reason: Option<&str>,
    ) -> Result<SubagentTaskSnapshot<String>, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        self.cancel_with(task_id, reason, "requested", "", "")
            .await?;
        let finished = self.wait_finished(task_id).await?;
        // The handlers' reports come from other processes, and rarely after the runner's end: a short poll. A
        // walk of the tree takes a call per few dozen tasks, so between walks only the tasks found at work are
        // looked at again; the wait ends when a whole walk finds none.
        let mut pause = Duration::from_millis(2);
        let mut at_work = match self.cancel_work(task_id).await? {
            Some((_, at_work)) => at_work,
            None => Vec::new(),
        };
        while !at_work.is_empty() {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            let items = at_work
                .iter()
                .map(|task_id| format!("h{task_id}"))
                .collect();
            at_work = match self.walk_cancel_work(task_id, items).await? {
                Some((_, still)) if !still.is_empty() => still,
                Some(_) => match self.cancel_work(task_id).await? {
                    Some((_, at_work)) => at_work,
                    None => Vec::new(),
                },
                None => Vec::new(),
            };
        }
        Ok(self.read(task_id, None, true).await?.unwrap_or(finished))
    }

    /// Where a cancel of the task `task_id` stands: whether its runner has ended, and the ids of the task and
    /// its descendants whose cancel handlers their worker processes have yet to report done; `None` when the
    /// task is not retained. The tree is walked in calls of a bounded number of tasks each (contract §3), so a
    /// task that joins it or leaves it meanwhile is seen by the steps after.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn cancel_work(
        &self,
        task_id: &str,
    ) -> Result<Option<(bool, Vec<Arc<str>>)>, RedisTrackerError> {
        self.walk_cancel_work(task_id, VecDeque::new()).await
    }

    /// `cancel_work` from a frontier of `stv2_handling`'s items (the task itself when empty), through as many
    /// calls as the walk takes.
    async fn walk_cancel_work(
        &self,
        task_id: &str,
        mut frontier: VecDeque<String>,
    ) -> Result<Option<(bool, Vec<Arc<str>>)>, RedisTrackerError> {
        let malformed = || RedisTrackerError::Protocol(Arc::from("stv2_handling"));
        let mut at_work = Vec::new();
        loop {
            let step: Vec<String> = frontier
                .drain(..frontier.len().min(HANDLING_STEP))
                .collect();
            let mut args = vec![&*self.incarnation, task_id];
            args.extend(step.iter().map(String::as_str));
            let answer: Vec<String> = self.transition("handling", &args).await?;
            let mut answer = answer.into_iter();
            let Some(finished) = answer.next() else {
                return Ok(None);
            };
            let count: usize = answer
                .next()
                .and_then(|count| count.parse().ok())
                .ok_or_else(malformed)?;
            at_work.extend(answer.by_ref().take(count).map(|id| Arc::from(id.as_str())));
            frontier.extend(answer);
            if frontier.is_empty() {
                return Ok(Some((finished == "1", at_work)));
            }
        }
    }

    pub(crate) fn mirror(&self) -> &Arc<Mirror> {
        &self.mirror
    }

    /// The retained task `task_id` with its run, or `None` (an aged task too, as queries leave it out). One
    /// round trip.
    pub(crate) async fn read_run(
        &self,
        task_id: &str,
    ) -> Result<Option<(String, SubagentTaskSnapshot<String>)>, RedisTrackerError> {
        let fields: Vec<String> = self
            .transition("get", &[&self.incarnation, task_id, ""])
            .await?;
        let Some(fields) = TaskFields::from_flat(fields) else {
            return Ok(None);
        };
        let run = fields
            .run()
            .ok_or_else(|| RedisTrackerError::Protocol(Arc::from("a task without its run")))?;
        Ok(Some((run, fields.snapshot(&self.session_id)?)))
    }

    pub(crate) fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// Calls the session function `name` on this session.
    async fn call<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: &[&str],
    ) -> Result<T, RedisTrackerError> {
        match store::call(
            &mut self.worker.connection.clone(),
            name,
            &[&self.key],
            args,
        )
        .await
        {
            Err(error) => Err(self.lost_if_gone(error).await),
            outcome => outcome,
        }
    }

    /// `error` as it was, or [`RedisTrackerError::SessionLost`] when it says the incarnation is gone and the
    /// session was lost though nobody closed it (evicted) rather than closed and removed.
    async fn lost_if_gone(&self, error: RedisTrackerError) -> RedisTrackerError {
        if is_gone(&error) && self.worker.is_session_lost(&self.session_id).await {
            return RedisTrackerError::SessionLost {
                session_id: self.session_id.clone(),
            };
        }
        error
    }

    /// Calls a session function whose only refusal is that this object's incarnation has ended.
    async fn transition<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: &[&str],
    ) -> Result<T, RedisTrackerError> {
        self.call(name, args)
            .await
            .map_err(|error| self.refusal(error, "", None))
    }

    /// The contract's refusal that `stv2_open_batch`'s error reply `<CODE> <index>` stands for, naming the
    /// task it refused.
    fn batch_refusal<'a>(
        &self,
        error: RedisTrackerError,
        task_at: impl Fn(usize) -> Option<(&'a Arc<str>, Option<&'a str>)>,
    ) -> RedisTrackerError {
        let refused = match &error {
            RedisTrackerError::ServerError { source } => source
                .detail()
                .and_then(|detail| detail.rsplit(' ').next())
                .and_then(|index| index.parse::<usize>().ok())
                .and_then(task_at),
            _ => None,
        };
        let Some((task_id, parent_id)) = refused else {
            return self.refusal(error, "", None);
        };
        let is_repeat = matches!(&error, RedisTrackerError::ServerError { source }
            if source.code() == Some("DUPLICATE_IN_BATCH")
                || source.detail().is_some_and(|detail| detail.starts_with("DUPLICATE_IN_BATCH")));
        if is_repeat {
            return TrackerError::DuplicateInBatch {
                task_id: task_id.clone(),
            }
            .into();
        }
        self.refusal(error, task_id, parent_id)
    }

    /// The contract's refusal that a function's error reply stands for, or the error as it was.
    fn refusal(
        &self,
        error: RedisTrackerError,
        task_id: &str,
        parent_id: Option<&str>,
    ) -> RedisTrackerError {
        let RedisTrackerError::ServerError { source } = &error else {
            return error;
        };
        // The server sends a function's error reply `<CODE> <detail>` as it is, and a lone `<CODE>` as
        // `ERR <CODE>`.
        let (code, detail) = match (source.code(), source.detail()) {
            (Some("ERR"), Some(reply)) => reply.split_once(' ').unwrap_or((reply, "")),
            (Some(code), detail) => (code, detail.unwrap_or_default()),
            (None, _) => return error,
        };
        match self.refusal_of(code, detail, task_id, parent_id) {
            RedisTrackerError::Protocol(_) => error,
            refusal => refusal,
        }
    }

    /// The contract's refusal that a function's code (`DUPLICATE`, `CLOSED`, ...) and its detail stand for,
    /// naming `task_id` (and `parent_id`); a code no function sends is a protocol error.
    fn refusal_of(
        &self,
        code: &str,
        detail: &str,
        task_id: &str,
        parent_id: Option<&str>,
    ) -> RedisTrackerError {
        let session_id = self.session_id.clone();
        let task_id: Arc<str> = Arc::from(task_id);
        let refusal = match code {
            "DUPLICATE" => TrackerError::DuplicateTask {
                task_id,
                session_id,
            },
            "UNKNOWN_PARENT" => TrackerError::UnknownTask {
                task_id: Arc::from(parent_id.unwrap_or_default()),
                session_id,
            },
            "NOT_RESERVED" => TrackerError::NotReserved {
                task_id,
                session_id,
            },
            "PARENT_FINISHED" => TrackerError::ParentFinished {
                parent_id: Arc::from(parent_id.unwrap_or_default()),
                session_id,
            },
            "CLOSED" | "GONE" => TrackerError::SessionClosed { session_id },
            "CLAIMED" => TrackerError::NotClaimable {
                task_id,
                session_id,
                problem: ClaimProblem::AlreadyClaimed,
            },
            "ENDED" => TrackerError::NotClaimable {
                task_id,
                session_id,
                problem: ClaimProblem::Ended(
                    SubagentStatus::from_name(detail).unwrap_or(SubagentStatus::Failed),
                ),
            },
            _ => return RedisTrackerError::Protocol(Arc::from(format!("refusal {code}"))),
        };
        refusal.into()
    }
}

/// One end as `stv2_end` takes it: a completion without a result in the short form (the common path), any other
/// end in the long one.
fn end_item(task_id: &str, run: &str, outcome: &Outcome<'_>) -> Vec<String> {
    let (name, value, error_type, error_code) = match outcome {
        Outcome::Completed(None | Some("")) => {
            return vec!["c".to_owned(), task_id.to_owned(), run.to_owned()]
        }
        Outcome::Completed(Some(result)) => ("completed", *result, "", ""),
        Outcome::Failed(failure) => (
            "failed",
            &*failure.message,
            failure.error_type.as_deref().unwrap_or_default(),
            failure.error_code.as_deref().unwrap_or_default(),
        ),
        Outcome::Stopped(reason) => ("stopped", reason.unwrap_or_default(), "", ""),
        Outcome::Dropped => ("dropped", subagent_tracker::DROPPED_HANDLE_ERROR, "", ""),
    };
    ["e", task_id, run, name, value, error_type, error_code]
        .map(str::to_owned)
        .to_vec()
}

/// Whether `error` is a function's refusal `GONE`: this object's incarnation has ended.
fn is_gone(error: &RedisTrackerError) -> bool {
    let RedisTrackerError::ServerError { source } = error else {
        return false;
    };
    match (source.code(), source.detail()) {
        (Some("GONE"), _) => true,
        (Some("ERR"), Some(detail)) => detail == "GONE" || detail.starts_with("GONE "),
        _ => false,
    }
}
