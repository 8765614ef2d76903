//! `RedisEventReader`: a Redis session's events for `subagent_tracker.EventStream`, the same iterator that
//! in-memory sessions hand out.
//!
//! A background task on the runtime reads the session's stream, but only when the iterator asks for more, and
//! leaves what it read in a buffer. Waiting for an event therefore never holds one: an iteration cancelled
//! while it waits loses nothing, and the next one finds the event in the buffer.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use subagent_tracker_redis::{RedisEventSubscription, RedisTrackerError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::errors::redis_error;
use crate::events::SubagentEvent;
use crate::loop_inbox::{asyncio_future, WhenAbandoned};
use crate::runtime::{spawn, MadeIn};

/// What the reading task and the iterator share.
struct Shared {
    /// Events read and not yet taken; a read that failed leaves its error here, for the iterator to raise.
    buffer: Mutex<VecDeque<Result<subagent_tracker::SubagentEvent, RedisTrackerError>>>,
    /// The iterator found the buffer empty: read more.
    wanted: Notify,
    /// A read added to the buffer.
    arrived: Notify,
    closed: CancellationToken,
}

/// The events of one Redis session from the moment of subscribing; iterate it through
/// `subagent_tracker.EventStream`.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct RedisEventReader {
    shared: Arc<Shared>,
    made_in: MadeIn,
}

impl RedisEventReader {
    pub(crate) fn start(
        subscription: RedisEventSubscription,
        made_in: MadeIn,
    ) -> PyResult<RedisEventReader> {
        let shared = Arc::new(Shared {
            buffer: Mutex::new(VecDeque::new()),
            wanted: Notify::new(),
            arrived: Notify::new(),
            closed: CancellationToken::new(),
        });
        spawn(read_on_demand(subscription, shared.clone()))?;
        Ok(RedisEventReader { shared, made_in })
    }
}

async fn read_on_demand(mut subscription: RedisEventSubscription, shared: Arc<Shared>) {
    loop {
        tokio::select! {
            () = shared.closed.cancelled() => return,
            () = shared.wanted.notified() => {}
        }
        let read = tokio::select! {
            () = shared.closed.cancelled() => return,
            read = subscription.next() => read,
        };
        shared.buffer.lock().push_back(read);
        shared.arrived.notify_one();
    }
}

#[pymethods]
impl RedisEventReader {
    /// The next event read, or `None` when none is buffered (or the reader is closed). Raises
    /// `RegistryUnavailableError` for a read that failed; the next read connects again and goes on.
    fn try_next(&self, py: Python<'_>) -> PyResult<Option<SubagentEvent>> {
        // In a forked child, the buffer is the parent's (and its lock may be held by a thread the child lacks).
        self.made_in.check()?;
        if self.shared.closed.is_cancelled() {
            return Ok(None);
        }
        match self.shared.buffer.lock().pop_front() {
            None => Ok(None),
            Some(Ok(event)) => Ok(Some(SubagentEvent::new(event))),
            Some(Err(error)) => Err(redis_error(py, error)),
        }
    }

    /// `None` when an event is buffered or the reader is closed; otherwise asks for a read and returns a future
    /// of the running loop that completes when it arrives or the reader closes.
    fn readable<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.made_in.check()?;
        if self.shared.closed.is_cancelled() || !self.shared.buffer.lock().is_empty() {
            return Ok(None);
        }
        self.shared.wanted.notify_one();
        let shared = self.shared.clone();
        // `notify_one` keeps a permit when nobody waits, so an arrival between the check above and this wait
        // is not missed; a stale permit only makes the iterator look at the buffer once more.
        let arrival = async move {
            tokio::select! {
                () = shared.closed.cancelled() => {}
                () = shared.arrived.notified() => {}
            }
        };
        asyncio_future(py, self.made_in, WhenAbandoned::Stop, arrival, |py, ()| {
            Ok(py.None())
        })
        .map(Some)
    }

    /// Stops reading and wakes a waiting iteration; later reads find nothing.
    fn close(&self) {
        self.shared.closed.cancel();
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }
}

impl Drop for RedisEventReader {
    /// Ends the reading task, which would otherwise hold its connection for nobody.
    fn drop(&mut self) {
        self.shared.closed.cancel();
    }
}
