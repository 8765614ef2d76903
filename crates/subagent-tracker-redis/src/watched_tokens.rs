//! Tokens by id for tasks of a session stored in Redis, wherever they run (contract §4, a token by id).
//!
//! A watched run is a run of a small in-memory tracker of this process, one per session mirror. The session's
//! event stream fires it: one reader per session and process, which reads the stream while any run is watched
//! and then lets it go. Cancels and ends in the stream name their run, so an event is applied to the run it is of
//! and to no other run of the id.
//!
//! No cancel is missed: a `token` call makes sure the reader is subscribed before it reads the task, and marks
//! the id as being read; what the reader sees of the id meanwhile is kept on the mark and applied, for the run the
//! read found, when the read is settled under the same lock. A reader that must let its connection go (a read
//! abandoned half way) reads on from where it stopped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use subagent_tracker::{
    CancelCause, InMemorySubagentTaskTracker, SubagentEventKind, SubagentStatus,
    SubagentTaskHandle, SubagentTaskSnapshot, SubagentTaskToken, TaskStart, TrackerConfig,
    DEFAULT_CANCEL_REASON,
};
use tokio::sync::Notify;

use crate::{RedisEventSubscription, RedisSession, RedisTrackerError};

/// The watched runs of one session in this process.
pub(crate) struct Watches {
    tracker: InMemorySubagentTaskTracker<String>,
    state: Mutex<State>,
    /// Held while a `token` call opens the reader's subscription, so that a concurrent call waits for it.
    subscribing: tokio::sync::Mutex<()>,
    /// Wakes the reader when the last watch has gone, so that it stops reading.
    emptied: Notify,
}

#[derive(Default)]
struct State {
    watched: HashMap<Arc<str>, Watch>,
    reading: bool,
}

#[derive(Default)]
struct Watch {
    /// The run watched, once a read has told it.
    run: Option<String>,
    handle: Option<SubagentTaskHandle<String>>,
    /// How many `token` calls are reading this id: the watch stays while any is.
    reading_calls: usize,
    /// What the reader saw of the id while its run was not known yet, to apply to the run the read finds.
    seen: Vec<Seen>,
}

/// A cancel or an end of one run, as the stream told it.
struct Seen {
    run: String,
    kind: SubagentEventKind,
    status: SubagentStatus,
    reason: Option<Arc<str>>,
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
            subscribing: tokio::sync::Mutex::new(()),
            emptied: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Each change keeps the map consistent: it stays usable across a panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `task_id` as being read; true when no reader is reading the stream.
    fn begin(&self, task_id: &Arc<str>) -> bool {
        let mut state = self.lock();
        state
            .watched
            .entry(task_id.clone())
            .or_default()
            .reading_calls += 1;
        !state.reading
    }

    /// Settles a read of `task_id` (its run and snapshot, or `None` when it is not retained): the token of that
    /// run, kept watched while it is pending.
    fn settle(
        &self,
        task_id: &Arc<str>,
        read: Option<(String, SubagentTaskSnapshot<String>)>,
    ) -> Option<SubagentTaskToken> {
        let mut state = self.lock();
        let watch = state.watched.entry(task_id.clone()).or_default();
        watch.reading_calls = watch.reading_calls.saturating_sub(1);
        let seen = if watch.reading_calls == 0 {
            std::mem::take(&mut watch.seen)
        } else {
            Vec::new()
        };
        let token = read.map(|(run, snapshot)| {
            if watch.run.as_deref() != Some(&*run) {
                if let Some(old_run) = watch.run.take() {
                    // The id names a newer run: the one watched has ended. What was seen of it applies first.
                    for event in seen.iter().filter(|event| event.run == old_run) {
                        apply_to(&self.tracker, watch, task_id, event);
                    }
                    if let Some(old) = watch.handle.take() {
                        old.complete(None);
                    }
                }
                watch.run = Some(run.clone());
            }
            let handle = match watch.handle.take() {
                Some(handle) => Some(handle),
                None if snapshot.finished => None,
                None => self
                    .tracker
                    .start(TaskStart::new().task_id(task_id.clone()))
                    .ok(),
            };
            let Some(handle) = handle else {
                return settled_token(&snapshot);
            };
            if snapshot.status == SubagentStatus::Cancelled {
                fire(&self.tracker, &snapshot);
            }
            let token = handle.token();
            watch.handle = Some(handle);
            for event in seen.iter().filter(|event| event.run == run) {
                apply_to(&self.tracker, watch, task_id, event);
            }
            if snapshot.finished {
                end_watch(&self.tracker, watch, &snapshot);
            }
            token
        });
        forget_if_unwatched(&mut state, task_id, &self.emptied);
        token
    }

    /// What the reader does with one event of run `run` of `task_id`.
    fn apply(&self, task_id: &Arc<str>, run: String, event: &subagent_tracker::SubagentEvent) {
        let mut state = self.lock();
        let Some(watch) = state.watched.get_mut(task_id) else {
            return;
        };
        let seen = Seen {
            run,
            kind: event.kind,
            status: event.status,
            reason: event.reason.clone(),
        };
        if watch.run.as_deref() == Some(&*seen.run) {
            apply_to(&self.tracker, watch, task_id, &seen);
        } else if watch.reading_calls > 0 {
            // A read is under way: it tells which run it found, and the event is applied if it is of that one.
            watch.seen.push(seen);
            return;
        }
        forget_if_unwatched(&mut state, task_id, &self.emptied);
    }

