//! What a transition owes to others, collected under the locks and delivered once none is held.
//!
//! Transitions put wakers, callbacks and fired dependents here instead of acting on them in place: a waker or
//! callback may run foreign code (in Python, take the interpreter lock, or cancel another task), and must never
//! do so under a lock. Delivery is an explicit call, never a `Drop`: a panic unwinding through the tracker
//! drops what was collected and runs no user code.

use std::any::Any;
use std::sync::Arc;
use std::task::Waker;

use tokio_util::sync::CancellationToken;

use crate::token::cancel_record::CancelRecord;
use crate::token::contained::run_contained;
use crate::token::delivery_pool::{self, Work};
use crate::token::handlers::{HandlerDone, Handlers};

/// Something to run once when a token fires: any `FnOnce() + Send`, or a type of the caller's own (which
/// [`SubagentTaskToken::visit_callbacks`](crate::SubagentTaskToken::visit_callbacks) can find again).
pub trait OnCancel: Any + Send {
    /// Runs the callback, consuming it.
    fn on_cancel(self: Box<Self>);

    /// Runs the callback with `done`, which the callback finishes (or drops) once its work has ended, for a
    /// canceller that waits for the handlers (contract §3, cancel and wait). The default runs
    /// [`on_cancel`](Self::on_cancel), whose work ends when it returns; a callback that hands its work on (to
    /// an event loop, say) keeps `done` until that work ends.
    fn on_cancel_with(self: Box<Self>, done: HandlerDone) {
        self.on_cancel();
        done.finish();
    }
}

impl<F: FnOnce() + Send + 'static> OnCancel for F {
    fn on_cancel(self: Box<Self>) {
        self();
    }
}

/// A cancel callback as the signal stores it.
pub(crate) type Callback = Box<dyn OnCancel>;

/// Something a signal fires when it fires: a combined token, or a task linked to the signal's token.
pub(crate) trait Dependent: Send + Sync {
    /// The source fired with `source`'s reason and origin. Runs with no lock held, from a [`Delivery`]'s work
    /// list; whatever it fires in turn goes on the same list.
    fn source_fired(&self, source: &CancelRecord, delivery: &mut Delivery);
}

/// What a dependent registers on: a signal, seen only as far as a delivery needs to unlink from it.
pub(crate) trait Source: Send + Sync {
    /// Forgets the dependent registered under `id`.
    fn remove_dependent(&self, id: u64);

    /// The source's own links, if the caller held its last reference, for the caller to release in the same
    /// loop (so a chain of sources unwinds without recursion); none if anyone else still holds it.
    fn into_sources(self: Arc<Self>) -> Vec<SourceLink>;
}

/// A registration of a dependent on a source, kept by the dependent so it can remove it.
pub(crate) struct SourceLink {
    pub(crate) source: Arc<dyn Source>,
    pub(crate) registration: u64,
    /// What the source fires, when it is not the signal that keeps this link (a linked task's action): held
    /// here so that the source's weak reference to it stays valid exactly as long as the link.
    pub(crate) _action: Option<Arc<dyn Dependent>>,
}

/// Nothing to deliver costs one null check: the lists are allocated on the first thing owed.
#[derive(Default)]
#[must_use = "a delivery does nothing until `deliver` is called"]
pub(crate) struct Delivery {
    owed: Option<Box<Owed>>,
}

#[derive(Default)]
struct Owed {
    /// tokio-util tokens bridged to fired signals: cancelling one wakes its waiters, so it is delivered too.
    bridges: Vec<CancellationToken>,
    wakers: Vec<Waker>,
    /// Each with the mark of its work, which a waiting canceller counts.
    callbacks: Vec<(Callback, HandlerDone)>,
    /// Dependents whose source fired, to fire in turn: a work list, so chains never recurse.
    fired: Vec<(Arc<dyn Dependent>, CancelRecord)>,
    /// Registrations to remove from their sources.
    unlinked: Vec<SourceLink>,
    /// Waiters and callbacks released unrun (a token that will now never fire), dropped only once no lock
    /// is held: they may own foreign objects whose destructors run foreign code.
    released: Vec<Box<dyn Send>>,
}

impl Delivery {
    fn owed(&mut self) -> &mut Owed {
        self.owed.get_or_insert_with(Box::default)
    }

    pub(crate) fn cancel_bridge(&mut self, token: CancellationToken) {
        self.owed().bridges.push(token);
    }

    pub(crate) fn wake(&mut self, waker: Waker) {
        self.owed().wakers.push(waker);
    }

    /// Wakes the waiters of a signal's list, taking them out of it.
    // Inlined, and given the list itself: most transitions owe nothing, and an empty list is then one test, not
    // a list moved out, replaced and dropped.
    #[inline]
    pub(crate) fn wake_waiters(&mut self, waiters: &mut Vec<(u64, Waker)>) {
        if !waiters.is_empty() {
            self.owed()
                .wakers
                .extend(std::mem::take(waiters).into_iter().map(|(_, waker)| waker));
        }
    }

