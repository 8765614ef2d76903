//! `RedisRegistry`, `RedisSession` and `RedisTaskHandle`: sessions kept in Redis, shared by every process that
//! connects to it, with calls that block the calling thread (with the interpreter released). `async_redis` holds
//! the asyncio twins; both are declared by [`redis_classes!`], and only what differs is here.
//!
//! Metadata and results cross processes as JSON.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use subagent_tracker_redis::RedisRegistry as CoreRegistry;

use crate::errors::redis_error;
use crate::keyword_options::registry_options;
use crate::redis_calls::{RegistryCalls, Waiting};
use crate::redis_classes::redis_classes;
use crate::runtime::{block_on_interruptibly, MadeIn};

redis_classes! {
    delivery: BLOCKING = Waiting::Blocking;

    /// Sessions kept in Redis; this process is one worker among those connected. Raises `ValueError` for what
    /// retrying cannot fix (a lease shorter than 3 ms, a reconcile interval or timeout shorter than 1 ms, a URL
    /// that is not Redis's, a database the server lacks, a password it wants or refuses, a key prefix used by
    /// other data, another build of the server functions).
    registry RedisRegistry {
        /// `options` are `RegistryOptions`.
        #[new]
        #[pyo3(signature = (url, **options))]
        fn new(
            py: Python<'_>,
            url: &Bound<'_, PyAny>,
            options: Option<&Bound<'_, PyDict>>,
        ) -> PyResult<RedisRegistry> {
            let (url, options) = registry_options(url, options, "RedisRegistry")?;
            let made_in = MadeIn::here();
            // Connecting waits up to the timeout (and the check of the URL's scheme): Ctrl-C stops the wait.
            let connecting = async move { CoreRegistry::connect(&url, options).await };
            let registry = block_on_interruptibly(py, made_in, connecting)?
                .map_err(|error| redis_error(py, error))?;
            Ok(RedisRegistry {
                calls: RegistryCalls {
                    registry,
                    made_in,
                    delivery: BLOCKING,
                },
            })
        }
    }

    /// A session kept in Redis, seen from this process: one incarnation of its id. Once that incarnation has
    /// ended, its transitions, and its queries once its keys are gone, raise `SessionClosedError`. Metadata and
    /// results cross processes as JSON: mappings with str keys, lists, tuples, str, int, float, bool or None.
    session RedisSession {
        handed_out_as: redis_session, handle_description: "a RedisTaskHandle";

        fn __enter__(slf: Py<Self>) -> Py<Self> {
            slf
        }

        /// Leaving `with session:` closes nothing: other processes share the session, so only `close()` closes
        /// it, for all of them.
        #[pyo3(signature = (_exception_type, _exception, _traceback))]
        fn __exit__(
            &self,
            _exception_type: &Bound<'_, PyAny>,
            _exception: &Bound<'_, PyAny>,
            _traceback: &Bound<'_, PyAny>,
        ) -> bool {
            false
        }
    }

    /// Held by the code that runs a task kept in Redis. Its token fires in this process when the task is
    /// cancelled from any process.
    handle RedisTaskHandle with {}
}
