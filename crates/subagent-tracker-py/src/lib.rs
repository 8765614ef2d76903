//! `subagent_tracker._native`: the Python face of the `subagent-tracker` crate.
//!
//! This crate only translates: Python arguments into core calls, core results and errors into Python objects,
//! and core wake-ups into asyncio futures. Every rule about tasks lives in the core crate.
//!
//! Its layers, each importing only the ones below it:
//! - the classes: every session and handle class is declared once (`session_methods!`, `handle_methods!`), and
//!   each reads its arguments (`arguments`, `start_arguments`, `keyword_options`, ...);
//! - the compositions written once for every store (`waits`: the waits and their timeouts), as coroutines that
//!   start once awaited (`start_on_await`);
//! - the seam (`session_store`): what a class asks of its store, as two traits;
//! - the stores behind it: `memory_calls` (the core's tracker, answered at once) and `redis_calls` (the Redis
//!   store, its outcomes handed over by `Delivery`: blocking or asyncio).
//!
//! The package's Python half (its exceptions, the status enum, the async checkpoints, and its subclasses of the
//! session classes, which add spawning and the event stream) is handed to the binding once, at import
//! (`python_half`): the binding imports no module of the package, so a call goes from Python into the binding
//! and never back by an import.

// PyO3 hands extracted arguments and the GC visitor over by value, whether or not a method consumes them.
#![allow(clippy::needless_pass_by_value)]

mod arguments;
mod async_redis;
mod asyncio_waker;
mod awaitable;
mod batch_arguments;
mod blocking_wait;
mod cancel_callback;
mod end_arguments;
mod errors;
mod event_arguments;
mod events;
mod filter_arguments;
mod handle;
mod handle_methods;
mod interpreter;
mod keyword_options;
mod loop_inbox;
mod memory_calls;
mod python_half;
mod python_types;
mod ready;
mod redis_calls;
mod redis_classes;
mod redis_events;
mod redis_registry;
mod registry;
mod resume_wait;
mod runner_exit;
mod runtime;
mod session;
mod session_classes;
mod session_methods;
mod session_store;
mod snapshot;
mod snapshot_arguments;
mod snapshot_record;
mod start_arguments;
mod start_on_await;
mod token;
mod waits;

use pyo3::prelude::*;

/// The native half of `subagent_tracker`; import the package instead.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<session::Session>()?;
    module.add_class::<session_classes::SessionState>()?;
    module.add_class::<registry::Registry>()?;
    module.add_class::<redis_registry::RedisRegistry>()?;
    module.add_class::<redis_registry::RedisSession>()?;
    module.add_class::<redis_events::RedisEventReader>()?;
    module.add_class::<redis_registry::RedisTaskHandle>()?;
    module.add_class::<async_redis::AsyncRedisRegistry>()?;
    module.add_class::<async_redis::AsyncRedisSession>()?;
    module.add_class::<async_redis::AsyncRedisTaskHandle>()?;
    module.add_class::<handle::SubagentTaskHandle>()?;
    module.add_class::<awaitable::AwaitableSession>()?;
    module.add_class::<awaitable::AwaitableTaskHandle>()?;
    module.add_class::<token::CancellationToken>()?;
    module.add_class::<snapshot::SubagentTask>()?;
    module.add_class::<events::SubagentEvent>()?;
    module.add_class::<events::EventSubscription>()?;
    module.add_class::<ready::Ready>()?;
    module.add_class::<start_on_await::StartOnAwait>()?;
    module.add_class::<cancel_callback::CancelCallbackRegistration>()?;
    module.add_class::<cancel_callback::HandlerCompletion>()?;
    module.add_function(wrap_pyfunction!(pending_deadlines, module)?)?;
    module.add_function(wrap_pyfunction!(interpreter::_interpreter_exiting, module)?)?;
    module.add_function(wrap_pyfunction!(interpreter::_before_fork, module)?)?;
    module.add_function(wrap_pyfunction!(
        interpreter::_after_fork_in_parent,
        module
    )?)?;
    module.add_function(wrap_pyfunction!(interpreter::_after_fork_in_child, module)?)?;
    module.add_function(wrap_pyfunction!(arguments::_check_seconds, module)?)?;
    module.add_function(wrap_pyfunction!(errors::_quoted, module)?)?;
    module.add_function(wrap_pyfunction!(python_half::_bind_python_half, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The keyword options as the native classes read them, for the test that holds the typed dicts of
    // `subagent_tracker._options` to them.
    for (name, options) in [
        ("_START_OPTIONS", &start_arguments::START_OPTIONS[..]),
        ("_SESSION_OPTIONS", &keyword_options::SESSION_OPTIONS[..]),
        ("_REGISTRY_OPTIONS", &keyword_options::REGISTRY_OPTIONS[..]),
    ] {
        module.add(name, pyo3::types::PyTuple::new(module.py(), options)?)?;
    }
    // The core's rule of which statuses are pending, for the Python enum and the dashboard's views.
    let pending: Vec<&str> = subagent_tracker::SubagentStatus::ALL
        .into_iter()
        .filter(|status| status.is_pending())
        .map(subagent_tracker::SubagentStatus::as_str)
        .collect();
    module.add(
        "_PENDING_STATUSES",
        pyo3::types::PyTuple::new(module.py(), pending)?,
    )?;
    // The core's and the Redis store's limits, defaults and messages, each under its Rust name.
    macro_rules! add_constants {
        ($($owner:ident::$name:ident),* $(,)?) => {
            $(module.add(stringify!($name), $owner::$name)?;)*
        };
    }
    add_constants!(
        subagent_tracker::MAX_TASK_ID_BYTES,
        subagent_tracker::MAX_SECONDS,
        subagent_tracker::DEFAULT_MAX_FINISHED_TASKS,
        subagent_tracker::DEFAULT_EVENT_BUFFER,
        subagent_tracker::DEFAULT_CANCEL_REASON,
        subagent_tracker::BATCH_REFUSED_REASON,
        subagent_tracker::DEADLINE_REASON,
        subagent_tracker::CHILD_FAILED_REASON,
        subagent_tracker::GROUP_ENDED_REASON,
        subagent_tracker_redis::WORKER_LOST_ERROR,
        subagent_tracker_redis::LEASE_LOST_REASON,
        subagent_tracker_redis::ORPHANED_RUN_ERROR,
        subagent_tracker_redis::SESSION_LOST_REASON,
        subagent_tracker::CLAIM_TIMEOUT_ERROR,
        subagent_tracker::RESTORED_WITHOUT_RUNNER_ERROR,
        subagent_tracker::DROPPED_HANDLE_ERROR,
    );
    module.add("_EVENT_STREAM_BUSY", errors::EVENT_STREAM_BUSY)?;
    Ok(())
}

/// How many deadlines are scheduled in this process and have neither fired nor been removed (a leak check).
#[pyfunction]
fn pending_deadlines() -> usize {
    subagent_tracker::pending_deadlines()
}
