//! Wakes asyncio futures from core wake-ups, once per event loop per call.
//!
//! A core waker fires in the thread that made the transition. Resolving one future per waker through
//! `call_soon_threadsafe` would write to the loop's self-pipe once per waiter; instead, a Python-facing call
//! collects the futures its transition wakes and hands each loop one batch: resolved directly when the caller
//! runs on that loop, or through a single `call_soon_threadsafe` otherwise. A Python callback run by the call
//! first flushes the batch collected so far, so that no wake-up waits on a callback.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use pyo3::exceptions::PyException;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

use crate::interpreter::with_python;

struct PendingFuture {
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
}

struct AsyncioWaker(PendingFuture, WakeTarget);

/// How many asyncio wakers and Python cancel callbacks exist in the process. While there are none, a call's
/// transitions can wake no future and run no callback, so it has nothing to collect and skips the thread-local.
static WAKE_TARGETS: AtomicUsize = AtomicUsize::new(0);

/// Counts an asyncio waker or a Python cancel callback in [`WAKE_TARGETS`] for as long as it exists.
pub(crate) struct WakeTarget(());

impl WakeTarget {
    pub(crate) fn new() -> WakeTarget {
        WAKE_TARGETS.fetch_add(1, Ordering::Relaxed);
        WakeTarget(())
    }
}

