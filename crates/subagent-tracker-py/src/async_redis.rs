//! `AsyncRedisRegistry`, `AsyncRedisSession` and `AsyncRedisTaskHandle`: the asyncio twins of the Redis classes,
//! as `redis.asyncio` is redis-py's, declared by [`redis_classes!`] with only what differs here. Each call that
//! touches the network returns an awaitable at once and never blocks the event loop; its semantics and errors are
//! the blocking twin's.
//!
//! Cancelling the coroutine that awaits a call abandons the wait, never the call: the call runs to its end on
//! the runtime, so no transition is left half made. A start or claim whose awaiter was cancelled leaves a
//! handle that nobody received; it is dropped, which ends the task as any dropped handle does (`FAILED` with
//! `DROPPED_HANDLE_ERROR`, or finished if it was cancelled meanwhile). Waits stop.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use subagent_tracker_redis::RedisRegistry as CoreRegistry;

use crate::keyword_options::registry_options;
use crate::redis_calls::{RegistryCalls, Waiting};
use crate::redis_classes::redis_classes;
use crate::redis_registry::BLOCKING;
use crate::runtime::MadeIn;
use crate::start_on_await::StartOnAwait;

redis_classes! {
    delivery: ASYNCIO = Waiting::Asyncio;

    /// Sessions kept in Redis, for asyncio programs: `registry = await AsyncRedisRegistry.connect(url, ...)`,
    /// with the options of `RedisRegistry`. This process is one worker among those connected, and may also hold
    /// a `RedisRegistry` for its threads.
    registry AsyncRedisRegistry {
        #[new]
        #[pyo3(signature = (*_args, **_kwargs))]
        fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
            Err(PyTypeError::new_err(
                "connecting to Redis is awaited: use `await AsyncRedisRegistry.connect(url, ...)`",
            ))
        }

        /// Connects to Redis; the coroutine gives the registry. Bad arguments raise at the call, as for
        /// `RedisRegistry(...)`; the connection starts once the coroutine is awaited, so no loop need run at the
        /// call (`asyncio.run(AsyncRedisRegistry.connect(url))` works).
        #[staticmethod]
        #[pyo3(signature = (url, **options))]
        fn connect<'py>(
            py: Python<'py>,
            url: &Bound<'_, PyAny>,
            options: Option<&Bound<'_, PyDict>>,
        ) -> PyResult<Bound<'py, PyAny>> {
            let (url, options) = registry_options(url, options, "AsyncRedisRegistry.connect")?;
            let name = "AsyncRedisRegistry.connect";
            StartOnAwait::coroutine(py, &py.None().into_bound(py), name, move |none| {
                let py = none.py();
                let (url, options) = (url.clone(), options.clone());
                let made_in = MadeIn::here();
                ASYNCIO
                    .call(
                        py,
                        made_in,
                        async move { CoreRegistry::connect(&url, options).await },
                        move |py, registry| {
                            let calls = RegistryCalls {
                                registry,
                                made_in,
                                delivery: ASYNCIO,
                            };
                            Ok(Py::new(py, AsyncRedisRegistry { calls })?.into_any())
                        },
                    )
                    .map(Bound::unbind)
            })
        }
    }

    /// A session kept in Redis, for asyncio programs: the `RedisSession` whose calls are awaited.
    session AsyncRedisSession {
        handed_out_as: async_redis_session,
        handle_description: "an AsyncRedisTaskHandle";

        /// The same session with calls that block: for the few steps a framework makes synchronous (entering a
        /// streamed run that its API returns at once). Shares this session's connection.
        fn _blocking(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
            self.store.with_delivery(BLOCKING).into_object(py)
        }
    }

    /// Held by the code that runs a task kept in Redis, in an asyncio program: `async with handle:` ends the task
    /// from how the block exits, and its reports are awaited.
    handle AsyncRedisTaskHandle {}
}
