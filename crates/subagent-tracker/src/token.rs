//! The token layer: the canceller-to-runner signal, as runners and combinators hold it.
//!
//! It knows nothing of sessions or task trees. The layer's parts, from the bottom up:
//! - [`cancel_record`]: why a signal fired;
//! - [`delivery`]: what a transition owes (wake-ups, callbacks, dependents to fire, links to drop), collected
//!   under the locks and delivered once none is held;
//! - [`signal`]: one signal's status word and everything waiting for it (a leaf lock, level 6 in the
//!   crate's hierarchy);
//! - [`callback`]: the registration of a cancel callback, which can take it back; [`handlers`]: how many of a
//!   signal's callbacks are still at work, for a canceller that waits for them;
//! - this file: [`SubagentTaskToken`], the handle on a signal, and its futures.
//!
//! The tracker layer above drives signals through their transitions; tokens only observe them.

pub(crate) mod callback;
pub(crate) mod cancel_record;
pub(crate) mod contained;
pub(crate) mod delivery;
pub(crate) mod delivery_pool;
pub(crate) mod handlers;
pub(crate) mod signal;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::token::contained::run_contained;
use crate::token::delivery::{Delivery, Dependent, OnCancel, SourceLink};
use crate::token::signal::{CancelSignal, Registration};
use crate::{CancelCallback, SubagentStatus};

/// Fires exactly when its task becomes `Cancelled`: directly, by cascade, by its session, by its deadline or
/// by a token it is linked to. A token made by [`any`](Self::any) fires with the first of its sources.
///
/// The token of a task that completed or failed never fires afterwards. Checks are one atomic load and take
/// no lock, so a runner can check on every streamed chunk. Clones observe the same signal.
#[derive(Clone)]
pub struct SubagentTaskToken {
    signal: Arc<CancelSignal>,
    task_id: Option<Arc<str>>,
}

impl SubagentTaskToken {
    pub(crate) fn new(signal: Arc<CancelSignal>, task_id: Arc<str>) -> Self {
        SubagentTaskToken {
            signal,
            task_id: Some(task_id),
        }
    }

    /// The id of the task the token belongs to; `None` for a token made by [`any`](Self::any).
    #[must_use]
    pub fn task_id(&self) -> Option<&Arc<str>> {
        self.task_id.as_ref()
    }

    /// True once the token has fired.
    #[inline]
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.signal.is_cancelled()
    }

    /// The reason of the cancel that fired the token, once it has.
    #[must_use]
    pub fn reason(&self) -> Option<Arc<str>> {
        self.signal.cancel_reason()
    }

    /// The task whose cancel fired the token (for a combined token, its source's), once it has.
    #[must_use]
    pub fn origin(&self) -> Option<Arc<str>> {
        self.signal.cancel_record().map(|cancel| cancel.origin)
    }

    /// Waits until the token fires. Never completes if the task ends without being cancelled. Dropping the
    /// future takes its registration back, so abandoned waits leave nothing behind.
    pub fn cancelled(&self) -> WaitForCancel {
        WaitForCancel(Waiter {
            signal: self.signal.clone(),
            key: None,
        })
    }

    /// Blocks the calling thread until the token fires (true) or `timeout` passes (false). `None`, or a
    /// timeout too long to represent, waits as long as it takes.
    #[must_use]
    pub fn wait_blocking(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        self.signal.wait_cancelled_blocking(deadline)
    }

    /// A future that is ready once none of this token's cancel callbacks is at work (contract §3, cancel and
    /// wait): at once before the token fires, and once each callback that the fire ran (or that was registered
    /// after it) has finished its work.
    pub fn wait_for_handlers(&self) -> crate::WaitForHandlers {
        crate::WaitForHandlers::of([self.signal.handlers()])
    }

    /// Runs `callback` once when the token fires: at once, in this thread, if it already has; otherwise in
    /// the thread that fires it, after the cancel has taken effect and its wake-ups were delivered (for a
    /// deadline, in a thread of its own, never on the timer's). If the task ends without being cancelled
    /// the callback is released unrun. A panicking callback disturbs neither the canceller nor the other
    /// callbacks.
    pub fn on_cancel(&self, callback: impl OnCancel) -> CancelCallback {
        match self.signal.add_callback(Box::new(callback)) {
            Ok(Some(id)) => CancelCallback::registered(Arc::downgrade(&self.signal), id),
            Ok(None) => CancelCallback::spent(),
            Err(callback) => {
                // Registered after the fire: at work from now on, as if the fire had run it.
                let done = self.signal.handlers().begin();
                run_contained(|| callback.on_cancel_with(done));
                CancelCallback::spent()
            }
        }
    }

    /// A token that fires when any of `tokens` fires (at once if one already has), with that token's reason
    /// and origin, and cause `Linked`.
    ///
    /// It belongs to no task. It lives while it is held or something depends on it (a task linked to it,
    /// another combined token), and then removes its registrations on the sources; so combining long-lived
    /// tokens leaks nothing, and `start(linked=[any(...)])` works without keeping the combined token.
    #[must_use]
    pub fn any(tokens: impl IntoIterator<Item = SubagentTaskToken>) -> SubagentTaskToken {
        let combined = Arc::new(CancelSignal::new(SubagentStatus::Running));
        let as_dependent: Weak<dyn Dependent> = Arc::downgrade(&combined) as Weak<CancelSignal>;
        let mut delivery = Delivery::default();
        let mut links = Vec::new();
        for token in tokens {
            match token.signal.add_dependent(as_dependent.clone()) {
                Registration::Registered(registration) => links.push(SourceLink {
                    source: token.signal,
                    registration,
                    _action: None,
                }),
                Registration::Fired(cancel) => {
                    combined.source_fired(&cancel, &mut delivery);
                    break;
                }
                Registration::Finished => {}
            }
        }
        delivery.release_sources(&mut combined.keep_sources(links));
        delivery.deliver();
        SubagentTaskToken {
            signal: combined,
            task_id: None,
        }
    }

    /// Callbacks and links waiting on this token: registered, not yet run, not removed. A diagnostic for
    /// leaks: it drops to zero when the token fires (they run) or its task ends (they are released).
    #[must_use]
    pub fn callback_count(&self) -> usize {
        self.signal.registration_count()
    }

    /// True when nothing else holds this token's signal: no clone, no task linked to it, no combined token
    /// built on it (a task's own token is always held by its task too). A binding's garbage-collector
    /// support uses it to tell whether its object alone owns the callbacks registered through it.
    #[must_use]
    pub fn is_only_holder(&self) -> bool {
        Arc::strong_count(&self.signal) == 1
    }

    /// Calls `visit` with each callback of type `T` still registered on this token (for a binding that must
    /// show its garbage collector what its callbacks hold).
    pub fn visit_callbacks<T: Any>(&self, visit: impl FnMut(&T)) {
        self.signal.visit_callbacks(visit);
    }

    /// A tokio-util [`CancellationToken`] that fires with this one, for `select!` and APIs that take one.
    /// It is made on first request, and is already cancelled if this token has fired.
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.signal.cancellation_token()
    }

    /// When the token fired, once it has.
    #[must_use]
    pub fn cancelled_at(&self) -> Option<SystemTime> {
        self.signal.cancel_record().map(|cancel| cancel.at)
    }

    pub(crate) fn signal(&self) -> &Arc<CancelSignal> {
        &self.signal
    }
}

