//! `StartOnAwait`: the coroutine of a native call that checks its arguments at the call but needs an event loop
//! only once awaited, so that `asyncio.run(call(...))` and `asyncio.create_task(call(...))` take it as they take
//! a coroutine of `async def` (and `redis.asyncio`'s calls).
//!
//! It is a coroutine by the protocol asyncio checks (`__await__`, `send`, `throw`, `close`): the first `send`
//! starts the call, which gives an asyncio future of the running loop (or none, with nothing to wait for), and
//! every step after is that future's; its value is the future's, or what `finish` makes once it is done.

use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{intern, PyTraverseError};

/// What starts the call: given the coroutine's owner, the asyncio future to wait for, if any.
type Start = Box<dyn Fn(&Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> + Send + Sync>;
/// What makes the coroutine's value once the wait is over, from its owner.
type Finish = Box<dyn Fn(&Bound<'_, PyAny>) -> PyResult<Py<PyAny>> + Send + Sync>;

enum Step {
    Unstarted,
    /// The started call's future, as its `__await__` iterates it.
    Awaiting(Py<PyAny>),
    Done,
}

#[pyclass(frozen, module = "subagent_tracker._native")]
pub(crate) struct StartOnAwait {
    /// The object whose call this is (a session; None for a static method), held here where the garbage
    /// collector sees it: `start` itself holds no Python object.
    owner: Py<PyAny>,
    /// The call's name, qualified by its class for a static method (`AsyncRedisRegistry.connect`): what
    /// asyncio shows of the coroutine (a task's `repr`, "Task was destroyed but it is pending!").
    name: &'static str,
    start: Start,
    finish: Option<Finish>,
    step: Mutex<Step>,
}

impl StartOnAwait {
    /// The coroutine of the call that `start` begins once awaited; its value is the call's.
    pub(crate) fn coroutine<'py>(
        py: Python<'py>,
        owner: &Bound<'py, PyAny>,
        name: &'static str,
        start: impl Fn(&Bound<'_, PyAny>) -> PyResult<Py<PyAny>> + Send + Sync + 'static,
    ) -> PyResult<Bound<'py, PyAny>> {
        let start = move |owner: &Bound<'_, PyAny>| start(owner).map(Some);
        StartOnAwait::make(py, owner, name, Box::new(start), None)
    }

    /// The coroutine that waits for each future `wait` gives, asking again once it is done, until `wait` gives
    /// none; then it gives what `finish` makes.
    pub(crate) fn then<'py>(
        py: Python<'py>,
        owner: &Bound<'py, PyAny>,
        name: &'static str,
        wait: impl Fn(&Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> + Send + Sync + 'static,
        finish: impl Fn(&Bound<'_, PyAny>) -> PyResult<Py<PyAny>> + Send + Sync + 'static,
    ) -> PyResult<Bound<'py, PyAny>> {
        StartOnAwait::make(py, owner, name, Box::new(wait), Some(Box::new(finish)))
    }

    fn make<'py>(
        py: Python<'py>,
        owner: &Bound<'py, PyAny>,
        name: &'static str,
        start: Start,
        finish: Option<Finish>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let coroutine = StartOnAwait {
            owner: owner.clone().unbind(),
            name,
            start,
            finish,
            step: Mutex::new(Step::Unstarted),
        };
        Ok(Bound::new(py, coroutine)?.into_any())
    }

    /// The started call's iterator, starting the call on the first step; `None` once done.
    fn iterator(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let mut step = self.step.lock();
        match &*step {
            Step::Awaiting(iterator) => return Ok(Some(iterator.clone_ref(py))),
            Step::Done => return Ok(None),
            Step::Unstarted => {}
        }
        // The call may fail, or have nothing to wait for; the coroutine is then done.
        *step = Step::Done;
        drop(step);
        Ok(Some(self.begin(py)?.unbind()))
    }

    /// Starts the call and awaits the future it gives: the future's iterator, which is then the step. The
    /// `StopIteration` of `finish`'s value (or its error) when the call has nothing to wait for. The step must be
    /// `Done` already: it stays so when the call fails, gives nothing, or its future's `__await__` raises.
    fn begin<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let Some(future) = (self.start)(self.owner.bind(py))? else {
            return Err(self.finished(py));
        };
        let iterator = future.bind(py).call_method0(intern!(py, "__await__"))?;
        *self.step.lock() = Step::Awaiting(iterator.clone().unbind());
        Ok(iterator)
    }

    /// The `StopIteration` that ends the coroutine with `finish`'s value, or `finish`'s error.
    fn finished(&self, py: Python<'_>) -> PyErr {
        let value = match &self.finish {
            Some(finish) => finish(self.owner.bind(py)),
            None => Ok(py.None()),
        };
        match value {
            Ok(value) => PyStopIteration::new_err((value,)),
            Err(error) => error,
        }
    }

    /// Marks the coroutine done when `outcome` ends it (a value, as `StopIteration`, or an exception); a wait
    /// that ends gives `finish`'s value.
    fn settle(&self, py: Python<'_>, outcome: PyResult<Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let Err(error) = outcome else {
            return outcome.map(Bound::unbind);
        };
        let finished = std::mem::replace(&mut *self.step.lock(), Step::Done);
        drop(finished);
        if self.finish.is_some() && error.is_instance_of::<PyStopIteration>(py) {
            return self.wait_again(py);
        }
        Err(error)
    }

    /// Once a wait's future is done: the next future to wait for, stepped once, or `finish`'s value when there
    /// is none (the wait is over).
    fn wait_again(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let outcome = self.begin(py)?.call_method0(intern!(py, "__next__"));
        self.settle(py, outcome)
    }
}

