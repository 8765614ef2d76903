//! One task's record and the transitions that keep the status rules.
//!
//! Every transition takes the entry's own lock, so transitions of one task are totally ordered and each one's
//! effects (status, reason, timestamps, token, event) are seen together. Wakers and callbacks collected under
//! the lock are delivered by the caller's [`Notifications`] after the lock is released, because they may run
//! foreign code (in Python, take the interpreter lock) and must never do so while a task lock is held.

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::cancel_callback::{next_callback_id, CallbackHost, CancelCallback};
use crate::deadline_timer::DeadlineKey;
use crate::event_bus::EventBus;
use crate::notifications::{run_contained, CancelCallbackFn, Notifications};
use crate::{CancelCause, SubagentEvent, SubagentEventKind, SubagentStatus, SubagentTaskSnapshot};

/// The longest progress message kept, in UTF-8 bytes; longer ones are cut at a character boundary.
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 4096;

pub(crate) struct TaskEntry<V> {
    /// The order of starts within the session; unique, so it also tells apart two runs of one task id.
    pub(crate) sequence: u64,
    pub(crate) task_id: Arc<str>,
    pub(crate) session_id: Arc<str>,
    pub(crate) parent_id: Option<Arc<str>>,
    pub(crate) agent: Option<Arc<str>>,
    pub(crate) description: Option<Arc<str>>,
    pub(crate) metadata: Option<V>,
    pub(crate) started_at: SystemTime,
    /// The effective deadline: the task's own, bounded by its parent's unless detached.
    pub(crate) deadline: Option<Instant>,
    /// Out of its parent's cascade (still cancellable by id and by its session).
    pub(crate) detached: bool,
    // Mirrors of the locked state, so that checks on hot paths never take the lock.
    status: AtomicU8,
    finished: AtomicBool,
    state: Mutex<TaskState<V>>,
}

struct TaskState<V> {
    cancelled_at: Option<SystemTime>,
    ended_at: Option<SystemTime>,
    cancel_reason: Option<Arc<str>>,
    cancel_origin: Option<Arc<str>>,
    cancel_cause: Option<CancelCause>,
    escalated: bool,
    progress: Option<Arc<str>>,
    progress_count: u64,
    result: Option<V>,
    error: Option<Arc<str>>,
    /// Running children by sequence; a child removes itself when it finishes, so memory follows live work.
    children: Option<HashMap<u64, Arc<TaskEntry<V>>>>,
    /// Dropped when the task finishes, so that finished chains of tasks do not keep each other alive.
    parent: Option<Arc<TaskEntry<V>>>,
    /// Made on first request only: most tasks are watched through the atomic status alone.
    token: Option<CancellationToken>,
    cancel_wakers: Vec<Waker>,
    finish_wakers: Vec<Waker>,
    /// Cancel callbacks in registration order, by registration id.
    callbacks: Vec<(u64, CancelCallbackFn)>,
    /// The scheduled deadline, removed from the timer when the task finishes first.
    deadline_key: Option<DeadlineKey>,
    /// This task's registrations on the tokens it is linked to, removed when it finishes.
    links: Vec<CancelCallback>,
}

/// What a cancel carries to every task it reaches.
pub(crate) struct CancelRequest {
    pub(crate) reason: Arc<str>,
    pub(crate) at: SystemTime,
}

/// How a runner ended its task.
pub(crate) enum RunnerEnd<V> {
    Completed(Option<V>),
    Failed(Arc<str>),
    /// The runner stopped because of a cancel (the task is already `Cancelled`).
    Stopped,
}

/// What [`TaskEntry::end`] did, and what it released for the caller to dispose of with no lock held.
pub(crate) struct EndEffects<V> {
    /// True when this end moved the task out of `Running`.
    pub(crate) transitioned: bool,
    pub(crate) parent: Option<Arc<TaskEntry<V>>>,
    pub(crate) deadline_key: Option<DeadlineKey>,
    pub(crate) links: Vec<CancelCallback>,
    /// Waiters and callbacks of a cancel that will now never come, for the caller to drop unrun once no lock
    /// is held (they may own foreign objects).
    pub(crate) released: (Vec<Waker>, Vec<(u64, CancelCallbackFn)>),
}

