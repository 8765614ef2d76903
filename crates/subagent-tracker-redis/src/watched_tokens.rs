//! Tokens by id for tasks of a session stored in Redis, wherever they run (contract §4, a token by id).
//!
//! A watched run is a run of a small in-memory tracker of this process, one per session mirror. The session's
//! event stream fires it: one reader per session with watched runs, which reads the stream for as long as any
//! run is watched and then lets its connection go. A watch is made before the task is read from Redis, so a
//! cancel between the read and the watch is never missed: the reader marks the watch, and the read's outcome
//! and the mark are settled together under the watches' lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use subagent_tracker::{
    CancelCause, InMemorySubagentTaskTracker, SubagentEventKind, SubagentStatus,
    SubagentTaskHandle, SubagentTaskSnapshot, SubagentTaskToken, TaskStart, TrackerConfig,
};
use tokio::sync::Notify;

use crate::{RedisEventSubscription, RedisSession, RedisTrackerError};

/// The watched runs of one session in this process.
pub(crate) struct Watches {
    tracker: InMemorySubagentTaskTracker<String>,
    state: Mutex<State>,
    /// Wakes the reader when the last watch has gone, so that it stops reading.
    emptied: Notify,
}

#[derive(Default)]
struct State {
    watched: HashMap<Arc<str>, Watch>,
    reading: bool,
}

struct Watch {
    /// The run watched, once the read has told it.
    run: Option<String>,
    /// A cancel the reader saw before the run was known.
    cancel_seen: bool,
    /// How many `token` calls are still reading this id: the watch stays while any is.
    reading_calls: usize,
    handle: Option<SubagentTaskHandle<String>>,
}

