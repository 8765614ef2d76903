//! The cancellation signal of one task, or of a token combined with [`any`](crate::SubagentTaskToken::any):
//! its status word, why it fired, and everything waiting for it.
//!
//! A signal is not generic and knows nothing of sessions: the task record (`TaskEntry`) drives it through its
//! transitions, and tokens observe it.
//!
//! # Invariants
//!
//! - The status word moves forward only: `Queued` to `Running`, a pending status to a terminal one, and
//!   `finished` is set once. The one move back and forth is a pause: `Running` to `Paused` and back, each
//!   woken in the resume waiters, which also wake when the signal fires or finishes. Both live in one atomic
//!   byte, so a lock-free reader sees them together.
//! - Every write of the status word happens under the lock, but one: the end of a signal whose lock nobody has
//!   taken. The first taker of the lock marks the word for good ([`LOCK_USED`]) before anything else, and
//!   until then the state under the lock is empty, so such an end owes nothing to anyone: it writes the word
//!   with one compare-and-swap that fails once the mark is there, where it would take the lock.
//! - A signal fires (a pending status to `Cancelled`) at most once. A `Queued` signal has no runner to wait
//!   for, so firing it finishes it too. Firing takes its waiters, callbacks and dependents
//!   out under the lock and hands them to a [`Delivery`]; they run only when the caller calls
//!   [`Delivery::deliver`], with no lock held. Nothing is delivered from `Drop`.
//! - A signal that finishes without having fired never fires: its cancel waiters, callbacks and dependents are
//!   released unrun, and dropped with no lock held.
//! - A source holds its dependents weakly, and a dependent holds its sources strongly, so a combined token
//!   lives exactly as long as something holds it or depends on it. A dependent removes its registrations
//!   when it fires, finishes or is dropped; a long-lived source never accumulates dead ones.
//! - Chains of dependents are fired and dropped with explicit work lists, never by recursion, so their depth
//!   is bounded by memory only.
//!
//! A signal's lock is a leaf (level 6 in the crate's lock hierarchy, see the crate root): while it is held no
//! other lock is taken and no foreign code runs.

use std::any::Any;
use std::ops::DerefMut;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::sync::{AtomicU8, Mutex};
use crate::token::cancel_record::CancelRecord;
use crate::token::delivery::{Callback, Delivery, Dependent, Source, SourceLink};
use crate::token::handlers::Handlers;
use crate::{CancelCause, SubagentStatus};
use std::sync::atomic::Ordering;

/// Set in the status word once the runner has reported its end (or its handle was closed).
const FINISHED: u8 = 0x80;

/// Set in the status word, for good, by the first taker of the signal's lock; no reader of the status sees it.
const LOCK_USED: u8 = 0x40;

/// What happened when a dependent tried to register on a source.
pub(crate) enum Registration {
    /// Registered under this id.
    Registered(u64),
    /// The source has already fired, with this record: the dependent fires now.
    Fired(CancelRecord),
    /// The source finished without firing and never will: nothing to register.
    Finished,
}

/// How a runner's end changes the status word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    Completed,
    Failed,
    /// The runner stopped on a cancel: the task must already be `Cancelled` (or the end changes nothing).
    Stopped,
}

pub(crate) struct CancelSignal {
    word: AtomicU8,
    state: Mutex<SignalState>,
}

#[derive(Default)]
struct SignalState {
    cancel: Option<CancelRecord>,
    /// Made on first request: most tasks are watched through the status word alone.
    token: Option<CancellationToken>,
    next_registration: u64,
    cancel_waiters: Vec<(u64, Waker)>,
    finish_waiters: Vec<(u64, Waker)>,
    callbacks: Vec<(u64, Callback)>,
    /// What few signals need (a pause's waiters, the count of cancel handlers at work), boxed apart so that
    /// every other signal stays small.
    rare: Option<Box<RareState>>,
    dependents: Vec<(u64, Weak<dyn Dependent>)>,
    /// This signal's registrations on the signals it depends on.
    sources: Vec<SourceLink>,
}

#[derive(Default)]
struct RareState {
    /// Woken when a paused signal leaves `Paused`: a resume, a cancel or an end.
    resume_waiters: Vec<(u64, Waker)>,
    /// The count of this signal's callbacks at work, made when the first one runs or a canceller asks.
    handlers: Option<Arc<Handlers>>,
}

