//! `SubagentEvent` and the subscription that delivers them.

use parking_lot::Mutex;
use pyo3::prelude::*;

use crate::asyncio_waker::{future_for, with_wake_batch};
use crate::python_half::status_member;
use crate::python_types::python_repr;

/// One lifecycle event: `started`, `progress`, `cancelled`, `ended`, or `lagged` when events were missed.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct SubagentEvent {
    event: subagent_tracker::SubagentEvent,
}

impl SubagentEvent {
    pub(crate) fn new(event: subagent_tracker::SubagentEvent) -> SubagentEvent {
        SubagentEvent { event }
    }
}

fn is_lagged(event: &subagent_tracker::SubagentEvent) -> bool {
    event.kind == subagent_tracker::SubagentEventKind::Lagged
}

#[pymethods]
impl SubagentEvent {
    /// The task concerned; `None` on `lagged` events.
    #[getter]
    fn task_id(&self) -> Option<&str> {
        (!is_lagged(&self.event)).then_some(&*self.event.task_id)
    }

    /// `"started"`, `"progress"`, `"cancelled"`, `"ended"` or `"lagged"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.event.kind.as_str()
    }

    /// The task's status right after the event; `None` on `lagged` events.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if is_lagged(&self.event) {
            return Ok(None);
        }
        status_member(py, self.event.status).map(Some)
    }

    /// When it happened, in seconds since the epoch.
    #[getter]
    fn timestamp(&self) -> f64 {
        subagent_tracker::epoch_seconds(self.event.timestamp)
    }

    /// The cancel reason, on `cancelled` events (and `started` events of tasks that started cancelled).
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.event.reason.as_deref()
    }

    /// The progress message, on `progress` events.
    #[getter]
    fn message(&self) -> Option<&str> {
        self.event.message.as_deref()
    }

    /// How many events were missed, on `lagged` events; 0 otherwise.
    #[getter]
    fn missed(&self) -> u64 {
        self.event.missed
    }

    fn __repr__(&self) -> String {
        match is_lagged(&self.event) {
            true => format!("SubagentEvent(kind='lagged', missed={})", self.event.missed),
            false => format!(
                "SubagentEvent(kind='{}', task_id={}, status='{}')",
                self.event.kind.as_str(),
                python_repr(Some(&self.event.task_id)),
                self.event.status.as_str()
            ),
        }
    }
}

/// A live subscription to a session's events; `Session.events()` wraps it in an async iterator.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct EventSubscription {
    subscription: Mutex<subagent_tracker::EventSubscription>,
    closer: subagent_tracker::SubscriptionCloser,
}

impl EventSubscription {
    pub(crate) fn new(subscription: subagent_tracker::EventSubscription) -> EventSubscription {
        EventSubscription {
            closer: subscription.closer(),
            subscription: Mutex::new(subscription),
        }
    }
}

#[pymethods]
impl EventSubscription {
    /// The next buffered event, or `None` when none is buffered (or the subscription is closed).
    fn try_next(&self) -> Option<SubagentEvent> {
        let event = self.subscription.lock().try_next()?;
        Some(SubagentEvent { event })
    }

    /// `None` when an event is buffered or the subscription is closed; otherwise a future of the running
    /// loop that completes when either happens.
    fn readable(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        // Nothing to release when the future is dropped: the one waker slot is replaced by the next poll.
        let pending = future_for(py, (), |(), context| {
            self.subscription.lock().poll_ready(context)
        })?;
        Ok(pending.map(|(future, ())| future))
    }

    /// Unsubscribes, waking a coroutine that waits for the next event; later reads find nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        with_wake_batch(py, || self.closer.close())
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.subscription.lock().is_closed()
    }
}