    /// Runs the callbacks of a list taken out of a signal; `handlers` counts them at work from now on.
    #[inline]
    pub(crate) fn run(&mut self, callbacks: Vec<(u64, Callback)>, handlers: &Arc<Handlers>) {
        if !callbacks.is_empty() {
            self.owed().callbacks.extend(
                callbacks
                    .into_iter()
                    .map(|(_, callback)| (callback, handlers.begin())),
            );
        }
    }

    pub(crate) fn fire_dependent(&mut self, dependent: Arc<dyn Dependent>, source: CancelRecord) {
        self.owed().fired.push((dependent, source));
    }

    /// Unregisters a signal's links from their sources, taking them out of its list.
    #[inline]
    pub(crate) fn release_sources(&mut self, links: &mut Vec<SourceLink>) {
        if !links.is_empty() {
            self.owed().unlinked.append(links);
        }
    }

    /// Keeps what a signal's list holds, taken out of it, to drop once no lock is held.
    #[inline]
    pub(crate) fn release<T: Send + 'static>(&mut self, released: &mut Vec<T>) {
        if !released.is_empty() {
            self.owed()
                .released
                .push(Box::new(std::mem::take(released)));
        }
    }

    /// Fires every dependent reached, and every dependent those reach, in a loop; then removes the released
    /// registrations. Runs no user code. Must be called with no lock held.
    pub(crate) fn settle(&mut self) {
        while let Some(owed) = self.owed.as_mut() {
            if let Some((dependent, source)) = owed.fired.pop() {
                dependent.source_fired(&source, self);
            } else if let Some(link) = owed.unlinked.pop() {
                link.source.remove_dependent(link.registration);
                // Dropping `link` may drop its source; the source's own links unwind iteratively.
            } else {
                break;
            }
        }
    }

    /// Settles, and gives what is left owed (to user code, and to drop), if anything: nothing owed costs one
    /// null check.
    fn into_owed(mut self) -> Option<Owed> {
        self.owed.as_ref()?;
        self.settle();
        self.owed.take().map(|owed| *owed)
    }

    /// Settles, then wakes every waker and then runs every callback, in this thread. A panicking waker or
    /// callback is contained and stops neither the caller nor the others. Must be called with no lock held.
    ///
    /// Wakers go first, so that a callback that blocks (say, until another task's waiter has run) never holds
    /// up the wake-ups of the cancel that ran it.
    #[inline]
    pub(crate) fn deliver(self) {
        if self.owed.is_some() {
            self.deliver_owed();
        }
    }

    fn deliver_owed(self) {
        let Some(Owed {
            bridges,
            wakers,
            callbacks,
            released,
            ..
        }) = self.into_owed()
        else {
            return;
        };
        for bridge in bridges {
            run_contained(|| bridge.cancel());
        }
        for waker in wakers {
            run_contained(|| waker.wake());
        }
        for (callback, done) in callbacks {
            run_contained(|| callback.on_cancel_with(done));
        }
        drop(released);
    }

    /// Settles in this thread, then hands the wake-ups and the callbacks to the delivery pool
    /// (`token::delivery_pool`), so that a thread that serves everyone (the deadline timer, a Redis worker's
    /// runtime) never runs user code and is never held up by it, and a burst of cancels costs a bounded
    /// number of threads.
    pub(crate) fn deliver_in_own_thread(self) {
        let Some(Owed {
            bridges,
            wakers,
            callbacks,
            released,
            ..
        }) = self.into_owed()
        else {
            return;
        };
        let wakes = !bridges.is_empty() || !wakers.is_empty();
        if !wakes && callbacks.is_empty() {
            // Nothing owed to user code: what was released goes here, as it would have with a delivery.
            return;
        }
        let part = |owed: Owed| Delivery {
            owed: Some(Box::new(owed)),
        };
        // Each callback on its own, so that a slow one holds up none of the others; what was released rides
        // with the first callback, or else with the wake-ups: off this thread either way.
        let mut released = Some(released);
        let callbacks: Vec<Delivery> = callbacks
            .into_iter()
            .map(|callback| {
                part(Owed {
                    callbacks: vec![callback],
                    released: released.take().unwrap_or_default(),
                    ..Owed::default()
                })
            })
            .collect();
        let wake_ups = wakes.then(|| {
            part(Owed {
                bridges,
                wakers,
                released: released.take().unwrap_or_default(),
                ..Owed::default()
            })
        });
        let work = |delivery: Delivery| -> Work { Box::new(move || delivery.deliver()) };
        delivery_pool::submit(
            wake_ups.map(work),
            callbacks.into_iter().map(work).collect(),
        );
    }
}
