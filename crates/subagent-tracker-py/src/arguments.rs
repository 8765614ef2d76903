//! Python arguments read into core types, with messages that say what was expected.
//!
//! Each argument type is a `FromPyObject` newtype; the argument's name, which the messages carry, is a marker
//! type. The rules themselves (what an id or a number of seconds may be) are the core's.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pyo3::exceptions::{PyKeyError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PyMapping, PySet, PyString, PyTuple,
};
use subagent_tracker::{TaskFailure, TrackerError};

use crate::errors::tracker_error;

/// The name of an argument, for messages.
pub(crate) trait ArgumentName {
    const NAME: &'static str;
}

macro_rules! argument_names {
    ($($marker:ident = $name:literal),* $(,)?) => {
        $(
            pub(crate) struct $marker;
            impl ArgumentName for $marker {
                const NAME: &'static str = $name;
            }
        )*
    };
}

argument_names! {
    TaskIdArgument = "task_id",
    ParentIdArgument = "parent_id",
    SessionIdArgument = "session_id",
    TimeoutArgument = "timeout",
    DeadlineArgument = "deadline",
    GraceArgument = "grace",
    ClaimTimeoutArgument = "claim_timeout",
    WorkerIdArgument = "worker_id",
    ReconcileIntervalArgument = "reconcile_interval",
    LeaseArgument = "lease",
    SessionTtlArgument = "session_ttl",
    MaxFinishedAgeArgument = "max_finished_age",
    OlderThanArgument = "older_than",
    EarlyCancelTtlArgument = "early_cancel_ttl",
}

/// The name of `value`'s type, for messages; `object` when it cannot be read.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "object".to_owned(), |name| name.to_string())
}

/// `value` as a mapping, or a `TypeError` (for a batch's item or a record, whose caller says which) that names
/// its type.
pub(crate) fn as_mapping<'a, 'py>(
    value: &'a Bound<'py, PyAny>,
) -> PyResult<&'a Bound<'py, PyMapping>> {
    value
        .cast::<PyMapping>()
        .map_err(|_| PyTypeError::new_err(format!("is a {}, not a mapping", type_name(value))))
}

/// The value of `key` in a mapping of keyword arguments: `None` for a key it lacks or maps to `None`.
pub(crate) fn mapping_value<'py>(
    mapping: &Bound<'py, PyMapping>,
    key: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match mapping.get_item(key) {
        Ok(value) if value.is_none() => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(error) if error.is_instance_of::<PyKeyError>(mapping.py()) => Ok(None),
        Err(error) => Err(error),
    }
}

/// A `str` argument.
pub(crate) fn string<'py>(value: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyString>> {
    value.cast::<PyString>().cloned().map_err(|_| {
        PyTypeError::new_err(format!("{name} must be a str, got {}", type_name(value)))
    })
}

/// The text of the `str` argument `name`. A `str` that UTF-8 cannot encode (one that holds a lone surrogate,
/// such as `'\ud800'`) is refused with `ValueError` naming the argument, where Python's own
/// `UnicodeEncodeError` would name none.
pub(crate) fn text<'a>(value: &'a Bound<'_, PyString>, name: &str) -> PyResult<&'a str> {
    value.to_str().map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be text that UTF-8 can encode, got a str holding a lone surrogate (a code point from \
             U+D800 to U+DFFF)"
        ))
    })
}

/// An optional `str` argument: `None` or a `str`.
pub(crate) fn optional_string(
    value: Option<&Bound<'_, PyAny>>,
    name: &str,
) -> PyResult<Option<String>> {
    match value {
        None => Ok(None),
        Some(value) if value.is_none() => Ok(None),
        Some(value) => Ok(Some(text(&string(value, name)?, name)?.to_owned())),
    }
}

/// An id (of a task, a parent or a session): a `str` that keeps the core's id rule.
pub(crate) struct Id<N>(pub(crate) Arc<str>, PhantomData<N>);

impl<'a, 'py, N: ArgumentName> FromPyObject<'a, 'py> for Id<N> {
    type Error = PyErr;

