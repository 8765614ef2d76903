//! Fan-out of lifecycle events to subscribers, each with a bounded buffer.
//!
//! Events are published under the task's record lock, so the bus's locks come next in the crate's lock
//! hierarchy (see the crate root): level 3, the list of subscribers, and level 4, one subscriber's buffer.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::SystemTime;

use crate::sync::{AtomicUsize, Mutex, RwLock};
use crate::token::delivery::Delivery;
use crate::{SubagentEvent, SubagentEventKind, SubagentStatus};

/// The default number of events a subscriber may hold before it starts missing the oldest.
pub const DEFAULT_EVENT_BUFFER: usize = 4096;

/// The publishing side, owned by the tracker.
///
/// Publishing never blocks on a subscriber: a full buffer drops its oldest event and counts it as missed.
pub(crate) struct EventBus {
    subscribers: RwLock<Vec<Arc<SubscriberBuffer>>>,
    // Read on every lifecycle step so that a tracker without subscribers pays one atomic load per event.
    subscriber_count: AtomicUsize,
}

struct SubscriberBuffer {
    capacity: usize,
    state: Mutex<BufferState>,
}

#[derive(Default)]
struct BufferState {
    events: VecDeque<SubagentEvent>,
    missed: u64,
    /// The one consumer's waker (polling takes `&mut` the subscription, so there is only one).
    waker: Option<Waker>,
    closed: bool,
}

impl EventBus {
    pub(crate) fn new() -> EventBus {
        EventBus {
            subscribers: RwLock::new(Vec::new()),
            subscriber_count: AtomicUsize::new(0),
        }
    }

    /// True when someone listens; callers skip building events otherwise.
    #[inline]
    pub(crate) fn has_subscribers(&self) -> bool {
        self.subscriber_count.load(Ordering::Acquire) > 0
    }

    pub(crate) fn subscribe(self: &Arc<Self>, capacity: usize) -> EventSubscription {
        let buffer = Arc::new(SubscriberBuffer {
            capacity: capacity.max(1),
            state: Mutex::new(BufferState::default()),
        });
        let mut subscribers = self.subscribers.write();
        subscribers.push(buffer.clone());
        self.subscriber_count
            .store(subscribers.len(), Ordering::Release);
        EventSubscription {
            bus: self.clone(),
            buffer,
        }
    }

    /// Delivers `event` to every subscriber; their wakers go to `delivery`, to be woken once no lock is held.
    pub(crate) fn publish(&self, event: &SubagentEvent, delivery: &mut Delivery) {
        let subscribers = self.subscribers.read();
        for subscriber in subscribers.iter() {
            let mut state = subscriber.state.lock();
            if state.events.len() >= subscriber.capacity {
                state.events.pop_front();
                state.missed += 1;
            }
            state.events.push_back(event.clone());
            if let Some(waker) = state.waker.take() {
                delivery.wake(waker);
            }
        }
    }

    fn unsubscribe(&self, buffer: &Arc<SubscriberBuffer>) {
        let mut subscribers = self.subscribers.write();
        subscribers.retain(|candidate| !Arc::ptr_eq(candidate, buffer));
        self.subscriber_count
            .store(subscribers.len(), Ordering::Release);
    }
}

/// A subscription to a tracker's lifecycle events, from the moment it was made.
///
/// When the subscriber falls more than its capacity behind, the oldest events are dropped and the next read
/// returns one [`SubagentEventKind::Lagged`] event carrying how many were missed. Reading takes `&mut self`:
/// a subscription has one consumer. [`close`](Self::close) (from anywhere, through a [`SubscriptionCloser`])
/// or dropping the subscription unsubscribes; a consumer waiting for the next event then gets `None`.
pub struct EventSubscription {
    bus: Arc<EventBus>,
    buffer: Arc<SubscriberBuffer>,
}

/// Closes a subscription from another thread or task than its consumer's.
#[derive(Clone)]
pub struct SubscriptionCloser {
    bus: Arc<EventBus>,
    buffer: Arc<SubscriberBuffer>,
}

impl SubscriptionCloser {
    /// Unsubscribes and wakes the consumer, whose next read returns `None`. Closing twice does nothing.
    pub fn close(&self) {
        if let Some(waker) = close(&self.bus, &self.buffer) {
            waker.wake();
        }
    }
}

/// Marks the buffer closed and unsubscribes it; returns the consumer's waker, for the caller to wake.
fn close(bus: &EventBus, buffer: &Arc<SubscriberBuffer>) -> Option<Waker> {
    let waker = {
        let mut state = buffer.state.lock();
        if state.closed {
            return None;
        }
        state.closed = true;
        state.events.clear();
        state.waker.take()
    };
    bus.unsubscribe(buffer);
    waker
}

impl EventSubscription {
    /// The next buffered event; `None` when none is buffered yet or the subscription is closed.
    pub fn try_next(&mut self) -> Option<SubagentEvent> {
        let mut state = self.buffer.state.lock();
        Self::pop(&mut state)
    }

    /// Polls for the next event: `Ready(None)` once closed; on `Pending`, `context`'s waker is woken when an
    /// event arrives or the subscription is closed.
    pub fn poll_next(&mut self, context: &mut Context<'_>) -> Poll<Option<SubagentEvent>> {
        let mut state = self.buffer.state.lock();
        if state.closed {
            return Poll::Ready(None);
        }
        match Self::pop(&mut state) {
            Some(event) => Poll::Ready(Some(event)),
            None => {
                let replaced = state.waker.replace(context.waker().clone());
                // Dropped once the lock is released: a waker may own foreign objects.
                drop(state);
                drop(replaced);
                Poll::Pending
            }
        }
    }

    /// Polls until an event is buffered or the subscription is closed, without taking anything; on
    /// `Pending`, `context`'s waker is woken when either happens.
    pub fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<()> {
        let mut state = self.buffer.state.lock();
        if state.closed || state.missed > 0 || !state.events.is_empty() {
            Poll::Ready(())
        } else {
            let replaced = state.waker.replace(context.waker().clone());
            drop(state);
            drop(replaced);
            Poll::Pending
        }
    }

    /// Waits for the next event; `None` once the subscription is closed.
    pub async fn next(&mut self) -> Option<SubagentEvent> {
        poll_fn(|context| self.poll_next(context)).await
    }

    /// True once closed.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.buffer.state.lock().closed
    }

    /// Unsubscribes; later reads return `None`.
    pub fn close(&mut self) {
        // The only consumer is the caller: there is nobody else to wake.
        drop(close(&self.bus, &self.buffer));
    }

    /// A handle that closes this subscription from elsewhere, waking its consumer.
    #[must_use]
    pub fn closer(&self) -> SubscriptionCloser {
        SubscriptionCloser {
            bus: self.bus.clone(),
            buffer: self.buffer.clone(),
        }
    }

    fn pop(state: &mut BufferState) -> Option<SubagentEvent> {
        if state.closed {
            return None;
        }
        if state.missed > 0 {
            let missed = std::mem::take(&mut state.missed);
            return Some(SubagentEvent {
                task_id: Arc::from(""),
                kind: SubagentEventKind::Lagged,
                status: SubagentStatus::Running,
                timestamp: SystemTime::now(),
                reason: None,
                message: None,
                missed,
            });
        }
        state.events.pop_front()
    }
}

impl Drop for EventSubscription {
    fn drop(&mut self) {
        // The consumer is going away: its waker is dropped, not woken (nothing is delivered from `Drop`).
        drop(close(&self.bus, &self.buffer));
    }
}