impl Watches {
    pub(crate) fn new(session_id: &str) -> Watches {
        Watches {
            // Retains nothing: a watch's token is all that is asked of it.
            tracker: InMemorySubagentTaskTracker::with_config(
                Some(session_id),
                TrackerConfig::default().with_max_finished_tasks(0),
            ),
            state: Mutex::new(State::default()),
            emptied: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Each change keeps the map consistent: it stays usable across a panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `task_id` as about to be read, and says whether a reader must be started.
    fn begin(&self, task_id: &Arc<str>) -> bool {
        let mut state = self.lock();
        let watch = state.watched.entry(task_id.clone()).or_insert(Watch {
            run: None,
            cancel_seen: false,
            reading_calls: 0,
            handle: None,
        });
        watch.reading_calls += 1;
        !std::mem::replace(&mut state.reading, true)
    }

    /// Settles a read of `task_id`: the token of run `run` in `snapshot`'s state, kept watched while it is
    /// pending, and the run to read again when the reader saw a cancel that the read may not show.
    fn settle(
        &self,
        task_id: &Arc<str>,
        read: Option<(String, SubagentTaskSnapshot<String>)>,
    ) -> (Option<SubagentTaskToken>, Option<String>) {
        let mut state = self.lock();
        let Some(watch) = state.watched.get_mut(task_id) else {
            return (read.map(|(_, snapshot)| settled_token(&snapshot)), None);
        };
        watch.reading_calls -= 1;
        let mut read_again = None;
        let Some((run, snapshot)) = read else {
            return self.finish_settling(state, task_id, None, None);
        };
        if watch.run.as_deref() != Some(&*run) {
            if let Some(old) = watch.handle.take() {
                // The id names another run now: the one watched has ended.
                old.complete(None);
            }
            watch.run = Some(run.clone());
        } else if snapshot.finished {
            if let Some(watched) = watch.handle.take() {
                if snapshot.status == SubagentStatus::Cancelled {
                    fire(&self.tracker, &snapshot);
                }
                watched.complete(None);
            }
        }
        if snapshot.finished {
            return self.finish_settling(state, task_id, Some(settled_token(&snapshot)), None);
        }
        let handle = match watch.handle.take() {
            Some(handle) => Ok(handle),
            None => self
                .tracker
                .start(TaskStart::new().task_id(task_id.clone())),
        };
        let outcome = match handle {
            Ok(handle) => {
                if snapshot.status == SubagentStatus::Cancelled {
                    fire(&self.tracker, &snapshot);
                } else if std::mem::take(&mut watch.cancel_seen) {
                    // A cancel came as the read went: of this run (after the read), or of an earlier one.
                    read_again = Some(run);
                }
                let token = handle.token();
                watch.handle = Some(handle);
                token
            }
            // The watch's own tracker refused the id (it cannot, holding no other run of it): a token of the
            // state just read, which no later cancel reaches.
            Err(_) => settled_token(&snapshot),
        };
        self.finish_settling(state, task_id, Some(outcome), read_again)
    }

    /// Drops the watch of `task_id` if nothing watches it any more, and wakes an idle reader.
    fn finish_settling(
        &self,
        mut state: MutexGuard<'_, State>,
        task_id: &Arc<str>,
        outcome: Option<SubagentTaskToken>,
        read_again: Option<String>,
    ) -> (Option<SubagentTaskToken>, Option<String>) {
        let watch = state.watched.get(task_id);
        if watch.is_some_and(|watch| watch.handle.is_none() && watch.reading_calls == 0) {
            state.watched.remove(task_id);
        }
        if state.watched.is_empty() {
            self.emptied.notify_one();
        }
        (outcome, read_again)
    }
    /// What the reader does with one event of the session.
    async fn apply(&self, session: &RedisSession, task_id: &Arc<str>, kind: SubagentEventKind) {
        match kind {
            SubagentEventKind::Cancelled => {
                let known = {
                    let mut state = self.lock();
                    let Some(watch) = state.watched.get_mut(task_id) else {
                        return;
                    };
                    watch.cancel_seen = true;
                    watch.run.clone()
                };
                if let Some(run) = known {
                    self.refresh(session, task_id, &run).await;
                }
            }
            SubagentEventKind::Ended | SubagentEventKind::Started => {
                // The watched run has ended, or a new run of the id began after it did.
                let run = self
                    .lock()
                    .watched
                    .get(task_id)
                    .and_then(|watch| watch.run.clone());
                if let Some(run) = run {
                    self.refresh(session, task_id, &run).await;
                }
            }
            _ => {}
        }
    }

    /// Reads the watched run `run` of `task_id` again and applies what Redis says: a cancel fires its token, an
    /// end (or a newer run in its place) ends the watch.
    async fn refresh(&self, session: &RedisSession, task_id: &Arc<str>, run: &str) {
        let Ok(read) = session.read_run(task_id).await else {
            // Unreachable now: the next event, or a lag, reads again.
            return;
        };
        let mut state = self.lock();
        let Some(watch) = state.watched.get_mut(task_id) else {
            return;
        };
        if watch.run.as_deref() != Some(run) {
            return;
        }
        let current = read
            .filter(|(stored_run, _)| stored_run == run)
            .map(|(_, snapshot)| snapshot);
        if let Some(snapshot) = &current {
            if snapshot.status == SubagentStatus::Cancelled {
                fire(&self.tracker, snapshot);
            }
        }
        if current.as_ref().is_none_or(|snapshot| snapshot.finished) {
            if let Some(handle) = watch.handle.take() {
                // A cancelled run keeps its fired token; any other end leaves it never to fire.
                handle.complete(None);
            }
            if watch.reading_calls == 0 {
                state.watched.remove(task_id);
            }
            if state.watched.is_empty() {
                self.emptied.notify_one();
            }
        }
    }

    /// Every watched run, read again: after the reader missed events.
    async fn refresh_all(&self, session: &RedisSession) {
        let watched: Vec<(Arc<str>, String)> = self
            .lock()
            .watched
            .iter()
            .filter_map(|(task_id, watch)| Some((task_id.clone(), watch.run.clone()?)))
            .collect();
        for (task_id, run) in watched {
            self.refresh(session, &task_id, &run).await;
        }
    }

    /// Stops reading if nothing is watched; true when it did.
    fn stop_if_idle(&self) -> bool {
        let mut state = self.lock();
        if state.watched.is_empty() {
            state.reading = false;
            return true;
        }
        false
    }
}

/// Fires the watch of `snapshot`'s task with its cancel, as Redis recorded it.
fn fire(tracker: &InMemorySubagentTaskTracker<String>, snapshot: &SubagentTaskSnapshot<String>) {
    tracker.apply_remote_cancel(
        &snapshot.task_id,
        snapshot
            .cancel_reason
            .as_deref()
            .unwrap_or(subagent_tracker::DEFAULT_CANCEL_REASON),
        snapshot.cancel_cause.unwrap_or(CancelCause::Requested),
        snapshot
            .cancel_origin
            .as_deref()
            .unwrap_or(&snapshot.task_id),
    );
}

/// A token in a finished task's final state: fired with its cancel if it was cancelled, never to fire otherwise.
fn settled_token(snapshot: &SubagentTaskSnapshot<String>) -> SubagentTaskToken {
    let tracker: InMemorySubagentTaskTracker<String> = InMemorySubagentTaskTracker::with_config(
        None,
        TrackerConfig::default().with_max_finished_tasks(0),
    );
    let Ok(handle) = tracker.start(TaskStart::new().task_id(snapshot.task_id.clone())) else {
        unreachable!("a new tracker holds no task");
    };
    if snapshot.status == SubagentStatus::Cancelled {
        fire(&tracker, snapshot);
    }
    let token = handle.token();
    handle.complete(None);
    token
}

impl RedisSession {
    /// The cancellation token of the retained task `task_id`, wherever it runs (contract §4, a token by id): it
    /// fires in this process when the task is cancelled in Redis, a notification later (the session's event
    /// stream; a missed event is made up by reading again), or has fired if it was. A task that completed or
    /// failed gives a token that never fires.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`](subagent_tracker::TrackerError::UnknownTask) (as
    /// [`RedisTrackerError::Tracker`]) when no task of that id is retained; [`RedisTrackerError::Unavailable`].
    pub async fn token(&self, task_id: &str) -> Result<SubagentTaskToken, RedisTrackerError> {
        subagent_tracker::validate_task_id("task_id", task_id)?;
        let task_id: Arc<str> = Arc::from(task_id);
        let watches = &self.mirror().watches;
        if watches.begin(&task_id) {
            // Subscribed before the read: a cancel after the read comes as an event.
            match self.subscribe().await {
                Ok(events) => {
                    let runtime = self.worker().runtime.clone();
                    runtime.spawn(read_events(self.clone(), events));
                }
                Err(error) => {
                    watches.lock().reading = false;
                    watches.settle(&task_id, None);
                    return Err(error);
                }
            }
        }
        let read = match self.read_run(&task_id).await {
            Ok(read) => read,
            Err(error) => {
                watches.settle(&task_id, None);
                return Err(error);
            }
        };
        let (token, read_again) = watches.settle(&task_id, read);
        if let Some(run) = read_again {
            watches.refresh(self, &task_id, &run).await;
        }
        token.ok_or_else(|| {
            subagent_tracker::TrackerError::UnknownTask {
                task_id: task_id.clone(),
                session_id: self.session_id().clone(),
            }
            .into()
        })
    }
}

/// Reads the session's events for as long as any of its runs is watched in this process.
async fn read_events(session: RedisSession, events: RedisEventSubscription) {
    let watches = &session.mirror().watches;
    // `None` once a read was abandoned: its answer may still be on the connection, so a new subscription is made.
    let mut events = Some(events);
    loop {
        if watches.stop_if_idle() {
            return;
        }
        let Some(subscription) = events.as_mut() else {
            match session.subscribe().await {
                Ok(fresh) => {
                    events = Some(fresh);
                    // What happened while no subscription listened is read again.
                    watches.refresh_all(&session).await;
                }
                Err(_) => tokio::time::sleep(RETRY).await,
            }
            continue;
        };
        let event = tokio::select! {
            event = subscription.next() => event,
            () = watches.emptied.notified() => {
                events = None;
                continue;
            }
        };
        match event {
            Ok(event) if event.kind == SubagentEventKind::Lagged => {
                watches.refresh_all(&session).await;
            }
            Ok(event) => watches.apply(&session, &event.task_id, event.kind).await,
            Err(RedisTrackerError::Tracker(_)) => {
                // The session's incarnation has ended: no watched run can change any more.
                watches.refresh_all(&session).await;
                let mut state = watches.lock();
                state.watched.clear();
                state.reading = false;
                return;
            }
            Err(_) => {
                // The subscription connects again on its next read; what it missed is read now.
                tokio::time::sleep(RETRY).await;
                watches.refresh_all(&session).await;
            }
        }
    }
}

/// How long the reader waits before it tries Redis again.
const RETRY: std::time::Duration = std::time::Duration::from_millis(100);