    fn extract(value: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let string = string(&value, N::NAME)?;
        let text = text(&string, N::NAME)?;
        subagent_tracker::validate_task_id(N::NAME, text)
            .map_err(|error| tracker_error(value.py(), error))?;
        Ok(Id(Arc::from(text), PhantomData))
    }
}

/// A page's `limit`: a positive whole number, 100 when not given.
pub(crate) fn page_limit(value: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    match value
        .filter(|value| !value.is_none())
        .map(|value| count(value, "limit"))
        .transpose()?
    {
        None => Ok(100),
        Some(0) => Err(PyValueError::new_err("limit must be a positive int, got 0")),
        Some(limit) => Ok(limit),
    }
}

/// A non-negative whole number (a `bool` is refused, being a yes/no rather than a count).
pub(crate) fn count(value: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
    if !value.is_instance_of::<PyInt>() || value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            type_name(value)
        )));
    }
    value.extract::<usize>().map_err(|_| {
        PyValueError::new_err(format!("{name} must be a non-negative int, got {value}"))
    })
}

/// A number (an `int` or a `float`, not a `bool`) as an `f64`; an `int` too large for a float is infinite,
/// which every seconds rule refuses with its own message.
pub(crate) fn number(value: &Bound<'_, PyAny>, name: &str, expected: &str) -> PyResult<f64> {
    let is_number = (value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>())
        || value.is_instance_of::<PyFloat>();
    if !is_number {
        return Err(PyTypeError::new_err(format!(
            "{name} must be {expected}, got {}",
            type_name(value)
        )));
    }
    match value.extract::<f64>() {
        Err(error) if error.is_instance_of::<PyOverflowError>(value.py()) => Ok(if value.lt(0)? {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        }),
        other => other,
    }
}

/// A duration in seconds, by the core's rule (finite, non-negative, at most `MAX_SECONDS`).
pub(crate) struct Seconds<N>(pub(crate) Duration, PhantomData<N>);

impl<'a, 'py, N: ArgumentName> FromPyObject<'a, 'py> for Seconds<N> {
    type Error = PyErr;

    fn extract(value: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let seconds = number(&value, N::NAME, "a number of seconds or None")?;
        TrackerError::check_seconds(N::NAME, seconds)
            .map(|duration| Seconds(duration, PhantomData))
            .map_err(|error| tracker_error(value.py(), error))
    }
}

/// `_check_seconds(value, name)`: the Python layer's async methods check their durations by the same rule.
#[pyfunction]
#[pyo3(signature = (value, name))]
pub(crate) fn _check_seconds(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<()> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(());
    };
    let seconds = number(value, name, "a number of seconds or None")?;
    let checked = match name {
        GraceArgument::NAME => TrackerError::check_seconds(GraceArgument::NAME, seconds),
        _ => TrackerError::check_seconds(TimeoutArgument::NAME, seconds),
    };
    checked
        .map(drop)
        .map_err(|error| tracker_error(value.py(), error))
}

/// An absolute deadline in seconds since the epoch (as `time.time()` gives), by the core's rule.
pub(crate) struct EpochDeadline(pub(crate) SystemTime);

impl<'a, 'py> FromPyObject<'a, 'py> for EpochDeadline {
    type Error = PyErr;

    fn extract(value: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let seconds = number(
            &value,
            DeadlineArgument::NAME,
            "seconds since the epoch (as time.time() gives) or None",
        )?;
        TrackerError::check_epoch_deadline(DeadlineArgument::NAME, seconds)
            .map(EpochDeadline)
            .map_err(|error| tracker_error(value.py(), error))
    }
}

/// Metadata: a mapping, kept as a deep read-only copy so that snapshots stay immutable: mappings become
/// read-only mappings, lists and tuples become tuples, sets become frozensets; other values are kept as given.
pub(crate) struct Metadata(pub(crate) Py<PyAny>);

impl<'a, 'py> FromPyObject<'a, 'py> for Metadata {
    type Error = PyErr;

    fn extract(value: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        check_mapping(&value)?;
        Ok(Metadata(frozen_copy(&value, "metadata")?))
    }
}

