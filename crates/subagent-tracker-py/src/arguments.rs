//! Checks of Python arguments, with messages that say what was expected.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyFloat, PyInt, PyString};

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}

/// A `str` argument.
pub(crate) fn string<'py>(value: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyString>> {
    value.cast::<PyString>().cloned().map_err(|_| {
        PyTypeError::new_err(format!("{name} must be a str, got {}", type_name(value)))
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
        Some(value) => Ok(Some(string(value, name)?.to_str()?.to_owned())),
    }
}

/// A task id: a non-empty `str` within the core's size limit.
pub(crate) fn task_id(value: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    let text = string(value, name)?;
    let text = text.to_str()?;
    subagent_tracker::validate_task_id(text)
        .map_err(|error| PyValueError::new_err(error.to_string().replacen("task_id", name, 1)))?;
    Ok(text.to_owned())
}

/// A non-negative whole number (a `bool` is refused, being a yes/no rather than a count).
pub(crate) fn count(value: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
    if !value.is_instance_of::<PyInt>() || value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            type_name(value)
        )));
    }
    value.extract::<usize>().map_err(|_| {
        PyValueError::new_err(format!("{name} must be a non-negative int, got {value}"))
    })
}

/// A number of seconds (an `int` or a `float`, not a `bool`); `expected` completes the error message.
fn seconds(value: &Bound<'_, PyAny>, name: &str, expected: &str) -> PyResult<f64> {
    let is_number = (value.is_instance_of::<PyInt>()
        && !value.is_instance_of::<pyo3::types::PyBool>())
        || value.is_instance_of::<PyFloat>();
    if !is_number {
        return Err(PyTypeError::new_err(format!(
            "{name} must be {expected}, got {}",
            type_name(value)
        )));
    }
    value.extract()
}

/// An optional timeout in seconds: `None`, or a finite non-negative number.
pub(crate) fn timeout(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    duration(value, "timeout")
}

/// An optional duration in seconds named `name`: `None`, or a finite non-negative number.
pub(crate) fn duration(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<Duration>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    let seconds = seconds(value, name, "a number of seconds or None")?;
    Duration::try_from_secs_f64(seconds).map(Some).map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be a finite, non-negative number of seconds, got {seconds}"
        ))
    })
}

/// `_check_seconds(value, name)`: the Python layer's async methods check their durations by the same rule.
#[pyfunction]
#[pyo3(signature = (value, name))]
pub(crate) fn _check_seconds(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<()> {
    duration(value, name).map(drop)
}

/// An absolute deadline in seconds since the epoch (as `time.time()` gives), as a monotonic instant.
pub(crate) fn deadline(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    let expected = "seconds since the epoch (as time.time() gives) or None";
    let seconds = seconds(value, "deadline", expected)?;
    if !seconds.is_finite() {
        return Err(PyValueError::new_err(format!(
            "deadline must be a finite time, got {seconds}"
        )));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64());
    let remaining = Duration::try_from_secs_f64((seconds - now).max(0.0)).unwrap_or(Duration::MAX);
    Ok(Some(Instant::now().checked_add(remaining).unwrap_or_else(
        || Instant::now() + Duration::from_secs(1 << 40),
    )))
}

/// An iterable of `CancellationToken`s (or `None`).
pub(crate) fn tokens(
    value: Option<&Bound<'_, PyAny>>,
    name: &str,
) -> PyResult<Vec<subagent_tracker::SubagentTaskToken<crate::python_types::PyValue>>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(Vec::new());
    };
    let iterator = value.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be an iterable of CancellationToken, got {}",
            type_name(value)
        ))
    })?;
    iterator
        .map(|item| {
            let item = item?;
            let token = item
                .cast::<crate::token::CancellationToken>()
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{name} must hold CancellationToken objects, got {}",
                        type_name(&item)
                    ))
                })?;
            Ok(token.get().core().clone())
        })
        .collect()
}

/// Metadata: `None`, or a mapping, kept as a read-only copy so that snapshots stay immutable.
pub(crate) fn metadata(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    let py = value.py();
    static MAPPING: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static MAPPING_PROXY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    if !value.is_instance(MAPPING.import(py, "collections.abc", "Mapping")?)? {
        return Err(PyTypeError::new_err(format!(
            "metadata must be a mapping (such as a dict) or None, got {}",
            type_name(value)
        )));
    }
    let copy = PyDict::new(py);
    copy.call_method1("update", (value,))?;
    let proxy = MAPPING_PROXY
        .import(py, "types", "MappingProxyType")?
        .call1((copy,))?;
    Ok(Some(proxy.unbind()))
}

/// The text of a failure: a `str`, or an exception rendered as `Type: message`.
pub(crate) fn error_text(value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_str()?.to_owned());
    }
    if value.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        let message = value.str()?.to_string();
        let name = type_name(value);
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