/// Why [`TaskEntry::open`] refused a start.
pub(crate) enum OpenRefusal {
    ParentFinished,
    DuplicateTask,
}

/// What a parent says to a child being started under it.
enum ChildAdmission {
    Admitted,
    /// The parent is cancelled but not finished: the child starts cancelled, with this reason and origin.
    StartCancelled {
        reason: Arc<str>,
        origin: Arc<str>,
    },
    ParentFinished,
}

impl<V> TaskEntry<V> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        sequence: u64,
        task_id: Arc<str>,
        session_id: Arc<str>,
        parent: Option<Arc<TaskEntry<V>>>,
        agent: Option<Arc<str>>,
        description: Option<Arc<str>>,
        metadata: Option<V>,
        deadline: Option<Instant>,
        detached: bool,
    ) -> TaskEntry<V> {
        TaskEntry {
            sequence,
            task_id,
            session_id,
            parent_id: parent.as_ref().map(|parent| parent.task_id.clone()),
            agent,
            description,
            metadata,
            started_at: SystemTime::now(),
            deadline,
            detached,
            status: AtomicU8::new(SubagentStatus::Running as u8),
            finished: AtomicBool::new(false),
            state: Mutex::new(TaskState {
                cancelled_at: None,
                ended_at: None,
                cancel_reason: None,
                cancel_origin: None,
                cancel_cause: None,
                escalated: false,
                progress: None,
                progress_count: 0,
                result: None,
                error: None,
                children: None,
                parent,
                token: None,
                cancel_wakers: Vec::new(),
                finish_wakers: Vec::new(),
                callbacks: Vec::new(),
                deadline_key: None,
                links: Vec::new(),
            }),
        }
    }

    #[inline]
    pub(crate) fn status(&self) -> SubagentStatus {
        SubagentStatus::from_repr(self.status.load(Ordering::Acquire))
    }

    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.status.load(Ordering::Acquire) == SubagentStatus::Cancelled as u8
    }

    #[inline]
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Makes a new entry live: admits it under `parent`, runs `make_visible` (which indexes it), and publishes
    /// `started`, all under the entry's own lock.
    ///
    /// Holding the lock throughout means a cascade that reaches the child through its parent waits until the
    /// start is decided, so it never sees a half-started task and its `cancelled` event never precedes
    /// `started`. A failed start leaves no trace: the parent forgets the child and the entry is marked finished.
    pub(crate) fn open(
        self: &Arc<Self>,
        parent: Option<&Arc<TaskEntry<V>>>,
        make_visible: impl FnOnce(bool) -> Result<(), OpenRefusal>,
        bus: &EventBus,
        notifications: &mut Notifications,
    ) -> Result<(), OpenRefusal> {
        let mut state = self.state.lock();
        if let Some(parent) = parent {
            let admission = if self.detached {
                parent.check_alive()
            } else {
                parent.admit_child(self)
            };
            match admission {
                ChildAdmission::Admitted => {}
                ChildAdmission::ParentFinished => return Err(OpenRefusal::ParentFinished),
                ChildAdmission::StartCancelled { reason, origin } => {
                    state.cancelled_at = Some(self.started_at);
                    state.cancel_reason = Some(reason);
                    state.cancel_origin = Some(origin);
                    state.cancel_cause = Some(CancelCause::Parent);
                    self.status
                        .store(SubagentStatus::Cancelled as u8, Ordering::Release);
                }
            }
        }
        if let Err(refusal) = make_visible(self.is_cancelled()) {
            if let Some(parent) = parent {
                parent.forget_child(self.sequence);
            }
            self.status
                .store(SubagentStatus::Failed as u8, Ordering::Release);
            self.finished.store(true, Ordering::Release);
            return Err(refusal);
        }
        if bus.has_subscribers() {
            let wakers = &mut notifications.wakers;
            bus.publish(
                self.event(SubagentEventKind::Started, self.started_at, &state),
                wakers,
            );
            if self.is_cancelled() {
                bus.publish(
                    self.event(SubagentEventKind::Cancelled, self.started_at, &state),
                    wakers,
                );
            }
        }
        Ok(())
    }

    /// Moves a `Running` task to `Cancelled`; returns false if it was not running.
    ///
    /// On success the running children are appended to `children` for the caller to cascade into.
    pub(crate) fn cancel(
        &self,
        request: &CancelRequest,
        origin: &Arc<str>,
        cause: CancelCause,
        bus: &EventBus,
        notifications: &mut Notifications,
        children: &mut Vec<Arc<TaskEntry<V>>>,
    ) -> bool {
        if self.status() != SubagentStatus::Running {
            return false;
        }
        let mut state = self.state.lock();
        if self.status() != SubagentStatus::Running {
            return false;
        }
        state.cancelled_at = Some(request.at);
        state.cancel_reason = Some(request.reason.clone());
        state.cancel_origin = Some(origin.clone());
        state.cancel_cause = Some(cause);
        self.status
            .store(SubagentStatus::Cancelled as u8, Ordering::Release);
        if let Some(token) = &state.token {
            token.cancel();
        }
        notifications.wakers.append(&mut state.cancel_wakers);
        notifications
            .callbacks
            .extend(state.callbacks.drain(..).map(|(_, callback)| callback));
        if let Some(running_children) = &state.children {
            children.extend(running_children.values().cloned());
        }
        if bus.has_subscribers() {
            let event = self.event(SubagentEventKind::Cancelled, request.at, &state);
            bus.publish(event, &mut notifications.wakers);
        }
        true
    }

    /// Records the runner's end. Returns `None` when the task had already finished (nothing changes).
    ///
    /// A `Running` task takes the reported status; a `Cancelled` one stays cancelled and keeps what the runner
    /// reported for diagnosis. Either way the task becomes finished.
    pub(crate) fn end(
        &self,
        end: RunnerEnd<V>,
        bus: &EventBus,
        notifications: &mut Notifications,
    ) -> Option<EndEffects<V>> {
        let mut state = self.state.lock();
        if self.is_finished() {
            return None;
        }
        let running = self.status() == SubagentStatus::Running;
        let now = SystemTime::now();
        let status = match end {
            RunnerEnd::Completed(result) => {
                state.result = result;
                SubagentStatus::Completed
            }
            RunnerEnd::Failed(error) => {
                state.error = Some(error);
                SubagentStatus::Failed
            }
            RunnerEnd::Stopped => SubagentStatus::Cancelled,
        };
        if running {
            self.status.store(status as u8, Ordering::Release);
        }
        state.ended_at = Some(now);
        self.finished.store(true, Ordering::Release);
        notifications.wakers.append(&mut state.finish_wakers);
        // A finished task can no longer be cancelled, so it has no cascade to remember.
        state.children = None;
        if bus.has_subscribers() {
            bus.publish(
                self.event(SubagentEventKind::Ended, now, &state),
                &mut notifications.wakers,
            );
        }
        Some(EndEffects {
            transitioned: running,
            parent: state.parent.take(),
            deadline_key: state.deadline_key.take(),
            links: std::mem::take(&mut state.links),
            // The token of a task that did not get cancelled never fires: its waiters and callbacks go unrun.
            released: (
                std::mem::take(&mut state.cancel_wakers),
                std::mem::take(&mut state.callbacks),
            ),
        })
    }

    /// Records a progress message; ignored once the task has finished. Returns whether it was recorded.
    pub(crate) fn record_progress(
        &self,
        message: &str,
        bus: &EventBus,
        notifications: &mut Notifications,
    ) -> bool {
        let mut state = self.state.lock();
        if self.is_finished() {
            return false;
        }
        state.progress = Some(Arc::from(truncate_to_char_boundary(
            message,
            MAX_PROGRESS_MESSAGE_BYTES,
        )));
        state.progress_count += 1;
        if bus.has_subscribers() {
            let event = self.event(SubagentEventKind::Progress, SystemTime::now(), &state);
            bus.publish(event, &mut notifications.wakers);
        }
        true
    }

    /// Lets a new child in, unless this task has finished; a cancelled parent passes its cancel on.
    fn admit_child(&self, child: &Arc<TaskEntry<V>>) -> ChildAdmission {
        let mut state = self.state.lock();
        if self.is_finished() {
            return ChildAdmission::ParentFinished;
        }
        if self.is_cancelled() {
            return ChildAdmission::StartCancelled {
                reason: state
                    .cancel_reason
                    .clone()
                    .unwrap_or_else(|| Arc::from("cancelled")),
                origin: state
                    .cancel_origin
                    .clone()
                    .unwrap_or_else(|| self.task_id.clone()),
            };
        }
        state
            .children
            .get_or_insert_with(HashMap::new)
            .insert(child.sequence, child.clone());
        ChildAdmission::Admitted
    }

    /// For a detached child: the parent must be alive, and its cancel is not passed on.
    fn check_alive(&self) -> ChildAdmission {
        if self.is_finished() {
            ChildAdmission::ParentFinished
        } else {
            ChildAdmission::Admitted
        }
    }

    pub(crate) fn forget_child(&self, child_sequence: u64) {
        if let Some(children) = &mut self.state.lock().children {
            children.remove(&child_sequence);
        }
    }

    /// The tokio-util token of this task, made on first request; already cancelled if the task is.
    pub(crate) fn cancellation_token(&self) -> CancellationToken {
        let mut state = self.state.lock();
        let cancelled = self.is_cancelled();
        state
            .token
            .get_or_insert_with(|| {
                let token = CancellationToken::new();
                if cancelled {
                    token.cancel();
                }
                token
            })
            .clone()
    }

    pub(crate) fn cancel_reason(&self) -> Option<Arc<str>> {
        if !self.is_cancelled() {
            return None;
        }
        self.state.lock().cancel_reason.clone()
    }

    /// Registers `callback` to run once when the task is cancelled: at once (in this thread) if it already is,
    /// never if the task finishes first.
    pub(crate) fn on_cancel(self: &Arc<Self>, callback: CancelCallbackFn) -> CancelCallback
    where
        V: Send + Sync + 'static,
    {
        if self.is_cancelled() {
            run_contained(callback);
            return CancelCallback::spent();
        }
        let mut state = self.state.lock();
        if self.is_cancelled() {
            drop(state);
            run_contained(callback);
            return CancelCallback::spent();
        }
        if self.is_finished() {
            drop(state);
            drop(callback);
            return CancelCallback::spent();
        }
        let id = next_callback_id();
        state.callbacks.push((id, callback));
        let host: std::sync::Weak<dyn CallbackHost> = Arc::downgrade(self) as _;
        CancelCallback::registered(host, id)
    }

    /// An entry that belongs to no session: the state behind a combined token.
    pub(crate) fn standalone(label: Arc<str>) -> TaskEntry<V> {
        TaskEntry::new(0, label, Arc::from(""), None, None, None, None, None, false)
    }

    /// Cancels a standalone entry (cause `Linked`), delivering its wake-ups and callbacks, and drops its links.
    pub(crate) fn cancel_standalone(&self, reason: Arc<str>) {
        static NO_SUBSCRIBERS: std::sync::OnceLock<EventBus> = std::sync::OnceLock::new();
        let bus = NO_SUBSCRIBERS.get_or_init(EventBus::new);
        let request = CancelRequest {
            reason,
            at: SystemTime::now(),
        };
        let mut notifications = Notifications::default();
        let origin = self.task_id.clone();
        let mut children = Vec::new();
        self.cancel(
            &request,
            &origin,
            CancelCause::Linked,
            bus,
            &mut notifications,
            &mut children,
        );
        let links = std::mem::take(&mut self.state.lock().links);
        for link in links {
            link.remove();
        }
        drop(notifications);
    }

    pub(crate) fn record_escalation(&self) {
        self.state.lock().escalated = true;
    }

    pub(crate) fn callback_count(&self) -> usize {
        self.state.lock().callbacks.len()
    }

    /// Remembers the scheduled deadline so that finishing removes it; false (nothing kept) if already finished.
    pub(crate) fn keep_deadline_key(&self, key: DeadlineKey) -> bool {
        let mut state = self.state.lock();
        if self.is_finished() {
            return false;
        }
        state.deadline_key = Some(key);
        true
    }

    /// Keeps this task's registrations on linked tokens until it finishes; returns them if it already has.
    pub(crate) fn keep_links(&self, links: Vec<CancelCallback>) -> Vec<CancelCallback> {
        let mut state = self.state.lock();
        if self.is_finished() {
            return links;
        }
        state.links.extend(links);
        Vec::new()
    }

    /// Ready once the task is cancelled. A task that finishes without being cancelled stays pending forever.
    pub(crate) fn poll_cancelled(&self, context: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        let mut state = self.state.lock();
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        if !self.is_finished() {
            register_waker(&mut state.cancel_wakers, context.waker());
        }
        Poll::Pending
    }

    /// Ready once the task is finished.
    pub(crate) fn poll_finished(&self, context: &mut Context<'_>) -> Poll<()> {
        if self.is_finished() {
            return Poll::Ready(());
        }
        let mut state = self.state.lock();
        if self.is_finished() {
            return Poll::Ready(());
        }
        register_waker(&mut state.finish_wakers, context.waker());
        Poll::Pending
    }

    pub(crate) async fn cancelled(&self) {
        poll_fn(|context| self.poll_cancelled(context)).await
    }

    pub(crate) async fn finished(&self) {
        poll_fn(|context| self.poll_finished(context)).await
    }

    /// Blocks the calling thread until the task is cancelled (true) or `timeout` passes (false).
    pub(crate) fn wait_cancelled_blocking(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut context = Context::from_waker(&waker);
        loop {
            if self.poll_cancelled(&mut context).is_ready() {
                return true;
            }
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
    }

    fn event(
        &self,
        kind: SubagentEventKind,
        timestamp: SystemTime,
        state: &TaskState<V>,
    ) -> SubagentEvent {
        SubagentEvent {
            task_id: self.task_id.clone(),
            kind,
            status: self.status(),
            timestamp,
            reason: match kind {
                SubagentEventKind::Cancelled | SubagentEventKind::Started => {
                    state.cancel_reason.clone()
                }
                _ => None,
            },
            message: match kind {
                SubagentEventKind::Progress => state.progress.clone(),
                _ => None,
            },
            missed: 0,
        }
    }
}

