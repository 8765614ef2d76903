//! How many of a signal's cancel callbacks ("handlers") are still at work, for a canceller that waits for them
//! (contract §3, cancel and wait).
//!
//! A handler is at work from the moment its signal fires (or, registered after the fire, from its
//! registration) until its [`HandlerDone`] is finished: at once for a plain callback, when its work ends for
//! one that hands its work on (a Python coroutine function, scheduled on its event loop).
//!
//! The count is an atomic, so that a fire can add to it under the signal's lock (a leaf) without taking
//! another lock; the waiters' list has a leaf lock of its own, never taken under another lock. A waiter
//! registers under that lock and reads the count there; the handler that brings the count to zero takes the
//! list under the same lock, so no wake-up is lost.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::sync::{AtomicU64, Mutex};
use crate::token::contained::run_contained;
use crate::token::delivery_pool::{self, Work};

#[derive(Default)]
pub(crate) struct Handlers {
    running: AtomicU64,
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    next: u64,
    list: Vec<(u64, Waker)>,
}

impl Handlers {
    /// A handler starts work; the mark it finishes when its work ends.
    pub(crate) fn begin(self: &Arc<Self>) -> HandlerDone {
        self.running.fetch_add(1, Ordering::AcqRel);
        HandlerDone {
            handlers: Some(self.clone()),
        }
    }

    /// How many handlers are at work now.
    pub(crate) fn running(&self) -> u64 {
        self.running.load(Ordering::Acquire)
    }

    /// Ready once no handler is at work. On `Pending` the waker is registered under `*key`, reused across polls.
    pub(crate) fn poll_idle(&self, context: &mut Context<'_>, key: &mut Option<u64>) -> Poll<()> {
        if self.running() == 0 {
            return Poll::Ready(());
        }
        let replaced = {
            let mut waiters = self.waiters.lock();
            if self.running() == 0 {
                return Poll::Ready(());
            }
            let waiters = &mut *waiters;
            match key.and_then(|id| {
                waiters
                    .list
                    .iter_mut()
                    .find(|(registered, _)| *registered == id)
            }) {
                Some((_, registered)) if registered.will_wake(context.waker()) => None,
                Some((_, registered)) => {
                    Some(std::mem::replace(registered, context.waker().clone()))
                }
                None => {
                    waiters.next += 1;
                    waiters.list.push((waiters.next, context.waker().clone()));
                    *key = Some(waiters.next);
                    None
                }
            }
        };
        // Dropped with the lock released: a waker may own foreign objects.
        drop(replaced);
        Poll::Pending
    }

    /// Takes back a waiter's registration.
    pub(crate) fn remove_waiter(&self, key: u64) {
        let removed = {
            let mut waiters = self.waiters.lock();
            let position = waiters.list.iter().position(|(id, _)| *id == key);
            position.map(|position| waiters.list.swap_remove(position))
        };
        drop(removed);
    }

    /// One handler ended; the waiters to wake if it was the last.
    fn end(&self) -> Vec<(u64, Waker)> {
        if self.running.fetch_sub(1, Ordering::AcqRel) != 1 {
            return Vec::new();
        }
        std::mem::take(&mut self.waiters.lock().list)
    }
}

/// Held while one cancel handler is at work (see the module's docs). [`finish`](Self::finish) it when the
/// handler's work ends; dropped unfinished (a handler that panicked, say), it ends the work all the same, and
/// wakes the waiters in a thread of its own: nothing is delivered from `Drop`.
#[must_use = "a handler is at work until its HandlerDone is finished"]
pub struct HandlerDone {
    handlers: Option<Arc<Handlers>>,
}

impl HandlerDone {
    /// A mark that nothing counts, for a callback run outside a fire (nothing waits for it).
    pub fn untracked() -> HandlerDone {
        HandlerDone { handlers: None }
    }

    /// The handler's work has ended: wakes, in this thread, whoever waits for the last of its token's
    /// handlers.
    pub fn finish(mut self) {
        if let Some(handlers) = self.handlers.take() {
            wake(handlers.end());
        }
    }
}

impl Drop for HandlerDone {
    fn drop(&mut self) {
        if let Some(handlers) = self.handlers.take() {
            let waiters = handlers.end();
            if !waiters.is_empty() {
                let wake_ups: Work = Box::new(move || wake(waiters));
                delivery_pool::submit(Some(wake_ups), Vec::new());
            }
        }
    }
}

/// Wakes the waiters for a token's last handler, each contained.
fn wake(waiters: Vec<(u64, Waker)>) {
    for (_, waker) in waiters {
        run_contained(|| waker.wake());
    }
}

impl std::fmt::Debug for HandlerDone {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("HandlerDone")
            .finish_non_exhaustive()
    }
}