#[pymethods]
impl StartOnAwait {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The call's name, as a coroutine function's `__name__` is.
    #[getter]
    fn __name__(&self) -> &'static str {
        self.name.rsplit('.').next().unwrap_or(self.name)
    }

    /// The call's name qualified by its owner's class (`Session.wait_subagent_task`), as asyncio shows it.
    #[getter]
    fn __qualname__(&self, py: Python<'_>) -> PyResult<String> {
        let owner = self.owner.bind(py);
        if owner.is_none() {
            return Ok(self.name.to_owned());
        }
        Ok(format!("{}.{}", owner.get_type().name()?, self.name))
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.send(py, &py.None().into_bound(py))
    }

    #[pyo3(signature = (value, /))]
    fn send(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let unstarted = matches!(*self.step.lock(), Step::Unstarted);
        if unstarted && !value.is_none() {
            return Err(PyTypeError::new_err(
                "can't send non-None value to a just-started coroutine",
            ));
        }
        let Some(iterator) = self.iterator(py)? else {
            return Err(PyRuntimeError::new_err(
                "cannot reuse already awaited coroutine",
            ));
        };
        let iterator = iterator.bind(py);
        let outcome = if value.is_none() {
            iterator.call_method0(intern!(py, "__next__"))
        } else {
            iterator.call_method1(intern!(py, "send"), (value,))
        };
        self.settle(py, outcome)
    }

    /// Raises `exception` where the coroutine waits: in the started call's future, or at once if it has not
    /// started (it never will).
    #[pyo3(signature = (exception, value=None, traceback=None, /))]
    fn throw(
        &self,
        py: Python<'_>,
        exception: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let awaiting = match &*self.step.lock() {
            Step::Awaiting(iterator) => Some(iterator.clone_ref(py)),
            _ => None,
        };
        let Some(iterator) = awaiting else {
            let finished = std::mem::replace(&mut *self.step.lock(), Step::Done);
            drop(finished);
            return Err(exception_of(exception, value));
        };
        let iterator = iterator.bind(py);
        let outcome = match (value, traceback) {
            (None, None) => iterator.call_method1(intern!(py, "throw"), (exception,)),
            _ => iterator.call_method1(intern!(py, "throw"), (exception, value, traceback)),
        };
        self.settle(py, outcome)
    }

    /// Abandons the call: a started one's future is closed (which cancels a wait).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let step = std::mem::replace(&mut *self.step.lock(), Step::Done);
        if let Step::Awaiting(iterator) = step {
            iterator.bind(py).call_method0(intern!(py, "close"))?;
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.owner)?;
        // Never waits: a step in progress holds the lock only for a moment, and its references are its own.
        if let Some(step) = self.step.try_lock() {
            if let Step::Awaiting(iterator) = &*step {
                visit.call(iterator)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let step = std::mem::replace(&mut *self.step.lock(), Step::Done);
        drop(step);
    }
}

/// The exception that `throw(exception, value)` raises: an exception object, or a class with its argument.
pub(crate) fn exception_of(
    exception: &Bound<'_, PyAny>,
    value: Option<&Bound<'_, PyAny>>,
) -> PyErr {
    match exception.cast::<PyType>() {
        Ok(class) => PyErr::from_type(class.clone(), value.map(|value| value.clone().unbind())),
        Err(_) => PyErr::from_value(exception.clone()),
    }
}