impl Drop for WakeTarget {
    fn drop(&mut self) {
        WAKE_TARGETS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the Python-facing calls running on a thread collect. A call made from a callback of another runs one
/// deeper; each entry carries the depth of the call that collected it, so every call takes back only its own.
/// Entries are pushed in order of depth (a nested call takes its own back before the outer call goes on), so a
/// call's own are the tail of each list.
struct Calls {
    /// How many collecting calls are running on this thread.
    depth: Cell<usize>,
    /// The futures the running calls' transitions woke.
    woken: RefCell<Vec<(usize, PendingFuture)>>,
    /// The first `KeyboardInterrupt` or `SystemExit` that a callback raised in each running call, for that call
    /// to raise once the other callbacks have run.
    interrupts: RefCell<Vec<(usize, PyErr)>>,
}

thread_local! {
    static CALLS: Calls = const {
        Calls {
            depth: Cell::new(0),
            woken: RefCell::new(Vec::new()),
            interrupts: RefCell::new(Vec::new()),
        }
    };
}

impl Calls {
    /// Adds `entry` for the running call, if one is collecting on this thread; gives it back otherwise.
    fn collect<T>(&self, list: &RefCell<Vec<(usize, T)>>, entry: T) -> Option<T> {
        match self.depth.get() {
            0 => Some(entry),
            depth => {
                list.borrow_mut().push((depth, entry));
                None
            }
        }
    }

    /// True when no call on this thread has collected anything: the common case, with nothing to take.
    fn is_empty(&self) -> bool {
        self.woken.borrow().is_empty() && self.interrupts.borrow().is_empty()
    }
}

/// Takes the entries of the call at `depth` (and of any deeper one, which only a panic leaves) out of `list`.
fn take_own<T>(list: &RefCell<Vec<(usize, T)>>, depth: usize) -> Vec<T> {
    let mut list = list.borrow_mut();
    let first = list
        .iter()
        .position(|(collected_at, _)| *collected_at >= depth)
        .unwrap_or(list.len());
    list.drain(first..).map(|(_, entry)| entry).collect()
}

impl Wake for AsyncioWaker {
    fn wake(self: Arc<Self>) {
        with_python(|py| {
            let pending = match Arc::try_unwrap(self) {
                Ok(waker) => waker.0,
                Err(shared) => PendingFuture {
                    event_loop: shared.0.event_loop.clone_ref(py),
                    future: shared.0.future.clone_ref(py),
                },
            };
            let mut unclaimed = Some(pending);
            // No call collects while the thread's locals are being destroyed (a waker fired by one's destructor).
            let _collecting = CALLS.try_with(|calls| {
                unclaimed = unclaimed
                    .take()
                    .and_then(|pending| calls.collect(&calls.woken, pending));
            });
            if let Some(pending) = unclaimed {
                // Woken outside a collecting call (a deadline's delivery thread, say): deliver on its own.
                if let Some(interrupt) = dispatch(py, vec![pending]) {
                    keep_interrupt(py, interrupt);
                }
            }
        });
    }
}

/// Runs `call` (a core call), then resolves every future it woke, one batch per event loop, and raises a
/// `KeyboardInterrupt` or `SystemExit` that one of its callbacks raised.
///
/// Each call collects its own batch, even when nested in another's callback: a callback that cancels a task
/// and then waits for that task's waiters must find them woken.
///
/// Inlined, so that the call's arguments go straight to the core instead of being copied into the closure and
/// out again (a start's are large); the collecting path stays out of line.
#[inline(always)]
pub(crate) fn with_wake_batch<T>(py: Python<'_>, call: impl FnOnce() -> T) -> PyResult<T> {
    // The calls users repeat most (a start, an end) in a process that awaits nothing wake nobody. Making a waker
    // or a callback takes the interpreter, which the call holds, so none comes into being during it, unless the
    // call runs Python code that lets another thread in. A call that runs a filter's comparisons collects
    // always (`collecting_wake_batch`); one that runs only a destructor of a value it drops, before it fires the
    // new target, would resolve its wake-up at once, as a deadline's thread does, and report a callback's
    // interrupt rather than raise it.
    if WAKE_TARGETS.load(Ordering::Relaxed) == 0 {
        return Ok(call());
    }
    collecting_wake_batch(py, call)
}

/// [`with_wake_batch`] for a call that runs Python code before it fires what it fires (a filter's
/// comparisons): it collects even when nothing could be woken as it began, since that code may let another
/// thread register a waker or a callback that the call then fires.
#[inline(never)]
pub(crate) fn collecting_wake_batch<T>(py: Python<'_>, call: impl FnOnce() -> T) -> PyResult<T> {
    // One thread-local access for the whole call, and two empty lists read when nothing was collected.
    CALLS.with(|calls| {
        let scope = CallScope::enter(calls);
        let result = call();
        match scope.close() {
            None => Ok(result),
            Some(collected) => collected.deliver(py).map(|()| result),
        }
    })
}

/// A collecting call's depth on its thread. Leaving it by a panic (which `PyO3` turns into an exception) drops
/// what the call collected, so a later call on this thread never collects into an abandoned one.
struct CallScope<'a> {
    calls: &'a Calls,
    depth: usize,
}

impl<'a> CallScope<'a> {
    fn enter(calls: &'a Calls) -> CallScope<'a> {
        let depth = calls.depth.get() + 1;
        calls.depth.set(depth);
        CallScope { calls, depth }
    }

    /// Ends the call normally: what it collected, if anything.
    fn close(self) -> Option<Collected> {
        let calls = self.calls;
        let depth = self.depth;
        // Nothing left for `drop` to do.
        std::mem::forget(self);
        calls.depth.set(depth - 1);
        (!calls.is_empty()).then(|| Collected {
            woken: take_own(&calls.woken, depth),
            interrupt: take_own(&calls.interrupts, depth).into_iter().next(),
        })
    }
}

impl Drop for CallScope<'_> {
    fn drop(&mut self) {
        // Dropped once no list is borrowed: dropping a future may run Python code that calls in again.
        let abandoned = (
            take_own(&self.calls.woken, self.depth),
            take_own(&self.calls.interrupts, self.depth),
        );
        self.calls.depth.set(self.depth - 1);
        drop(abandoned);
    }
}

/// What one call collected.
struct Collected {
    woken: Vec<PendingFuture>,
    interrupt: Option<PyErr>,
}

impl Collected {
    /// Resolves the futures, then gives the interrupt to raise: a callback's, or else one raised while the
    /// futures were resolved.
    fn deliver(self, py: Python<'_>) -> PyResult<()> {
        let resolving = if self.woken.is_empty() {
            None
        } else {
            dispatch(py, self.woken)
        };
        self.interrupt.or(resolving).map_or(Ok(()), Err)
    }
}

/// Resolves the futures collected so far by the running call.
pub(crate) fn flush_wake_batch(py: Python<'_>) {
    let woken = CALLS.with(|calls| match calls.depth.get() {
        0 => Vec::new(),
        depth => take_own(&calls.woken, depth),
    });
    if !woken.is_empty() {
        if let Some(interrupt) = dispatch(py, woken) {
            keep_interrupt(py, interrupt);
        }
    }
}

/// Keeps an interrupt for the running call to raise; reports it when no Python call is waiting for it.
fn keep_interrupt(py: Python<'_>, interrupt: PyErr) {
    if let Some(interrupt) = defer_interrupt(interrupt) {
        interrupt.write_unraisable(py, None);
    }
}

/// Keeps a `KeyboardInterrupt` or `SystemExit` raised by a callback for the running call to raise (the first
/// one wins). Returns it back when no call is collecting on this thread, or the thread is ending.
pub(crate) fn defer_interrupt(error: PyErr) -> Option<PyErr> {
    let mut unclaimed = Some(error);
    // No call collects while the thread's locals are being destroyed: the interrupt is given back then.
    let _collecting = CALLS.try_with(|calls| {
        let Some(error) = unclaimed.take() else {
            return;
        };
        let depth = calls.depth.get();
        let first = calls
            .interrupts
            .borrow()
            .last()
            .is_none_or(|(raised_in, _)| *raised_in != depth);
        if depth > 0 && !first {
            // A later one is dropped with no list borrowed (its traceback may hold anything).
            drop(error);
            return;
        }
        unclaimed = calls.collect(&calls.interrupts, error);
    });
    unclaimed
}

/// The event loop running in this thread; `RuntimeError` (asyncio's own) when there is none.
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()
}