/// Metadata for a session kept in Redis, as the JSON text that crosses processes: the rules of [`Metadata`],
/// and JSON's own: keys are `str`, and values are mappings, lists, tuples, `str`, `int`, `float`, `bool` or
/// `None`, so that every process reads back what was given.
pub(crate) struct JsonMetadata(pub(crate) String);

impl<'a, 'py> FromPyObject<'a, 'py> for JsonMetadata {
    type Error = PyErr;

    fn extract(value: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        check_mapping(&value)?;
        json_text(&value, "metadata").map(JsonMetadata)
    }
}

/// A deep read-only copy of `value`, as a session in memory keeps metadata (the argument's name is `what`).
pub(crate) fn frozen_copy(value: &Bound<'_, PyAny>, what: &'static str) -> PyResult<Py<PyAny>> {
    Ok(nested_copy(value, what, Copy::Frozen, 0)?.unbind())
}

/// `value` (a task's result, or metadata) as JSON text, under the rules of [`JsonMetadata`].
pub(crate) fn json_text(value: &Bound<'_, PyAny>, what: &'static str) -> PyResult<String> {
    let plain = nested_copy(value, what, Copy::Json, 0)?;
    static DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    DUMPS
        .import(value.py(), "json", "dumps")?
        .call1((plain,))?
        .extract()
}

/// The value JSON text stands for; as read-only as [`Metadata`] keeps it when `frozen`.
pub(crate) fn from_json_text(py: Python<'_>, text: &str, frozen: bool) -> PyResult<Py<PyAny>> {
    static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let value = LOADS.import(py, "json", "loads")?.call1((text,))?;
    Ok(if frozen {
        nested_copy(&value, "metadata", Copy::Frozen, 0)?.unbind()
    } else {
        value.unbind()
    })
}

fn check_mapping(value: &Bound<'_, PyAny>) -> PyResult<()> {
    if value.is_instance(mapping_type(value.py())?)? {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!(
            "metadata must be a mapping (such as a dict) or None, got {}",
            type_name(value)
        )))
    }
}

fn mapping_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static MAPPING: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    MAPPING.import(py, "collections.abc", "Mapping")
}

/// How deep nested containers are copied; deeper ones are refused rather than recursed into.
const MAX_NESTING: usize = 64;

/// What a nested copy is made of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Copy {
    /// Read-only containers (for snapshots in memory); other values kept as given.
    Frozen,
    /// JSON's types only, refusing what JSON would change or cannot hold (for sessions in Redis).
    Json,
}