impl SignalState {
    fn rare(&mut self) -> &mut RareState {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Wakes the pause's waiters, taking them out.
    fn wake_resume_waiters(&mut self, delivery: &mut Delivery) {
        if let Some(rare) = &mut self.rare {
            delivery.wake_waiters(&mut rare.resume_waiters);
        }
    }

    fn next_registration(&mut self) -> u64 {
        self.next_registration += 1;
        self.next_registration
    }
}

/// A signal's status and finished flag, read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StatusWord(u8);

impl StatusWord {
    pub(crate) fn status(self) -> SubagentStatus {
        SubagentStatus::from_repr(self.0 & !FINISHED)
    }

    pub(crate) fn is_finished(self) -> bool {
        self.0 & FINISHED != 0
    }
}

impl CancelSignal {
    pub(crate) fn new(status: SubagentStatus) -> CancelSignal {
        CancelSignal {
            word: AtomicU8::new(status as u8),
            state: Mutex::new(SignalState::default()),
        }
    }

    #[inline]
    pub(crate) fn word(&self) -> StatusWord {
        StatusWord(self.word.load(Ordering::Acquire) & !LOCK_USED)
    }

    /// Writes the status word, under the lock (which [`lock`](Self::lock) has marked as used).
    fn set_word(&self, word: u8) {
        self.word.store(word | LOCK_USED, Ordering::Release);
    }

    /// The state, locked, once the word is marked as used: from then on an end takes the lock too.
    fn lock(&self) -> impl DerefMut<Target = SignalState> + '_ {
        let state = self.state.lock();
        if self.word.load(Ordering::Relaxed) & LOCK_USED == 0 {
            self.word.fetch_or(LOCK_USED, Ordering::AcqRel);
        }
        state
    }

