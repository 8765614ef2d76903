//! The keyword options of the calls that take many, each list declared once: a session's settings
//! ([`SESSION_OPTIONS`]: `Session(...)` and every registry's `session(...)`), a Redis registry's connection
//! ([`REGISTRY_OPTIONS`]: `RedisRegistry(...)`, `AsyncRedisRegistry.connect(...)`) and a task's start
//! (`start_arguments::START_OPTIONS`). Each such call takes `**options` and reads them here, but a start, which
//! names each start option in its signature (`start_arguments::StartKeywords`); Python declares the same lists
//! once too, as the typed dicts of `subagent_tracker._options` that the stubs unpack (a test holds each pair
//! equal, and a start's signature to its list).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use subagent_tracker::TrackerConfig;
use subagent_tracker_redis::RedisOptions;

use crate::arguments::{
    self, EarlyCancelTtlArgument, Id, LeaseArgument, MaxFinishedAgeArgument,
    ReconcileIntervalArgument, Seconds, SessionTtlArgument, TimeoutArgument, WorkerIdArgument,
};

/// A session's settings, in the order their values are read.
pub(crate) const SESSION_OPTIONS: [&str; 5] = [
    "max_finished_tasks",
    "event_buffer",
    "max_finished_age",
    "early_cancel_ttl",
    "progress_log_size",
];

/// A Redis registry's connection options, in the order their values are read.
pub(crate) const REGISTRY_OPTIONS: [&str; 9] = [
    "worker_id",
    "lease",
    "reconcile_interval",
    "timeout",
    "session_ttl",
    "key_prefix",
    "cluster",
    "wait_for_replicas",
    "allow_eviction",
];

/// The keyword arguments `options` of the call `call` (`Class.method`), each one `known`: a getter of each
/// one's value (`None` where it is not given). An unknown keyword is refused first, as Python's own keyword
/// parsing refuses it.
pub(crate) fn keywords<'a, 'py>(
    options: Option<&'a Bound<'py, PyDict>>,
    known: impl Fn(&str) -> bool,
    call: &str,
) -> PyResult<impl Fn(&str) -> PyResult<Option<Bound<'py, PyAny>>> + 'a> {
    for key in options.iter().flat_map(|options| options.keys()) {
        let key = key.extract::<&str>()?;
        if !known(key) {
            return Err(PyTypeError::new_err(format!(
                "{call}() got an unexpected keyword argument '{key}'"
            )));
        }
    }
    Ok(move |key: &str| match options {
        Some(options) => options.get_item(key),
        None => Ok(None),
    })
}

/// `value` of the keyword `key` as a `T`, `None` where it is not given or is `None`; with `as_argument`, a
/// `TypeError` names the argument as Python's own keyword parsing names it.
pub(crate) fn keyword<'py, T>(
    value: Option<Bound<'py, PyAny>>,
    key: &str,
    as_argument: bool,
) -> PyResult<Option<T>>
where
    T: for<'a> FromPyObject<'a, 'py>,
{
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    let extracted = value.extract::<T>().map_err(Into::into);
    extracted.map(Some).map_err(|error| {
        if as_argument {
            argument_error(value.py(), key, error)
        } else {
            error
        }
    })
}

/// A `TypeError` of the argument `key` as Python's own keyword parsing words it (`argument 'key': ...`); any
/// other error as it was.
pub(crate) fn argument_error(py: Python<'_>, key: &str, error: PyErr) -> PyErr {
    if !error.get_type(py).is(py.get_type::<PyTypeError>()) {
        return error;
    }
    let named = PyTypeError::new_err(format!("argument '{key}': {}", error.value(py)));
    named.set_cause(py, error.cause(py));
    named
}