impl<V: Clone> TaskEntry<V> {
    pub(crate) fn snapshot(&self) -> SubagentTaskSnapshot<V> {
        let state = self.state.lock();
        SubagentTaskSnapshot {
            task_id: self.task_id.clone(),
            session_id: self.session_id.clone(),
            parent_id: self.parent_id.clone(),
            agent: self.agent.clone(),
            description: self.description.clone(),
            metadata: self.metadata.clone(),
            status: self.status(),
            finished: self.is_finished(),
            started_at: self.started_at,
            cancelled_at: state.cancelled_at,
            ended_at: state.ended_at,
            cancel_reason: state.cancel_reason.clone(),
            cancel_origin: state.cancel_origin.clone(),
            cancel_cause: state.cancel_cause,
            escalated: state.escalated,
            deadline: self.deadline.map(instant_to_system_time),
            detached: self.detached,
            progress: state.progress.clone(),
            progress_count: state.progress_count,
            result: state.result.clone(),
            error: state.error.clone(),
        }
    }
}

impl<V> Drop for TaskEntry<V> {
    fn drop(&mut self) {
        // A task unlinks when it finishes; a combined token (`SubagentTaskToken::any`) never finishes, so it
        // unlinks here, when its last clone is dropped: long-lived sources never accumulate dead links.
        for link in self.state.get_mut().links.drain(..) {
            link.remove();
        }
    }
}

impl<V: Send + Sync + 'static> CallbackHost for TaskEntry<V> {
    fn remove_callback(&self, id: u64) -> bool {
        let removed = {
            let mut state = self.state.lock();
            let position = state
                .callbacks
                .iter()
                .position(|(registered, _)| *registered == id);
            position.map(|position| state.callbacks.remove(position))
        };
        // The callback (perhaps holding foreign objects) is dropped here, with no lock held.
        removed.is_some()
    }
}

/// The wall-clock time of a monotonic instant, for snapshots.
fn instant_to_system_time(instant: Instant) -> SystemTime {
    let now = Instant::now();
    let wall = SystemTime::now();
    match instant.checked_duration_since(now) {
        Some(ahead) => wall + ahead,
        None => wall - now.duration_since(instant),
    }
}

/// Adds `waker` unless it repeats the latest registration: a future polled again re-registers at once, while a
/// full scan would make many distinct waiters on one task quadratic.
fn register_waker(wakers: &mut Vec<Waker>, waker: &Waker) {
    if !wakers
        .last()
        .is_some_and(|registered| registered.will_wake(waker))
    {
        wakers.push(waker.clone());
    }
}

fn truncate_to_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}
