//! Hands the outcomes of work done on the Redis runtime to the asyncio loops that await them.
//!
//! The work for an `await` runs on the runtime's thread, but its outcome must become Python objects and be set
//! on its future on the loop's own thread. Each loop has an inbox: the runtime pushes outcomes into it as Rust
//! values, and only the push that finds it empty wakes the loop, which converts and settles everything queued
//! by then. Under load, one wake-up of the loop carries many outcomes.
//!
//! The loop is woken through a socket pair whose reading end it watches (`add_reader`): the runtime's thread
//! writes a byte, and never takes the interpreter. Taking it there (for `call_soon_threadsafe`) made the loop,
//! woken by that very call, wait for the interpreter on every outcome. A loop that cannot watch a socket
//! (Windows' proactor loop) is woken through `call_soon_threadsafe` instead.
//!
//! The loop's selector holds the drain, the drain holds the inbox, and the inbox holds the loop only by a weak
//! reference (to tell it apart from a later loop of the same thread). So the socket pair is closed only once the
//! loop has let go of the drain (when it closes), never while the loop still watches it. That moment is also
//! when the inbox closes: an outcome that arrives later has nobody to be settled for, and is dropped at once
//! (a runner's handle in it ends its task, as any dropped handle does) instead of waiting for a drain that
//! will never come. While outcomes wait, the inbox holds their futures, which hold the loop; the drain shows
//! the collector those futures, so a loop dropped unclosed with outcomes waiting is still collected.