    #[inline]
    pub(crate) fn status(&self) -> SubagentStatus {
        self.word().status()
    }

    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.word.load(Ordering::Acquire) & !(FINISHED | LOCK_USED)
            == SubagentStatus::Cancelled as u8
    }

    #[inline]
    pub(crate) fn is_finished(&self) -> bool {
        self.word().is_finished()
    }

    /// The cancel that reached this signal, once it has fired.
    pub(crate) fn cancel_record(&self) -> Option<CancelRecord> {
        if !self.is_cancelled() {
            return None;
        }
        self.lock().cancel.clone()
    }

    pub(crate) fn cancel_reason(&self) -> Option<Arc<str>> {
        if !self.is_cancelled() {
            return None;
        }
        self.lock()
            .cancel
            .as_ref()
            .map(|cancel| cancel.reason.clone())
    }

    /// Fires the signal if it is still pending: `Queued` or `Running` becomes `Cancelled`, the tokio-util token
    /// is cancelled, and waiters, callbacks and dependents go to `delivery`. A `Queued` signal becomes finished
    /// as well, and its finish waiters are woken. True if this call fired it.
    pub(crate) fn fire(&self, cancel: CancelRecord, delivery: &mut Delivery) -> bool {
        if !self.status().is_pending() {
            return false;
        }
        let mut state = self.lock();
        let word = self.word();
        if !word.status().is_pending() {
            return false;
        }
        let finished = if word.status() == SubagentStatus::Queued {
            FINISHED
        } else {
            word.0 & FINISHED
        };
        self.set_word(SubagentStatus::Cancelled as u8 | finished);
        if let Some(token) = &state.token {
            delivery.cancel_bridge(token.clone());
        }
        delivery.wake_waiters(&mut state.cancel_waiters);
        state.wake_resume_waiters(delivery);
        if finished != 0 {
            delivery.wake_waiters(&mut state.finish_waiters);
        }
        let callbacks = std::mem::take(&mut state.callbacks);
        if !callbacks.is_empty() {
            let handlers = state.rare().handlers.get_or_insert_with(Arc::default);
            delivery.run(callbacks, handlers);
        }
        for (_, dependent) in state.dependents.drain(..) {
            if let Some(dependent) = dependent.upgrade() {
                delivery.fire_dependent(dependent, cancel.clone());
            }
        }
        // A fired signal depends on nothing any more.
        delivery.release_sources(&mut state.sources);
        state.cancel = Some(cancel);
        true
    }

    /// Records the runner's end: a pending signal takes the ending's status, a `Cancelled` one keeps it, and
    /// either becomes finished. Returns `None` if it had already finished, otherwise whether this moved it out
    /// of its pending status.
    pub(crate) fn finish(&self, ending: Ending, delivery: &mut Delivery) -> Option<bool> {
        let unlocked = self.word.load(Ordering::Acquire);
        if unlocked & (LOCK_USED | FINISHED) == 0 {
            let word = StatusWord(unlocked);
            let status = ended_status(word, ending);
            if self
                .word
                .compare_exchange(
                    unlocked,
                    status as u8 | FINISHED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Some(word.status().is_pending() && !status.is_pending());
            }
        }
        let mut state = self.lock();
        let word = self.word();
        if word.is_finished() {
            return None;
        }
        let running = word.status().is_pending();
        let status = ended_status(word, ending);
        self.set_word(status as u8 | FINISHED);
        delivery.wake_waiters(&mut state.finish_waiters);
        state.wake_resume_waiters(delivery);
        if status != SubagentStatus::Cancelled {
            // The token never fires now: what waited for it is released unrun.
            delivery.release(&mut state.cancel_waiters);
            delivery.release(&mut state.callbacks);
            delivery.release(&mut state.dependents);
        }
        delivery.release_sources(&mut state.sources);
        Some(running && !status.is_pending())
    }

    /// A runner takes a reserved task: `Queued` becomes `Running`. False if it was not queued.
    pub(crate) fn claim(&self) -> bool {
        self.move_unfinished(SubagentStatus::Queued, SubagentStatus::Running, None)
    }

    /// The runner pauses its task: `Running` becomes `Paused`. False if it was not running (or has finished).
    pub(crate) fn pause(&self) -> bool {
        self.move_unfinished(SubagentStatus::Running, SubagentStatus::Paused, None)
    }

    /// The session resumes a paused task: `Paused` becomes `Running`, and the resume waiters go to `delivery`.
    /// False if it was not paused.
    pub(crate) fn resume(&self, delivery: &mut Delivery) -> bool {
        self.move_unfinished(
            SubagentStatus::Paused,
            SubagentStatus::Running,
            Some(delivery),
        )
    }

    fn move_unfinished(
        &self,
        from: SubagentStatus,
        to: SubagentStatus,
        delivery: Option<&mut Delivery>,
    ) -> bool {
        let mut state = self.lock();
        if self.word().0 != from as u8 {
            return false;
        }
        self.set_word(to as u8);
        if let Some(delivery) = delivery {
            state.wake_resume_waiters(delivery);
        }
        true
    }

    /// Registers `callback` to run when the signal fires. Returns it back if the signal has already fired
    /// (the caller runs it at once); drops it if the signal finished without firing.
    pub(crate) fn add_callback(&self, callback: Callback) -> Result<Option<u64>, Callback> {
        if self.is_cancelled() {
            return Err(callback);
        }
        let mut state = self.lock();
        if self.is_cancelled() {
            return Err(callback);
        }
        if self.is_finished() {
            drop(state);
            drop(callback);
            return Ok(None);
        }
        let id = state.next_registration();
        state.callbacks.push((id, callback));
        Ok(Some(id))
    }

    /// The count of this signal's cancel handlers at work (contract §3, cancel and wait).
    pub(crate) fn handlers(&self) -> Arc<Handlers> {
        self.lock()
            .rare()
            .handlers
            .get_or_insert_with(Arc::default)
            .clone()
    }

    /// Removes a callback that has not run; true if it was still registered. It is dropped with no lock held.
    pub(crate) fn remove_callback(&self, id: u64) -> bool {
        let removed = {
            let mut state = self.lock();
            let position = state.callbacks.iter().position(|(key, _)| *key == id);
            position.map(|position| state.callbacks.swap_remove(position))
        };
        removed.is_some()
    }

    /// Registers a dependent to fire when this signal fires.
    pub(crate) fn add_dependent(&self, dependent: Weak<dyn Dependent>) -> Registration {
        let mut state = self.lock();
        if let Some(cancel) = &state.cancel {
            return Registration::Fired(cancel.clone());
        }
        if self.is_finished() {
            return Registration::Finished;
        }
        let id = state.next_registration();
        state.dependents.push((id, dependent));
        Registration::Registered(id)
    }

    /// Keeps `links` (this signal's registrations on its sources) until it fires or finishes; hands them back
    /// if it already has, for the caller to release.
    pub(crate) fn keep_sources(&self, links: Vec<SourceLink>) -> Vec<SourceLink> {
        let mut state = self.lock();
        if self.is_cancelled() || self.is_finished() {
            return links;
        }
        state.sources.extend(links);
        Vec::new()
    }

    /// Callbacks and dependents waiting for this signal: a diagnostic for leaks, back to zero once the signal
    /// fires, finishes, or each registration is removed.
    pub(crate) fn registration_count(&self) -> usize {
        let state = self.lock();
        state.callbacks.len() + state.dependents.len()
    }

    /// Calls `visit` with every registered callback of type `T`.
    pub(crate) fn visit_callbacks<T: Any>(&self, mut visit: impl FnMut(&T)) {
        let state = self.lock();
        for (_, callback) in &state.callbacks {
            let callback: &dyn Any = &**callback;
            if let Some(callback) = callback.downcast_ref::<T>() {
                visit(callback);
            }
        }
    }

    /// The tokio-util token bridged to this signal, made on first request; cancelled if the signal has fired.
    pub(crate) fn cancellation_token(&self) -> CancellationToken {
        let mut state = self.lock();
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

    /// Ready once fired. On `Pending` the waker is registered under `*key` (reused across polls), to be woken
    /// when the signal fires and released if it finishes first; [`remove_waiter`](Self::remove_waiter) takes
    /// it back when the waiter goes away.
    pub(crate) fn poll_cancelled(
        &self,
        context: &mut Context<'_>,
        key: &mut Option<u64>,
    ) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        let replaced = {
            let mut state = self.lock();
            if self.is_cancelled() {
                return Poll::Ready(());
            }
            if self.is_finished() {
                return Poll::Pending;
            }
            let state = &mut *state;
            register(
                &mut state.cancel_waiters,
                &mut state.next_registration,
                context.waker(),
                key,
            )
        };
        // Dropped once the lock is released: a waker may own foreign objects.
        drop(replaced);
        Poll::Pending
    }

    /// Ready once finished; registers like [`poll_cancelled`](Self::poll_cancelled).
    pub(crate) fn poll_finished(
        &self,
        context: &mut Context<'_>,
        key: &mut Option<u64>,
    ) -> Poll<()> {
        if self.is_finished() {
            return Poll::Ready(());
        }
        let replaced = {
            let mut state = self.lock();
            if self.is_finished() {
                return Poll::Ready(());
            }
            let state = &mut *state;
            register(
                &mut state.finish_waiters,
                &mut state.next_registration,
                context.waker(),
                key,
            )
        };
        drop(replaced);
        Poll::Pending
    }

    /// Ready once the signal is not paused (resumed, cancelled or finished); registers like
    /// [`poll_cancelled`](Self::poll_cancelled).
    pub(crate) fn poll_resumed(
        &self,
        context: &mut Context<'_>,
        key: &mut Option<u64>,
    ) -> Poll<()> {
        if self.word().0 != SubagentStatus::Paused as u8 {
            return Poll::Ready(());
        }
        let replaced = {
            let mut state = self.lock();
            if self.word().0 != SubagentStatus::Paused as u8 {
                return Poll::Ready(());
            }
            let state = &mut *state;
            let rare = state.rare.get_or_insert_with(Box::default);
            register(
                &mut rare.resume_waiters,
                &mut state.next_registration,
                context.waker(),
                key,
            )
        };
        drop(replaced);
        Poll::Pending
    }

    /// Takes back a waiter's registration; the waker is dropped with no lock held.
    pub(crate) fn remove_waiter(&self, key: u64) {
        let removed = {
            let mut state = self.lock();
            take_waiter(&mut state.cancel_waiters, key)
                .or_else(|| take_waiter(&mut state.finish_waiters, key))
                .or_else(|| {
                    let rare = state.rare.as_mut()?;
                    take_waiter(&mut rare.resume_waiters, key)
                })
        };
        drop(removed);
    }

    /// Blocks the calling thread until the signal fires (true) or `deadline` passes (false).
    pub(crate) fn wait_cancelled_blocking(&self, deadline: Option<Instant>) -> bool {
        self.wait_blocking(deadline, Self::poll_cancelled)
    }

    /// Blocks the calling thread until the signal is not paused (true) or `deadline` passes (false).
    pub(crate) fn wait_resumed_blocking(&self, deadline: Option<Instant>) -> bool {
        self.wait_blocking(deadline, Self::poll_resumed)
    }

    fn wait_blocking(
        &self,
        deadline: Option<Instant>,
        poll: impl Fn(&Self, &mut Context<'_>, &mut Option<u64>) -> Poll<()>,
    ) -> bool {
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut context = Context::from_waker(&waker);
        let mut key = None;
        let fired = loop {
            if poll(self, &mut context, &mut key).is_ready() {
                break true;
            }
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break false;
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        };
        if let Some(key) = key {
            self.remove_waiter(key);
        }
        fired
    }
}

