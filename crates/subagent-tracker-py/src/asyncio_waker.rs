//! Wakes asyncio futures from core wake-ups, once per event loop per call.
//!
//! A core waker fires in the thread that made the transition. Resolving one future per waker through
//! `call_soon_threadsafe` would write to the loop's self-pipe once per waiter; instead, a Python-facing call
//! collects the futures its transition wakes and hands each loop one batch: resolved directly when the caller
//! runs on that loop, or through a single `call_soon_threadsafe` otherwise. A Python callback run by the call
//! first flushes the batch collected so far, so that no wake-up waits on a callback.

use std::cell::RefCell;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

use crate::interpreter::with_python;

struct PendingFuture {
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
}

struct AsyncioWaker(PendingFuture);

/// What the Python-facing call running on a thread collects.
#[derive(Default)]
struct Collecting {
    /// The futures its transitions woke.
    woken: Vec<PendingFuture>,
    /// A `KeyboardInterrupt` or `SystemExit` raised by one of its callbacks, for the call to raise once the
    /// other callbacks have run.
    interrupt: Option<PyErr>,
}

thread_local! {
    /// The innermost collecting call on this thread, if any.
    static CALL: RefCell<Option<Collecting>> = const { RefCell::new(None) };
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
            let unbatched = CALL.with(|call| match call.borrow_mut().as_mut() {
                Some(collecting) => {
                    collecting.woken.push(pending);
                    None
                }
                None => Some(pending),
            });
            if let Some(pending) = unbatched {
                // Woken outside a collecting call (a deadline's delivery thread, say): deliver on its own.
                dispatch(py, vec![pending]);
            }
        });
    }
}

/// Runs `call` (a core call), then resolves every future it woke, one batch per event loop, and raises a
/// `KeyboardInterrupt` or `SystemExit` that one of its callbacks raised.
///
/// Each call collects its own batch, even when nested in another's callback: a callback that cancels a task
/// and then waits for that task's waiters must find them woken.
pub(crate) fn with_wake_batch<T>(py: Python<'_>, call: impl FnOnce() -> T) -> PyResult<T> {
    let outer = CALL.with(|state| state.borrow_mut().replace(Collecting::default()));
    let scope = CallScope { outer: Some(outer) };
    let result = call();
    // One thread-local access to end the call, not two: each costs a `__tls_get_addr` in a shared library.
    let Some(collected) = scope.close() else {
        return Ok(result);
    };
    if !collected.woken.is_empty() {
        dispatch(py, collected.woken);
    }
    match collected.interrupt {
        Some(interrupt) => Err(interrupt),
        None => Ok(result),
    }
}

/// Puts back the enclosing call's collection when a call ends, even by a panic (which `PyO3` turns into an
/// exception), so that a later call on this thread never collects into an abandoned one.
struct CallScope {
    outer: Option<Option<Collecting>>,
}

impl CallScope {
    /// Ends the call normally: returns what it collected and puts back the enclosing call's.
    fn close(mut self) -> Option<Collecting> {
        let outer = self.outer.take().flatten();
        CALL.with(|state| std::mem::replace(&mut *state.borrow_mut(), outer))
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        if let Some(outer) = self.outer.take() {
            let abandoned = CALL.with(|state| std::mem::replace(&mut *state.borrow_mut(), outer));
            drop(abandoned);
        }
    }
}

/// Resolves the futures collected so far by the running call.
pub(crate) fn flush_wake_batch(py: Python<'_>) {
    let woken = CALL.with(|state| {
        state
            .borrow_mut()
            .as_mut()
            .map(|collecting| std::mem::take(&mut collecting.woken))
    });
    if let Some(woken) = woken.filter(|woken| !woken.is_empty()) {
        dispatch(py, woken);
    }
}

/// Keeps a `KeyboardInterrupt` or `SystemExit` raised by a callback for the running call to raise (the first
/// one wins). Returns it back when no call is collecting on this thread.
pub(crate) fn defer_interrupt(error: PyErr) -> Option<PyErr> {
    CALL.with(|state| match state.borrow_mut().as_mut() {
        Some(collecting) => {
            collecting.interrupt.get_or_insert(error);
            None
        }
        None => Some(error),
    })
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
    let waker = Waker::from(Arc::new(AsyncioWaker(PendingFuture {
        event_loop: event_loop.unbind(),
        future: future.clone().unbind(),
    })));
    if poll(&mut wait, &mut Context::from_waker(&waker)).is_ready() {
        return Ok(None);
    }
    Ok(Some((future.unbind(), wait)))
}

fn dispatch(py: Python<'_>, mut woken: Vec<PendingFuture>) {
    static GET_RUNNING_LOOP_OR_NONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    // One function object for every dispatch, rather than one made per cross-thread batch.
    static RESOLVER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let running_loop = GET_RUNNING_LOOP_OR_NONE
        .import(py, "asyncio", "_get_running_loop")
        .and_then(pyo3::types::PyAnyMethods::call0)
        .ok();
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
                resolve_futures(&futures);
                Ok(())
            } else {
                let resolver = RESOLVER.get_or_try_init(py, || {
                    wrap_pyfunction!(resolve_futures, py)
                        .map(|function| function.into_any().unbind())
                })?;
                event_loop
                    .call_method1(py, intern!(py, "call_soon_threadsafe"), (resolver, futures))
                    .map(drop)
            }
        });
        if let Err(error) = outcome {
            // A closed loop has no one left to wake; anything else is reported without breaking the canceller.
            if !error.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py) {
                error.write_unraisable(py, None);
            }
        }
    }
}

/// Resolves every future that is still pending. One its awaiter resolved or cancelled refuses the result;
/// it is skipped, and the others are resolved all the same.
#[pyfunction]
fn resolve_futures(futures: &Bound<'_, PyList>) {
    let py = futures.py();
    let set_result = intern!(py, "set_result");
    for future in futures.iter() {
        // Asking first would cost a call per waiter; a done future refuses the result instead.
        if let Err(error) = future.call_method1(set_result, (py.None(),)) {
            let done = future
                .call_method0(intern!(py, "done"))
                .and_then(|done| done.is_truthy())
                .unwrap_or(false);
            if !done {
                error.write_unraisable(py, Some(&future));
            }
        }
    }
}