/// A core wait (`WaitForCancel`, `WaitForFinish`, or `()` for a poll with nothing to release) as an asyncio
/// future of the running loop.
///
/// Returns `None` when the wait is already over. Otherwise returns the future with the wait, which the caller
/// keeps for as long as the future may still be awaited: dropping the wait takes its registration back.
pub(crate) fn future_for<W>(
    py: Python<'_>,
    mut wait: W,
    poll: impl FnOnce(&mut W, &mut Context<'_>) -> Poll<()>,
) -> PyResult<Option<(Py<PyAny>, W)>> {
    let event_loop = running_loop(py)?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let waker = Waker::from(Arc::new(AsyncioWaker(
        PendingFuture {
            event_loop: event_loop.unbind(),
            future: future.clone().unbind(),
        },
        WakeTarget::new(),
    )));
    if poll(&mut wait, &mut Context::from_waker(&waker)).is_ready() {
        return Ok(None);
    }
    Ok(Some((future.unbind(), wait)))
}

/// Resolves `woken`, one batch per event loop: directly for the loop running here, through
/// `call_soon_threadsafe` for any other. Returns the first `KeyboardInterrupt` or `SystemExit` raised while
/// resolving or scheduling, for the caller to raise once every batch is resolved or scheduled.
fn dispatch(py: Python<'_>, mut woken: Vec<PendingFuture>) -> Option<PyErr> {
    static GET_RUNNING_LOOP_OR_NONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    // One function object for every dispatch, rather than one made per cross-thread batch.
    static RESOLVER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let running_loop = GET_RUNNING_LOOP_OR_NONE
        .import(py, "asyncio", "_get_running_loop")
        .and_then(pyo3::types::PyAnyMethods::call0)
        .ok();
    let mut interrupt = None;
    while let Some(first) = woken.first() {
        let event_loop = first.event_loop.clone_ref(py);
        let (same_loop, rest): (Vec<_>, Vec<_>) = woken
            .into_iter()
            .partition(|pending| pending.event_loop.is(&event_loop));
        woken = rest;
        let futures = PyList::new(py, same_loop.iter().map(|pending| pending.future.bind(py)));
        let outcome = futures.and_then(|futures| {
            if running_loop
                .as_ref()
                .is_some_and(|running| running.is(&event_loop))
            {
                if let Err(raised) = resolve_futures(&futures) {
                    interrupt.get_or_insert(raised);
                }
                Ok(())
            } else {
                let resolver = RESOLVER.get_or_try_init(py, || {
                    wrap_pyfunction!(resolve_futures, py)
                        .map(|function| function.into_any().unbind())
                })?;
                let schedule = || {
                    event_loop
                        .call_method1(
                            py,
                            intern!(py, "call_soon_threadsafe"),
                            (resolver, &futures),
                        )
                        .map(drop)
                };
                // Whether the batch was scheduled before an interrupt cannot be told: scheduled again, a
                // resolution finds its futures done.
                through_interrupt(py, &mut interrupt, || false, schedule)
            }
        });
        match outcome {
            Ok(()) => {}
            Err(error) if is_interrupt(py, &error) => {
                interrupt.get_or_insert(error);
            }
            // A closed loop has no one left to wake; anything else is reported without breaking the canceller.
            Err(error) if error.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py) => {}
            Err(error) => error.write_unraisable(py, None),
        }
    }
    interrupt
}