fn nested_copy<'py>(
    value: &Bound<'py, PyAny>,
    what: &'static str,
    copy: Copy,
    depth: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let py = value.py();
    if depth > MAX_NESTING {
        return Err(PyValueError::new_err(format!(
            "{what} must not nest containers more than {MAX_NESTING} deep"
        )));
    }
    if value.is_instance(mapping_type(py)?)? {
        static MAPPING_PROXY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let dict = PyDict::new(py);
        for item in value.call_method0("items")?.try_iter()? {
            let (key, item) = item?.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
            if copy == Copy::Json && !key.is_instance_of::<PyString>() {
                // JSON would turn the key into a string, and `1` and `'1'` into one key.
                return Err(PyTypeError::new_err(format!(
                    "{what} keys must be str on a Redis session, since it crosses processes as JSON; got a key \
                     of type {}",
                    type_name(&key)
                )));
            }
            dict.set_item(key, nested_copy(&item, what, copy, depth + 1)?)?;
        }
        return match copy {
            Copy::Frozen => MAPPING_PROXY
                .import(py, "types", "MappingProxyType")?
                .call1((dict,)),
            Copy::Json => Ok(dict.into_any()),
        };
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value
            .try_iter()?
            .map(|item| nested_copy(&item?, what, copy, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return match copy {
            Copy::Frozen => Ok(PyTuple::new(py, items)?.into_any()),
            Copy::Json => Ok(PyList::new(py, items)?.into_any()),
        };
    }
    match copy {
        Copy::Frozen if value.is_instance_of::<PySet>() => Ok(PyFrozenSet::new(
            py,
            value.try_iter()?.collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any()),
        Copy::Frozen => Ok(value.clone()),
        Copy::Json if value.is_instance_of::<PyFloat>() => {
            if value.extract::<f64>()?.is_finite() {
                Ok(value.clone())
            } else {
                // JSON has no NaN or infinity: other readers (a dashboard, another language) refuse them.
                Err(PyValueError::new_err(format!(
                    "{what} must hold finite numbers on a Redis session, since it crosses processes as JSON; \
                     got {}",
                    value.repr()?
                )))
            }
        }
        Copy::Json
            if value.is_none()
                || value.is_instance_of::<PyString>()
                || value.is_instance_of::<PyInt>() =>
        {
            Ok(value.clone())
        }
        Copy::Json => Err(PyTypeError::new_err(format!(
            "{what} must be JSON-serialisable on a Redis session, since it crosses processes as JSON: \
             mappings with str keys, lists, tuples, str, int, float, bool or None; got a value of type {}",
            type_name(value)
        ))),
    }
}

/// The text of a failure: a `str`, or an exception rendered as `Type: message`. An exception whose `str()`
/// raises is still rendered, as Python's traceback module does, so that no exit leaves its task running.
fn error_text(value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(error) = value.cast::<PyString>() {
        return Ok(text(error, "error")?.to_owned());
    }
    if value.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        let name = type_name(value);
        let message = match value.str() {
            Ok(message) => message.to_string(),
            Err(_) => "<exception str() failed>".to_owned(),
        };
        return Ok(if message.is_empty() {
            name
        } else {
            format!("{name}: {message}")
        });
    }
    Err(PyTypeError::new_err(format!(
        "error must be a str or an exception, got {}",
        type_name(value)
    )))
}

/// A failure (contract §5): the error's text (see [`error_text`]), the type given or, for an exception, its
/// class name, and the code given (a `str`, or an `int` kept as its decimal text).
pub(crate) fn failure(
    error: &Bound<'_, PyAny>,
    error_type: Option<&Bound<'_, PyAny>>,
    error_code: Option<&Bound<'_, PyAny>>,
) -> PyResult<TaskFailure> {
    let mut failure = TaskFailure::new(error_text(error)?);
    let error_type = match optional_string(error_type, "error_type")? {
        Some(error_type) => Some(error_type),
        None if error.is_instance_of::<pyo3::exceptions::PyBaseException>() => {
            Some(type_name(error))
        }
        None => None,
    };
    if let Some(error_type) = error_type {
        failure = failure.error_type(error_type);
    }
    if let Some(error_code) = error_code.filter(|code| !code.is_none()) {
        let code = if let Ok(code) = error_code.cast::<PyString>() {
            text(code, "error_code")?.to_owned()
        } else if error_code.is_instance_of::<PyInt>() && !error_code.is_instance_of::<PyBool>() {
            error_code.str()?.to_string()
        } else {
            return Err(PyTypeError::new_err(format!(
                "error_code must be a str, an int or None, got {}",
                type_name(error_code)
            )));
        };
        failure = failure.error_code(code);
    }
    Ok(failure)
}

/// What `end_subagent_task(task_id, *, result=None, error=None, error_type=None, error_code=None)` records:
/// `Err` with the failure, or `Ok` with the result (`None` counts as none) converted by `keep` into what the
/// session stores.
pub(crate) fn end_outcome<V>(
    result: Option<&Bound<'_, PyAny>>,
    error: Option<&Bound<'_, PyAny>>,
    error_type: Option<&Bound<'_, PyAny>>,
    error_code: Option<&Bound<'_, PyAny>>,
    keep: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<V>,
) -> PyResult<Result<Option<V>, TaskFailure>> {
    let result = result.filter(|result| !result.is_none());
    match error.filter(|error| !error.is_none()) {
        Some(_) if result.is_some() => Err(PyValueError::new_err(
            "end_subagent_task takes a result or an error, not both",
        )),
        Some(error) => Ok(Err(failure(error, error_type, error_code)?)),
        None if [error_type, error_code]
            .into_iter()
            .flatten()
            .any(|given| !given.is_none()) =>
        {
            Err(PyValueError::new_err(
                "error_type and error_code describe an error: give error too",
            ))
        }
        None => Ok(Ok(result.map(keep).transpose()?)),
    }
}
