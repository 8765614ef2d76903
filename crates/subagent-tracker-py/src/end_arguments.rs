//! The ends of a batch (`end_subagent_tasks`): an iterable of mappings, each naming its task by `handle` (a
//! runner's handle) or by `task_id`, with the keyword arguments of `end_subagent_task` (`result`, or `error` with
//! `error_type` and `error_code`).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use subagent_tracker::{EndTarget, TaskEnd};

use crate::arguments::{self, Id, TaskIdArgument};
use crate::batch_arguments::{batch_items, batch_mapping, in_batch_item};

/// The keys an end of a batch may have.
const END_KEYS: [&str; 6] = [
    "handle",
    "task_id",
    "result",
    "error",
    "error_type",
    "error_code",
];

const EXPECTED: &str =
    "ends must be an iterable of mappings, each with a handle or a task_id and the keyword \
                        arguments of end_subagent_task";

/// Every end of the batch `ends`, described for the core. `handle_of` takes a runner's handle of the session's
/// store (`None` for anything else: a `TypeError` names `handle_kinds`); `keep` keeps a result as the store holds
/// it. An error names the end at fault by its index.
pub(crate) fn batch_ends<'py, H, V>(
    ends: &Bound<'py, PyAny>,
    handle_of: impl Fn(&Bound<'py, PyAny>) -> Option<H>,
    handle_kinds: &str,
    keep: impl Fn(&Bound<'_, PyAny>) -> PyResult<V>,
) -> PyResult<Vec<(EndTarget<H>, TaskEnd<V>)>> {
    let mut batch = Vec::new();
    for (index, item) in batch_items(ends, EXPECTED)?.enumerate() {
        let end = item
            .and_then(|item| batch_end(&item, &handle_of, handle_kinds, &keep))
            .map_err(|error| in_batch_item(ends.py(), error, "end", index, EXPECTED))?;
        batch.push(end);
    }
    Ok(batch)
}

fn batch_end<'py, H, V>(
    item: &Bound<'py, PyAny>,
    handle_of: &impl Fn(&Bound<'py, PyAny>) -> Option<H>,
    handle_kinds: &str,
    keep: &impl Fn(&Bound<'_, PyAny>) -> PyResult<V>,
) -> PyResult<(EndTarget<H>, TaskEnd<V>)> {
    let value = batch_mapping(item, |key| END_KEYS.contains(&key))?;
    let target = match (value("handle")?, value("task_id")?) {
        (Some(handle), None) => EndTarget::Handle(handle_of(&handle).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "has a handle that is a {}, not {handle_kinds}",
                arguments::type_name(&handle)
            ))
        })?),
        (None, Some(task_id)) => EndTarget::TaskId(task_id.extract::<Id<TaskIdArgument>>()?.0),
        _ => {
            return Err(PyTypeError::new_err(
                "must name its task by one of handle and task_id",
            ))
        }
    };
    let ended = arguments::end_outcome(
        value("result")?.as_ref(),
        value("error")?.as_ref(),
        value("error_type")?.as_ref(),
        value("error_code")?.as_ref(),
        keep,
    )?;
    let end = match ended {
        Ok(result) => TaskEnd::Completed(result),
        Err(failure) => TaskEnd::Failed(failure),
    };
    Ok((target, end))
}