/// Resolves every future that is still pending. One its awaiter resolved or cancelled refuses the result;
/// it is skipped, and the others are resolved all the same.
///
/// A `KeyboardInterrupt` or `SystemExit` raised meanwhile (by a signal handler that ran in the code
/// `set_result` calls, say: a Ctrl-C) is raised once every future is resolved, the first one only: it is never
/// taken for a refused result. Run by the loop, it leaves `run_forever` as it would from any callback.
#[pyfunction]
fn resolve_futures(futures: &Bound<'_, PyList>) -> PyResult<()> {
    let py = futures.py();
    let set_result = intern!(py, "set_result");
    let mut interrupt = None;
    for future in futures.iter() {
        // Asking first would cost a call per waiter; a done future refuses the result instead.
        let resolve = || future.call_method1(set_result, (py.None(),)).map(drop);
        match through_interrupt(py, &mut interrupt, || is_done(&future), resolve) {
            Err(error) if is_interrupt(py, &error) => {
                interrupt.get_or_insert(error);
            }
            Err(error) if !is_done(&future) => error.write_unraisable(py, Some(&future)),
            _ => {}
        }
    }
    interrupt.map_or(Ok(()), Err)
}

/// Runs `step`; when a `KeyboardInterrupt` or `SystemExit` stops it, keeps the first such interrupt in
/// `interrupt` and runs `step` once more, unless `took_effect` says the interrupt came after it did: an
/// interrupt never leaves a waiter unresolved.
fn through_interrupt(
    py: Python<'_>,
    interrupt: &mut Option<PyErr>,
    took_effect: impl Fn() -> bool,
    step: impl Fn() -> PyResult<()>,
) -> PyResult<()> {
    match step() {
        Err(error) if is_interrupt(py, &error) => {
            interrupt.get_or_insert(error);
            if took_effect() {
                Ok(())
            } else {
                step()
            }
        }
        outcome => outcome,
    }
}

/// A `KeyboardInterrupt` or `SystemExit`: what Python raises outside the `Exception` hierarchy, so that no
/// `except Exception` swallows it.
fn is_interrupt(py: Python<'_>, error: &PyErr) -> bool {
    !error.is_instance_of::<PyException>(py)
}

/// Whether an asyncio future is done; one whose `done()` raises counts as not done.
pub(crate) fn is_done(future: &Bound<'_, PyAny>) -> bool {
    future
        .call_method0(intern!(future.py(), "done"))
        .and_then(|done| done.is_truthy())
        .unwrap_or(false)
}
