//! The methods of every runner's handle class, declared once: [`handle_methods!`] writes them for the in-memory
//! `SubagentTaskHandle` and for both families of Redis handles. Each only reads its arguments and hands them to
//! the handle's store through the seam ([`HandleStore`](crate::session_store::HandleStore)).

/// `#[pymethods]` of `$handle`, whose `calls` field is its [`HandleStore`](crate::session_store::HandleStore):
/// `$extra` (what only this class has), then every method all handles share. With `with`, the handle is also a
/// blocking context manager (the in-memory handle and the blocking Redis one; an asyncio handle has only
/// `async with`).
macro_rules! handle_methods {
    ($handle:ident, with, { $($extra:tt)* }) => {
        $crate::handle_methods::handle_methods! { $handle, {
            $($extra)*

            fn __enter__(slf: Py<Self>) -> Py<Self> {
                slf
            }

            /// Ends the task from how the block exits: success, failure, or a stop on cancellation; the
            /// exception, if any, propagates.
            #[pyo3(signature = (_exception_type, exception, _traceback))]
            fn __exit__(
                &self,
                py: Python<'_>,
                _exception_type: &Bound<'_, PyAny>,
                exception: &Bound<'_, PyAny>,
                _traceback: &Bound<'_, PyAny>,
            ) -> PyResult<bool> {
                let ending = $crate::runner_exit::runner_exit(py, exception)?;
                $crate::session_store::HandleStore::end(&self.calls, py, ending, None)?;
                Ok(false)
            }
        } }
    };
    ($handle:ident, { $($extra:tt)* }) => {
        #[pymethods]
        impl $handle {
            $($extra)*

            /// The task's id.
            #[getter]
            fn task_id(&self) -> &str {
                $crate::session_store::HandleStore::task_id(&self.calls)
            }

            /// The id of the session that owns the task.
            #[getter]
            fn session_id(&self) -> &str {
                $crate::session_store::HandleStore::session_id(&self.calls)
            }

            /// The task's cancellation token (the same object every time); on Redis it fires in this process
            /// when the task is cancelled from any process.
            #[getter]
            fn token(&self, py: Python<'_>) -> PyResult<Py<$crate::token::CancellationToken>> {
                $crate::session_store::HandleStore::token(&self.calls, py)
            }

            /// Records a progress milestone, with `data` (kept read-only; JSON-serialisable on Redis) in the
            /// task's progress log; False (and nothing recorded) once the task has finished.
            #[pyo3(signature = (message, *, data=None))]
            fn progress<'py>(
                &self,
                py: Python<'py>,
                message: &Bound<'_, PyAny>,
                data: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let message = $crate::arguments::string(message, "message")?;
                let message = $crate::arguments::text(&message, "message")?;
                let data = data
                    .filter(|data| !data.is_none())
                    .map($crate::event_arguments::StoredValue::data)
                    .transpose()?;
                $crate::session_store::HandleStore::progress(&self.calls, py, message, data)
            }

            /// Reports success; True exactly when this moved the task from running to completed.
            #[pyo3(signature = (result=None))]
            fn complete<'py>(
                &self,
                py: Python<'py>,
                result: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let result = result
                    .filter(|result| !result.is_none())
                    .map($crate::event_arguments::StoredValue::result)
                    .transpose()?;
                let ending = $crate::runner_exit::RunnerExit::Completed;
                $crate::session_store::HandleStore::end(&self.calls, py, ending, result)
            }

            /// Reports failure with a message or an exception, and the failure's type and code if given (an
            /// exception's type defaults to its class name); True exactly when this moved the task to failed.
            #[pyo3(signature = (error, *, error_type=None, error_code=None))]
            fn fail<'py>(
                &self,
                py: Python<'py>,
                error: &Bound<'_, PyAny>,
                error_type: Option<&Bound<'_, PyAny>>,
                error_code: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let failure = $crate::arguments::failure(error, error_type, error_code)?;
                let ending = $crate::runner_exit::RunnerExit::Failed(failure);
                $crate::session_store::HandleStore::end(&self.calls, py, ending, None)
            }

            /// Pauses the running task (to wait for a person's approval, say), for every process on Redis:
            /// running becomes paused, which is pending, so a cancel or a deadline still reaches it. Snapshots
            /// show `reason` as `pause_reason`. False if the task is not running.
            #[pyo3(signature = (reason=None))]
            fn pause<'py>(
                &self,
                py: Python<'py>,
                reason: Option<&Bound<'_, PyAny>>,
            ) -> $crate::session_store::Answer<'py> {
                let reason = $crate::arguments::optional_string(reason, "reason")?;
                $crate::session_store::HandleStore::pause(&self.calls, py, reason)
            }

            /// `await handle.resumed()`: waits while the task is paused and returns the value the session
            /// resumed it with, from any process (at once if the task is not paused); raises
            /// `TaskCancelledError` if the task is cancelled while paused.
            fn resumed<'py>(slf: &Bound<'py, Self>) -> $crate::session_store::Answer<'py> {
                fn calls<'a>(handle: &'a Bound<'_, PyAny>) -> PyResult<&'a $handle> {
                    Ok(handle.cast::<$handle>()?.get())
                }
                $crate::start_on_await::StartOnAwait::then(
                    slf.py(),
                    slf.as_any(),
                    "resumed",
                    |handle| {
                        $crate::session_store::HandleStore::resume_future(&calls(handle)?.calls, handle.py())
                    },
                    |handle| {
                        $crate::session_store::HandleStore::resumed_value(&calls(handle)?.calls, handle.py())
                    },
                )
            }

            /// The blocking form of `resumed()`, for threads; raises `TimeoutError` if `timeout` seconds pass
            /// first.
            #[pyo3(signature = (timeout=None))]
            fn wait_resumed(
                &self,
                py: Python<'_>,
                timeout: Option<$crate::arguments::Seconds<$crate::arguments::TimeoutArgument>>,
            ) -> PyResult<Py<PyAny>> {
                let timeout = timeout.map(|timeout| timeout.0);
                if !$crate::session_store::HandleStore::wait_for_resume(&self.calls, py, timeout)? {
                    return Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                        "task {:?} was not resumed within {} seconds",
                        $crate::session_store::HandleStore::task_id(&self.calls),
                        timeout.unwrap_or_default().as_secs_f64()
                    )));
                }
                $crate::session_store::HandleStore::resumed_value(&self.calls, py)
            }

            /// Records that the runner did not stop within its grace period after a cancel and is being stopped
            /// by force; snapshots show it as `escalated`.
            fn record_escalation<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                $crate::session_store::HandleStore::record_escalation(&self.calls, py)
            }

            /// A snapshot of the task's run now.
            fn snapshot<'py>(&self, py: Python<'py>) -> $crate::session_store::Answer<'py> {
                $crate::session_store::HandleStore::snapshot(&self.calls, py)
            }

            fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<$crate::ready::Ready>> {
                $crate::ready::Ready::entered(py, slf.into_any())
            }

            /// `async with handle:` ends the task from how the block exits, as `with` does; the exception, if
            /// any, propagates.
            #[pyo3(signature = (_exception_type, exception, _traceback))]
            fn __aexit__<'py>(
                &self,
                py: Python<'py>,
                _exception_type: &Bound<'_, PyAny>,
                exception: &Bound<'_, PyAny>,
                _traceback: &Bound<'_, PyAny>,
            ) -> $crate::session_store::Answer<'py> {
                let ending = $crate::runner_exit::runner_exit(py, exception)?;
                $crate::session_store::HandleStore::end_async_block(&self.calls, py, ending)
            }

            fn __traverse__(&self, visit: pyo3::gc::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
                $crate::session_store::HandleStore::visit(&self.calls, &visit)
            }
        }
    };
}

pub(crate) use handle_methods;
