//! An awaitable that is already done, for async methods whose work is synchronous. It is a coroutine by the
//! protocol asyncio checks (`send`, `throw`, `close`), so `asyncio.run` and `asyncio.create_task` take it.

use pyo3::exceptions::PyStopIteration;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

/// `await Ready(value)` gives `value` at once, without a trip through the event loop.
#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct Ready {
    value: Py<PyAny>,
}

impl Ready {
    pub(crate) fn new(value: Py<PyAny>) -> Ready {
        Ready { value }
    }

    /// What a runner handle's `__aenter__` returns: the handle itself.
    pub(crate) fn entered(py: Python<'_>, handle: Py<PyAny>) -> PyResult<Py<Ready>> {
        Py::new(py, Ready::new(handle))
    }

    /// What a runner handle's `__aexit__` returns: `False`, so the exception (if any) propagates.
    pub(crate) fn exited(py: Python<'_>) -> PyResult<Py<Ready>> {
        let propagate = false.into_pyobject(py)?.to_owned().into_any().unbind();
        Py::new(py, Ready::new(propagate))
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Err(PyStopIteration::new_err((self.value.clone_ref(py),)))
    }

    #[pyo3(signature = (_value, /))]
    fn send(&self, py: Python<'_>, _value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.__next__(py)
    }

    /// Raises `exception`: nothing waits here to catch it.
    #[pyo3(signature = (exception, value=None, _traceback=None, /))]
    fn throw(
        &self,
        exception: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        Err(crate::start_on_await::exception_of(exception, value))
    }

    fn close(&self) {}

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.value)
    }
}