impl Dependent for CancelSignal {
    /// A combined token fires with the first of its sources, naming that source's reason and origin.
    fn source_fired(&self, source: &CancelRecord, delivery: &mut Delivery) {
        let cancel = CancelRecord {
            cause: CancelCause::Linked,
            ..source.clone()
        };
        self.fire(cancel, delivery);
    }
}

impl Source for CancelSignal {
    fn remove_dependent(&self, id: u64) {
        let mut state = self.lock();
        if let Some(position) = state.dependents.iter().position(|(key, _)| *key == id) {
            state.dependents.swap_remove(position);
        }
    }

    fn into_sources(self: Arc<Self>) -> Vec<SourceLink> {
        // Taken out before the signal drops, so its own `Drop` finds nothing to unwind.
        Arc::into_inner(self).map_or_else(Vec::new, |mut signal| {
            std::mem::take(&mut signal.state.get_mut().sources)
        })
    }
}

impl Drop for CancelSignal {
    fn drop(&mut self) {
        // Unregister from the sources; a source whose last holder this was is dropped by the same loop, so
        // a long chain of combined or linked tokens unwinds without recursion. The last owner needs no lock.
        let sources = &mut self.state.get_mut().sources;
        if sources.is_empty() {
            // Most signals depend on nothing: no list to take and drop.
            return;
        }
        let mut pending = std::mem::take(sources);
        while let Some(link) = pending.pop() {
            link.source.remove_dependent(link.registration);
            pending.append(&mut link.source.into_sources());
        }
    }
}

