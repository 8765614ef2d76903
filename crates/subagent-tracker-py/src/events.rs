//! `SubagentEvent` and the subscription that delivers them.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;

use crate::asyncio_waker::future_for;
use crate::python_types::{epoch_seconds, python_repr, status_member};

/// One lifecycle event: `started`, `progress`, `cancelled`, `ended`, or `lagged` when events were missed.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct SubagentEvent {
    event: subagent_tracker::SubagentEvent,
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
        epoch_seconds(self.event.timestamp)
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
    // `None` once closed, which unsubscribes at once rather than when the garbage collector gets to it.
    subscription: Mutex<Option<Arc<subagent_tracker::EventSubscription>>>,
}

impl EventSubscription {
    /// The live subscription, if any; the lock is released before any Python code runs.
    fn subscription(&self) -> Option<Arc<subagent_tracker::EventSubscription>> {
        self.subscription.lock().clone()
    }

    pub(crate) fn new(subscription: subagent_tracker::EventSubscription) -> EventSubscription {
        EventSubscription {
            subscription: Mutex::new(Some(Arc::new(subscription))),
        }
    }
}

#[pymethods]
impl EventSubscription {
    /// The next buffered event, or `None` when none is buffered (or the subscription is closed).
    fn try_next(&self) -> Option<SubagentEvent> {
        let event = self.subscription()?.try_next()?;
        Some(SubagentEvent { event })
    }

    /// `None` when an event is buffered; otherwise a future of the running loop that completes when one is.
    fn readable(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let Some(subscription) = self.subscription() else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "the event subscription is closed",
            ));
        };
        future_for(py, |context| subscription.poll_ready(context))
    }

    /// Unsubscribes; later reads find nothing.
    fn close(&self) {
        self.subscription.lock().take();
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.subscription.lock().is_none()
    }
}
