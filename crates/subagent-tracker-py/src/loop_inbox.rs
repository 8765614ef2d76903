//! Hands the outcomes of work done on the Redis runtime to the asyncio loops that await them.
//!
//! The work for an `await` runs on the runtime's thread, but its outcome must become Python objects and be set
//! on its future on the loop's own thread. Doing that per outcome would take the interpreter on the runtime's
//! thread and write the loop's self-pipe once per call. Instead each loop has an inbox: the runtime pushes
//! outcomes into it as Rust values, and only the push that finds it empty schedules a drain on the loop (one
//! `call_soon_threadsafe`), which converts and settles everything queued by then. Under load, one wake-up of
//! the loop carries many outcomes.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::intern;
use pyo3::prelude::*;

use crate::asyncio_waker::running_loop;
use crate::interpreter::with_python;
use crate::runtime::{runtime, MadeIn};

/// What the loop does with one outcome: converts it and settles its future.
type Settle = Box<dyn FnOnce(Python<'_>) + Send>;

/// What happens to the runtime's work when the coroutine awaiting it is cancelled.
#[derive(Clone, Copy)]
pub(crate) enum WhenAbandoned {
    /// The work stops: a wait, which changes nothing.
    Stop,
    /// The work runs to its end, so that a transition is never cut in half; its outcome is dropped (a runner's
    /// handle that nobody received ends its task, as any dropped handle does).
    Finish,
}

struct Inbox {
    event_loop: Py<PyAny>,
    queue: Mutex<Vec<Settle>>,
}

thread_local! {
    /// The inbox of the loop that last awaited Redis on this thread: a thread runs one loop at a time.
    static LAST_INBOX: RefCell<Option<Arc<Inbox>>> = const { RefCell::new(None) };
}

impl Inbox {
    fn of(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> Arc<Inbox> {
        let (inbox, replaced) = LAST_INBOX.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some(inbox) if inbox.event_loop.bind(py).is(event_loop) => (inbox.clone(), None),
                _ => {
                    let inbox = Arc::new(Inbox {
                        event_loop: event_loop.clone().unbind(),
                        queue: Mutex::new(Vec::new()),
                    });
                    (inbox.clone(), last.replace(inbox))
                }
            }
        });
        // Out of the borrow: this may let go of a closed loop, whose finalizer may run Python code.
        drop(replaced);
        inbox
    }

    fn push(self: &Arc<Self>, settle: Settle) {
        let first = {
            let mut queue = self.queue.lock();
            queue.push(settle);
            queue.len() == 1
        };
        if !first {
            // A drain is already scheduled and has not taken the queue yet: it will settle this one too.
            return;
        }
        with_python(|py| {
            let drain = DrainInbox {
                inbox: self.clone(),
            };
            let scheduled =
                self.event_loop
                    .call_method1(py, intern!(py, "call_soon_threadsafe"), (drain,));
            if scheduled.is_err() {
                // The loop has closed: nobody is left to settle for. Dropped here, with the interpreter held.
                drop(std::mem::take(&mut *self.queue.lock()));
            }
        });
    }
}

/// Settles, on the loop's thread, every outcome queued in an inbox. It needs no GC traversal: the loop it
/// refers to through the inbox is shared by every drain and by the thread's last inbox, and never held by them
/// alone.
#[pyclass(frozen, module = "subagent_tracker._native")]
struct DrainInbox {
    inbox: Arc<Inbox>,
}

#[pymethods]
impl DrainInbox {
    fn __call__(&self, py: Python<'_>) {
        let queued = std::mem::take(&mut *self.inbox.queue.lock());
        for settle in queued {
            settle(py);
        }
    }
}

/// Runs `future` on the runtime and returns a future of the running asyncio loop that resolves with its outcome,
/// converted by `convert` on the loop's thread.
pub(crate) fn asyncio_future<'py, F, T>(
    py: Python<'py>,
    made_in: MadeIn,
    when_abandoned: WhenAbandoned,
    future: F,
    convert: impl FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    made_in.check()?;
    let event_loop = running_loop(py)?;
    let waiting = event_loop.call_method0(intern!(py, "create_future"))?;
    let inbox = Inbox::of(py, &event_loop);
    let resolved = waiting.clone().unbind();
    let task = runtime()?.spawn(async move {
        let outcome = future.await;
        inbox.push(Box::new(move |py| {
            let resolved = resolved.bind(py);
            let (method, value) = match convert(py, outcome) {
                Ok(value) => (intern!(py, "set_result"), value),
                Err(error) => (
                    intern!(py, "set_exception"),
                    error.into_value(py).into_any(),
                ),
            };
            // Asking first would cost a call per outcome; a future its awaiter gave up on refuses instead.
            if let Err(error) = resolved.call_method1(method, (value,)) {
                let done = resolved
                    .call_method0(intern!(py, "done"))
                    .and_then(|done| done.is_truthy())
                    .unwrap_or(false);
                if !done {
                    error.write_unraisable(py, Some(resolved));
                }
            }
        }));
    });
    if let WhenAbandoned::Stop = when_abandoned {
        waiting.call_method1(
            intern!(py, "add_done_callback"),
            (AbortOnDone {
                task: task.abort_handle(),
            },),
        )?;
    }
    Ok(waiting)
}

/// Aborts the runtime's work for an asyncio future once that future is done (resolved, or cancelled by its
/// caller), so an abandoned wait leaves nothing running.
#[pyclass(frozen, module = "subagent_tracker._native")]
struct AbortOnDone {
    task: tokio::task::AbortHandle,
}

#[pymethods]
impl AbortOnDone {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.task.abort();
    }
}