/// A session's settings from the keyword arguments `options` of `call`.
pub(crate) fn session_config(
    options: Option<&Bound<'_, PyDict>>,
    call: &str,
) -> PyResult<TrackerConfig> {
    let value = keywords(options, |key| SESSION_OPTIONS.contains(&key), call)?;
    let max_finished_age: Option<Seconds<MaxFinishedAgeArgument>> =
        keyword(value("max_finished_age")?, "max_finished_age", true)?;
    let early_cancel_ttl: Option<Seconds<EarlyCancelTtlArgument>> =
        keyword(value("early_cancel_ttl")?, "early_cancel_ttl", true)?;
    let given = |key| -> PyResult<_> { Ok(value(key)?.filter(|value| !value.is_none())) };
    let mut config = TrackerConfig::default();
    if let Some(size) = given("progress_log_size")? {
        let size = arguments::count(&size, "progress_log_size")?;
        if size > subagent_tracker::MAX_PROGRESS_LOG_SIZE {
            return Err(PyValueError::new_err(format!(
                "progress_log_size must be at most {}, got {size}",
                subagent_tracker::MAX_PROGRESS_LOG_SIZE
            )));
        }
        config = config.with_progress_log_size(size);
    }
    if let Some(ttl) = early_cancel_ttl {
        config = config.with_early_cancel_ttl(ttl.0);
    }
    if let Some(age) = max_finished_age {
        config = config.with_max_finished_age(age.0);
    }
    if let Some(tasks) = given("max_finished_tasks")? {
        config = config.with_max_finished_tasks(arguments::count(&tasks, "max_finished_tasks")?);
    }
    if let Some(buffer) = given("event_buffer")? {
        config = config.with_event_buffer(arguments::count(&buffer, "event_buffer")?);
    }
    Ok(config)
}

/// The URL and options of a Redis registry, from `url` and the keyword arguments `options` of `call`.
pub(crate) fn registry_options(
    url: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
    call: &str,
) -> PyResult<(String, RedisOptions)> {
    let value = keywords(options, |key| REGISTRY_OPTIONS.contains(&key), call)?;
    let worker_id: Option<Id<WorkerIdArgument>> = keyword(value("worker_id")?, "worker_id", true)?;
    let lease: Option<Seconds<LeaseArgument>> = keyword(value("lease")?, "lease", true)?;
    let reconcile_interval: Option<Seconds<ReconcileIntervalArgument>> =
        keyword(value("reconcile_interval")?, "reconcile_interval", true)?;
    let timeout: Option<Seconds<TimeoutArgument>> = keyword(value("timeout")?, "timeout", true)?;
    let session_ttl: Option<Seconds<SessionTtlArgument>> =
        keyword(value("session_ttl")?, "session_ttl", true)?;
    let key_prefix = value("key_prefix")?.filter(|value| !value.is_none());
    let cluster: Option<bool> = keyword(value("cluster")?, "cluster", true)?;
    let wait_for_replicas = value("wait_for_replicas")?.filter(|value| !value.is_none());
    let allow_eviction: Option<bool> = keyword(value("allow_eviction")?, "allow_eviction", true)?;

    let url = arguments::text(&arguments::string(url, "url")?, "url")?.to_owned();
    let mut options = RedisOptions::default();
    if let Some(worker_id) = worker_id {
        options = options.with_worker_id(&*worker_id.0);
    }
    if let Some(lease) = lease {
        options = options.with_lease(lease.0);
    }
    if let Some(interval) = reconcile_interval {
        options = options.with_reconcile_interval(interval.0);
    }
    if let Some(timeout) = timeout {
        options = options.with_timeout(timeout.0);
    }
    if let Some(session_ttl) = session_ttl {
        options = options.with_session_ttl(session_ttl.0);
    }
    if let Some(prefix) = arguments::optional_string(key_prefix.as_ref(), "key_prefix")? {
        options = options.with_key_prefix(prefix);
    }
    if let Some(replicas) = wait_for_replicas {
        options = options.with_wait_for_replicas(arguments::count(&replicas, "wait_for_replicas")?);
    }
    if let Some(cluster) = cluster {
        options = options.with_cluster(cluster);
    }
    if let Some(allowed) = allow_eviction {
        options = options.with_eviction_allowed(allowed);
    }
    Ok((url, options))
}
