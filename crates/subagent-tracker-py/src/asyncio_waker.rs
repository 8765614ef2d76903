//! Wakes asyncio futures from core wake-ups, once per event loop per call.
//!
//! A core waker fires in the thread that made the transition. Resolving one future per waker through
//! `call_soon_threadsafe` would write to the loop's self-pipe once per waiter; instead, a Python-facing call
//! collects the futures its transition wakes and hands each loop one batch: resolved directly when the caller
//! runs on that loop, or through a single `call_soon_threadsafe` otherwise.

use std::cell::RefCell;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

use crate::interpreter::python_available;

struct PendingFuture {
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
}

struct AsyncioWaker(PendingFuture);

thread_local! {
    /// The futures woken during the Python-facing call running on this thread, if one is collecting.
    static BATCH: RefCell<Option<Vec<PendingFuture>>> = const { RefCell::new(None) };
}

impl Wake for AsyncioWaker {
    fn wake(self: Arc<Self>) {
        if !python_available() {
            // The interpreter is going away: no loop is left to wake.
            return;
        }
        let pending = match Arc::try_unwrap(self) {
            Ok(waker) => waker.0,
            Err(shared) => Python::attach(|py| PendingFuture {
                event_loop: shared.0.event_loop.clone_ref(py),
                future: shared.0.future.clone_ref(py),
            }),
        };
        let unbatched = BATCH.with(|batch| match batch.borrow_mut().as_mut() {
            Some(batch) => {
                batch.push(pending);
                None
            }
            None => Some(pending),
        });
        if let Some(pending) = unbatched {
            // Woken outside a collecting call (another thread's drop, say): deliver on its own.
            Python::attach(|py| dispatch(py, vec![pending]));
        }
    }
}

/// Runs `call`, then resolves every future it woke, one batch per event loop.
pub(crate) fn with_wake_batch<T>(py: Python<'_>, call: impl FnOnce() -> T) -> T {
    let outer = BATCH.with(|batch| {
        let mut batch = batch.borrow_mut();
        if batch.is_some() {
            false
        } else {
            *batch = Some(Vec::new());
            true
        }
    });
    let result = call();
    if outer {
        let woken = BATCH
            .with(|batch| batch.borrow_mut().take())
            .unwrap_or_default();
        if !woken.is_empty() {
            dispatch(py, woken);
        }
    }
    result
}

/// The event loop running in this thread; `RuntimeError` (asyncio's own) when there is none.
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()
}

/// Polls a core readiness check with a waker bound to a new future of the running event loop.
///
/// Returns `None` when already ready, or the future to await otherwise.
pub(crate) fn future_for(
    py: Python<'_>,
    poll: impl FnOnce(&mut Context<'_>) -> Poll<()>,
) -> PyResult<Option<Py<PyAny>>> {
    let event_loop = running_loop(py)?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let waker = Waker::from(Arc::new(AsyncioWaker(PendingFuture {
        event_loop: event_loop.unbind(),
        future: future.clone().unbind(),
    })));
    match poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(()) => Ok(None),
        Poll::Pending => Ok(Some(future.unbind())),
    }
}

fn dispatch(py: Python<'_>, mut woken: Vec<PendingFuture>) {
    static GET_RUNNING_LOOP_OR_NONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    // One function object for every dispatch, rather than one made per cross-thread batch.
    static RESOLVER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let running_loop = GET_RUNNING_LOOP_OR_NONE
        .import(py, "asyncio", "_get_running_loop")
        .and_then(|function| function.call0())
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
                resolve_futures(&futures)
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

/// Resolves the futures that are still pending; ones cancelled by their awaiter are left alone.
#[pyfunction]
fn resolve_futures(futures: &Bound<'_, PyList>) -> PyResult<()> {
    let py = futures.py();
    let set_result = intern!(py, "set_result");
    for future in futures.iter() {
        // Asking first would cost a call per waiter; a future its awaiter cancelled refuses the result instead.
        if let Err(error) = future.call_method1(set_result, (py.None(),)) {
            if !future.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
                return Err(error);
            }
        }
    }
    Ok(())
}
