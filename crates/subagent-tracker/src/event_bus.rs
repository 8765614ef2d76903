//! Fan-out of lifecycle events to subscribers, each with a bounded buffer.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};

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
    waker: Option<Waker>,
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

    /// Delivers `event` to every subscriber and returns the wakers to wake once the caller holds no lock.
    pub(crate) fn publish(&self, event: SubagentEvent, wakers: &mut Vec<Waker>) {
        let subscribers = self.subscribers.read();
        for subscriber in subscribers.iter() {
            let mut state = subscriber.state.lock();
            if state.events.len() >= subscriber.capacity {
                state.events.pop_front();
                state.missed += 1;
            }
            state.events.push_back(event.clone());
            if let Some(waker) = state.waker.take() {
                wakers.push(waker);
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
/// returns one [`SubagentEventKind::Lagged`] event carrying how many were missed. Dropping the subscription
/// unsubscribes.
pub struct EventSubscription {
    bus: Arc<EventBus>,
    buffer: Arc<SubscriberBuffer>,
}

impl EventSubscription {
    /// The next buffered event, or `None` when there is none yet.
    pub fn try_next(&self) -> Option<SubagentEvent> {
        let mut state = self.buffer.state.lock();
        Self::pop(&mut state)
    }

    /// Polls for the next event; on `Pending`, `context`'s waker is woken when one arrives.
    pub fn poll_next(&self, context: &mut Context<'_>) -> Poll<SubagentEvent> {
        let mut state = self.buffer.state.lock();
        match Self::pop(&mut state) {
            Some(event) => Poll::Ready(event),
            None => {
                state.waker = Some(context.waker().clone());
                Poll::Pending
            }
        }
    }

    /// Polls until an event is buffered, without taking it; on `Pending`, `context`'s waker is woken when one
    /// arrives.
    pub fn poll_ready(&self, context: &mut Context<'_>) -> Poll<()> {
        let mut state = self.buffer.state.lock();
        if state.missed > 0 || !state.events.is_empty() {
            Poll::Ready(())
        } else {
            state.waker = Some(context.waker().clone());
            Poll::Pending
        }
    }

    /// Waits for the next event.
    pub async fn next(&self) -> SubagentEvent {
        poll_fn(|context| self.poll_next(context)).await
    }

    fn pop(state: &mut BufferState) -> Option<SubagentEvent> {
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
        self.bus.unsubscribe(&self.buffer);
    }
}