use std::cell::RefCell;
use std::future::Future;
#[cfg(unix)]
use std::io::{ErrorKind, Read, Write};
#[cfg(unix)]
use std::os::{fd::AsRawFd, unix::net::UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use pyo3::PyTraverseError;

use crate::asyncio_waker::{is_done, running_loop};
use crate::interpreter::with_python;
use crate::runtime::{runtime, MadeIn};

/// Converts an outcome on the loop's thread and settles its future with it.
type Settle = Box<dyn FnOnce(Python<'_>, &Bound<'_, PyAny>) + Send>;

/// One outcome for the loop: the future it settles, and how.
struct Outcome {
    future: Py<PyAny>,
    settle: Settle,
}

/// The outcomes waiting for the loop, and whether the loop has let go of the inbox.
#[derive(Default)]
struct Queue {
    outcomes: Vec<Outcome>,
    /// Set once the loop that watched the inbox has closed or been collected.
    closed: bool,
}

/// What happens to the runtime's work when the coroutine awaiting it is cancelled.
#[derive(Clone, Copy)]
pub(crate) enum WhenAbandoned {
    /// The work stops: a wait, which changes nothing.
    Stop,
    /// The work runs to its end, so that a transition is never cut in half; its outcome is dropped (a runner's
    /// handle that nobody received ends its task, as any dropped handle does).
    Finish,
}

/// How the runtime's thread wakes an inbox's loop.
enum Wake {
    /// A byte written to the socket the loop watches; `watched` is drained by the loop as it settles.
    #[cfg(unix)]
    Socket {
        event_loop: Py<PyWeakrefReference>,
        written: UnixStream,
        watched: UnixStream,
    },
    /// `call_soon_threadsafe`, for a loop that cannot watch a socket or be weakly referenced.
    Threadsafe { event_loop: Py<PyAny> },
}

struct Inbox {
    wake: Wake,
    queue: Mutex<Queue>,
}

thread_local! {
    /// The inbox of the loop that last awaited Redis on this thread: a thread runs one loop at a time.
    static LAST_INBOX: RefCell<Option<Arc<Inbox>>> = const { RefCell::new(None) };
}

impl Inbox {
    fn of(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> Arc<Inbox> {
        let last = LAST_INBOX.with(|last| last.borrow().clone());
        if let Some(inbox) = last {
            if inbox.serves(py, event_loop) {
                return inbox;
            }
        }
        let inbox = Inbox::for_loop(py, event_loop);
        let replaced = LAST_INBOX.with(|last| last.borrow_mut().replace(inbox.clone()));
        // Out of the borrow: this may let go of a closed loop's inbox, whose drop may run Python code.
        drop(replaced);
        inbox
    }

    fn serves(&self, py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> bool {
        match &self.wake {
            #[cfg(unix)]
            Wake::Socket {
                event_loop: weak, ..
            } => weak
                .bind(py)
                .upgrade()
                .is_some_and(|served| served.is(event_loop)),
            Wake::Threadsafe { event_loop: served } => served.bind(py).is(event_loop),
        }
    }

    fn for_loop(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> Arc<Inbox> {
        #[cfg(unix)]
        if let Some(inbox) = Inbox::watched_by(py, event_loop) {
            return inbox;
        }
        Arc::new(Inbox {
            wake: Wake::Threadsafe {
                event_loop: event_loop.clone().unbind(),
            },
            queue: Mutex::default(),
        })
    }

    /// An inbox whose loop watches a socket for its wake-ups, unless the loop cannot.
    #[cfg(unix)]
    fn watched_by(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> Option<Arc<Inbox>> {
        let socket_pair = UnixStream::pair().and_then(|(written, watched)| {
            written.set_nonblocking(true)?;
            watched.set_nonblocking(true)?;
            Ok((written, watched))
        });
        let weak = PyWeakrefReference::new(event_loop);
        if let (Ok((written, watched)), Ok(weak)) = (socket_pair, weak) {
            let fd = watched.as_raw_fd();
            let inbox = Arc::new(Inbox {
                wake: Wake::Socket {
                    event_loop: weak.unbind(),
                    written,
                    watched,
                },
                queue: Mutex::default(),
            });
            let drain = DrainInbox::of(inbox.clone());
            if event_loop
                .call_method1(intern!(py, "add_reader"), (fd, drain))
                .is_ok()
            {
                return Some(inbox);
            }
        }
        None
    }

    /// Whether the loop watches a socket of the inbox, through the inbox's one drain.
    fn is_watched(&self) -> bool {
        match self.wake {
            #[cfg(unix)]
            Wake::Socket { .. } => true,
            Wake::Threadsafe { .. } => false,
        }
    }

    fn push(self: &Arc<Self>, outcome: Outcome) {
        let first = {
            let mut queue = self.queue.lock();
            if queue.closed {
                drop(queue);
                // Nobody is left to settle for. Dropped with the interpreter held, for the future it holds.
                with_python(move |_| drop(outcome));
                return;
            }
            queue.outcomes.push(outcome);
            queue.outcomes.len() == 1
        };
        if !first {
            // A drain is already due and has not taken the queue yet: it will settle this one too.
            return;
        }
        match &self.wake {
            #[cfg(unix)]
            Wake::Socket { written, .. } => {
                // A full socket already holds a wake-up, and one is all a drain needs.
                let _ = (&*written).write(&[1]);
            }
            Wake::Threadsafe { event_loop } => {
                with_python(|py| {
                    let drain = DrainInbox::of(self.clone());
                    let scheduled =
                        event_loop.call_method1(py, intern!(py, "call_soon_threadsafe"), (drain,));
                    if scheduled.is_err() {
                        // The loop has closed: nobody is left to settle for. Dropped with the interpreter held.
                        let waiting = std::mem::take(&mut self.queue.lock().outcomes);
                        drop(waiting);
                    }
                });
            }
        }
    }

    /// Empties the socket of its wake-ups before the queue is taken: a push after the take finds the queue
    /// empty and writes a wake-up that stays for the next drain.
    fn take_wake_ups(&self) {
        #[cfg(unix)]
        if let Wake::Socket { watched, .. } = &self.wake {
            let mut bytes = [0u8; 64];
            loop {
                match (&*watched).read(&mut bytes) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(error) if error.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        }
    }
}

/// Settles, on the loop's thread, every outcome queued in an inbox.
///
/// A drain the loop watches is its inbox's only one: its end is the loop letting go, which closes the inbox,
/// and it alone shows the collector the futures waiting there. A drain scheduled by `call_soon_threadsafe`
/// shares its inbox with every other drain, so it shows nothing; one the loop lets go of without running it
/// (the loop closed with it scheduled) closes the inbox too.
#[pyclass(frozen, module = "subagent_tracker._native")]
struct DrainInbox {
    inbox: Arc<Inbox>,
    ran: AtomicBool,
}

impl DrainInbox {
    fn of(inbox: Arc<Inbox>) -> DrainInbox {
        DrainInbox {
            inbox,
            ran: AtomicBool::new(false),
        }
    }

    /// Closes the inbox if the loop let go of it, and drops what waits there (the interpreter is held: this
    /// runs as the drain is deallocated or cleared).
    fn let_go(&self) {
        if self.inbox.is_watched() || !self.ran.load(Ordering::Acquire) {
            let waiting = {
                let mut queue = self.inbox.queue.lock();
                queue.closed = true;
                std::mem::take(&mut queue.outcomes)
            };
            drop(waiting);
        }
    }
}

#[pymethods]
impl DrainInbox {
    fn __call__(&self, py: Python<'_>) {
        self.ran.store(true, Ordering::Release);
        self.inbox.take_wake_ups();
        let queued = std::mem::take(&mut self.inbox.queue.lock().outcomes);
        for Outcome { future, settle } in queued {
            settle(py, future.bind(py));
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if !self.inbox.is_watched() {
            return Ok(());
        }
        // Waited for, never skipped: the collector's passes must see the same futures, or one seen in its
        // first pass and missed in its second would be taken for garbage. Nobody holds the lock long or while
        // waiting for the interpreter: the runtime only pushes under it, and Python runs after it is released.
        let queue = self.inbox.queue.lock();
        for outcome in &queue.outcomes {
            visit.call(&outcome.future)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        self.let_go();
    }
}

impl Drop for DrainInbox {
    fn drop(&mut self) {
        self.let_go();
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
        let settle = move |py: Python<'_>, resolved: &Bound<'_, PyAny>| {
            let (method, value) = match convert(py, outcome) {
                Ok(value) => (intern!(py, "set_result"), value),
                Err(error) => (
                    intern!(py, "set_exception"),
                    error.into_value(py).into_any(),
                ),
            };
            // Asking first would cost a call per outcome; a future its awaiter gave up on refuses instead.
            if let Err(error) = resolved.call_method1(method, (value,)) {
                if !is_done(resolved) {
                    error.write_unraisable(py, Some(resolved));
                }
            }
        };
        inbox.push(Outcome {
            future: resolved,
            settle: Box::new(settle),
        });
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