    /// Every watched run, read again: after the reader missed events (a lag the stream's trimming caused). A run
    /// that was replaced meanwhile is ended unfired: its cancel, if any, is gone with the trimmed events.
    async fn refresh_all(&self, session: &RedisSession) {
        let watched: Vec<(Arc<str>, String)> = self
            .lock()
            .watched
            .iter()
            .filter_map(|(task_id, watch)| Some((task_id.clone(), watch.run.clone()?)))
            .collect();
        for (task_id, run) in watched {
            let Ok(read) = session.read_run(&task_id).await else {
                continue;
            };
            let mut state = self.lock();
            let Some(watch) = state.watched.get_mut(&task_id) else {
                continue;
            };
            if watch.run.as_deref() != Some(&*run) {
                continue;
            }
            match read.filter(|(stored_run, _)| *stored_run == run) {
                Some((_, snapshot)) => {
                    if snapshot.status == SubagentStatus::Cancelled {
                        fire(&self.tracker, &snapshot);
                    }
                    if snapshot.finished {
                        end_watch(&self.tracker, watch, &snapshot);
                    }
                }
                None => {
                    if let Some(handle) = watch.handle.take() {
                        handle.complete(None);
                    }
                }
            }
            forget_if_unwatched(&mut state, &task_id, &self.emptied);
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

/// Applies one event of the watched run to its watch: a cancel fires its token, an end ends the watch.
fn apply_to(
    tracker: &InMemorySubagentTaskTracker<String>,
    watch: &mut Watch,
    task_id: &Arc<str>,
    event: &Seen,
) {
    let cancelled = event.kind == SubagentEventKind::Cancelled
        || (event.kind == SubagentEventKind::Ended && event.status == SubagentStatus::Cancelled);
    if cancelled {
        tracker.apply_remote_cancel(
            task_id,
            event.reason.as_deref().unwrap_or(DEFAULT_CANCEL_REASON),
            CancelCause::Requested,
            task_id,
        );
    }
    if event.kind == SubagentEventKind::Ended {
        if let Some(handle) = watch.handle.take() {
            handle.complete(None);
        }
    }
}

/// Ends the watch of a run that has finished, its token fired if the run was cancelled.
fn end_watch(
    tracker: &InMemorySubagentTaskTracker<String>,
    watch: &mut Watch,
    snapshot: &SubagentTaskSnapshot<String>,
) {
    if snapshot.status == SubagentStatus::Cancelled {
        fire(tracker, snapshot);
    }
    if let Some(handle) = watch.handle.take() {
        handle.complete(None);
    }
}

/// Drops the watch of `task_id` once no run of it is watched and no call reads it, and wakes an idle reader.
fn forget_if_unwatched(state: &mut State, task_id: &Arc<str>, emptied: &Notify) {
    if state
        .watched
        .get(task_id)
        .is_some_and(|watch| watch.handle.is_none() && watch.reading_calls == 0)
    {
        state.watched.remove(task_id);
    }
    if state.watched.is_empty() {
        emptied.notify_one();
    }
}

/// Fires the watch of `snapshot`'s task with its cancel, as Redis recorded it.
fn fire(tracker: &InMemorySubagentTaskTracker<String>, snapshot: &SubagentTaskSnapshot<String>) {
    tracker.apply_remote_cancel(
        &snapshot.task_id,
        snapshot
            .cancel_reason
            .as_deref()
            .unwrap_or(DEFAULT_CANCEL_REASON),
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
    /// fires in this process when the task is cancelled in Redis, an event later (the session's event stream,
    /// read while any task is watched), or has fired if it was. A task that completed or failed gives a token
    /// that never fires.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`](subagent_tracker::TrackerError::UnknownTask) (as
    /// [`RedisTrackerError::Tracker`]) when no task of that id is retained; [`RedisTrackerError::Unavailable`].
    pub async fn token(&self, task_id: &str) -> Result<SubagentTaskToken, RedisTrackerError> {
        subagent_tracker::validate_task_id("task_id", task_id)?;
        let task_id: Arc<str> = Arc::from(task_id);
        let watches = &self.mirror().watches;
        {
            // A concurrent call waits here until the reader is subscribed: its read then comes after.
            let _subscribing = watches.subscribing.lock().await;
            if watches.begin(&task_id) {
                match self.subscribe().await {
                    Ok(events) => {
                        watches.lock().reading = true;
                        let runtime = self.worker().runtime.clone();
                        runtime.spawn(read_events(self.clone(), events));
                    }
                    Err(error) => {
                        watches.settle(&task_id, None);
                        return Err(error);
                    }
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
        watches.settle(&task_id, read).ok_or_else(|| {
            subagent_tracker::TrackerError::UnknownTask {
                task_id: task_id.clone(),
                session_id: self.session_id().clone(),
            }
            .into()
        })
    }
}

/// Reads the session's events for as long as any of its runs is watched in this process.
async fn read_events(session: RedisSession, mut events: RedisEventSubscription) {
    let watches = &session.mirror().watches;
    loop {
        if watches.stop_if_idle() {
            return;
        }
        let event = tokio::select! {
            event = events.next_with_run() => event,
            () = watches.emptied.notified() => {
                // The read was abandoned half way: its answer may be left on the connection.
                events.drop_connection();
                continue;
            }
        };
        match event {
            Ok((event, _)) if event.kind == SubagentEventKind::Lagged => {
                watches.refresh_all(&session).await;
            }
            Ok((event, Some(run))) => watches.apply(&event.task_id, run, &event),
            Ok((_, None)) => {}
            Err(RedisTrackerError::Tracker(_)) => {
                // The session's incarnation has ended: no watched run can change any more.
                watches.refresh_all(&session).await;
                let mut state = watches.lock();
                state.watched.clear();
                state.reading = false;
                return;
            }
            Err(_) => {
                // The subscription connects again on its next read and goes on where it stopped.
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// How long the reader waits before it tries Redis again.
const RETRY: std::time::Duration = std::time::Duration::from_millis(100);