impl fmt::Debug for SubagentTaskToken {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SubagentTaskToken")
            .field("task_id", &self.task_id)
            .field("is_cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A waiter's registration on a signal, taken back when the waiter is dropped.
struct Waiter {
    signal: Arc<CancelSignal>,
    key: Option<u64>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.signal.remove_waiter(key);
        }
    }
}

/// The future of [`SubagentTaskToken::cancelled`]: ready once the token fires.
///
/// It registers its waker on the first poll that finds the token pending, and takes it back when dropped.
#[must_use = "futures do nothing unless polled"]
pub struct WaitForCancel(Waiter);

impl WaitForCancel {
    /// Polls for the cancel without pinning (the future is `Unpin`).
    pub fn poll_cancelled(&mut self, context: &mut Context<'_>) -> Poll<()> {
        let waiter = &mut self.0;
        waiter.signal.poll_cancelled(context, &mut waiter.key)
    }
}

impl Future for WaitForCancel {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        self.poll_cancelled(context)
    }
}

/// The future of a task's end ([`TaskWatch`](crate::TaskWatch)): ready once the task has finished. Dropping
/// it takes its registration back.
#[must_use = "futures do nothing unless polled"]
pub struct WaitForFinish(Option<Waiter>);

impl WaitForFinish {
    pub(crate) fn new(signal: Arc<CancelSignal>) -> WaitForFinish {
        WaitForFinish(Some(Waiter { signal, key: None }))
    }

    /// A wait for a run known to have finished: ready at once.
    pub(crate) fn ready() -> WaitForFinish {
        WaitForFinish(None)
    }

    /// Polls for the end without pinning (the future is `Unpin`).
    pub fn poll_finished(&mut self, context: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            Some(waiter) => waiter.signal.poll_finished(context, &mut waiter.key),
            None => Poll::Ready(()),
        }
    }
}

impl Future for WaitForFinish {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        self.poll_finished(context)
    }
}

/// The future of a paused task's resume ([`ResumeWatch::wait_for_resume`](crate::ResumeWatch::wait_for_resume)):
/// ready once the task is no longer paused, whether resumed, cancelled or ended. Dropping it takes its
/// registration back.
#[must_use = "futures do nothing unless polled"]
pub struct WaitForResume(Waiter);

impl WaitForResume {
    pub(crate) fn new(signal: Arc<CancelSignal>) -> WaitForResume {
        WaitForResume(Waiter { signal, key: None })
    }

    /// Polls for the resume without pinning (the future is `Unpin`).
    pub fn poll_resumed(&mut self, context: &mut Context<'_>) -> Poll<()> {
        let waiter = &mut self.0;
        waiter.signal.poll_resumed(context, &mut waiter.key)
    }
}

impl Future for WaitForResume {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        self.poll_resumed(context)
    }
}