/// The status an end leaves: a pending signal takes the ending's, a `Cancelled` one keeps its own.
fn ended_status(word: StatusWord, ending: Ending) -> SubagentStatus {
    match ending {
        _ if !word.status().is_pending() => word.status(),
        Ending::Completed => SubagentStatus::Completed,
        Ending::Failed => SubagentStatus::Failed,
        Ending::Stopped => word.status(),
    }
}

/// Registers `waker` in `list` under `*key`, reusing the key of an earlier poll of the same waiter. Returns
/// the waker it replaced, for the caller to drop once the lock is released (a waker may own foreign objects).
fn register(
    list: &mut Vec<(u64, Waker)>,
    next_registration: &mut u64,
    waker: &Waker,
    key: &mut Option<u64>,
) -> Option<Waker> {
    if let Some(id) = *key {
        if let Some((_, registered)) = list
            .iter_mut()
            .find(|(registered_id, _)| *registered_id == id)
        {
            if registered.will_wake(waker) {
                return None;
            }
            return Some(std::mem::replace(registered, waker.clone()));
        }
    }
    *next_registration += 1;
    list.push((*next_registration, waker.clone()));
    *key = Some(*next_registration);
    None
}

fn take_waiter(list: &mut Vec<(u64, Waker)>, key: u64) -> Option<Waker> {
    let position = list.iter().position(|(id, _)| *id == key)?;
    Some(list.swap_remove(position).1)
}

struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}
