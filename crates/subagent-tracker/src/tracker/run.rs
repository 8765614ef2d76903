//! What a session keeps of a run: the live entry while anything can still change it, then a compact record
//! (`FinishedRun`). Whoever still holds the entry (a handle, a watch, a child's link to its parent) keeps it;
//! it is freed with the last of them.
//!
//! One finished run keeps its entry: a reservation cancelled before anyone claimed it, because its claim
//! still succeeds, hands over a handle whose token has fired, and records when it was claimed.

use std::sync::Arc;

use crate::sync::AtomicU32;
use crate::tracker::entry::TaskEntry;
use crate::tracker::finished_run::SharedRun;
use crate::tracker::retention::Retained;
use crate::SubagentTaskSnapshot;

/// A run in the session's id map (the retention window holds its key).
pub(crate) enum Run<V> {
    /// Pending, or finished with its bookkeeping not yet done, or a reservation cancelled unclaimed.
    Live(Arc<TaskEntry<V>>),
    /// Finished, collapsed into its record.
    Finished(SharedRun<V>),
}

impl<V> Clone for Run<V> {
    fn clone(&self) -> Self {
        match self {
            Run::Live(entry) => Run::Live(entry.clone()),
            Run::Finished(run) => Run::Finished(run.clone()),
        }
    }
}

impl<V> Run<V> {
    pub(crate) fn task_id(&self) -> &Arc<str> {
        match self {
            Run::Live(entry) => &entry.task_id,
            Run::Finished(run) => &run.task_id,
        }
    }

    pub(crate) fn sequence(&self) -> u64 {
        match self {
            Run::Live(entry) => entry.sequence,
            Run::Finished(run) => run.sequence,
        }
    }

    pub(crate) fn is_finished(&self) -> bool {
        match self {
            Run::Live(entry) => entry.is_finished(),
            Run::Finished(_) => true,
        }
    }

    /// The live entry, unless the run has collapsed (and so has finished).
    pub(crate) fn live(self) -> Option<Arc<TaskEntry<V>>> {
        match self {
            Run::Live(entry) => Some(entry),
            Run::Finished(_) => None,
        }
    }

    /// Calls `visit` with the metadata and the result, if any.
    pub(crate) fn visit_values(&self, visit: impl FnMut(&V)) {
        match self {
            Run::Live(entry) => entry.visit_values(visit),
            Run::Finished(run) => run.visit_values(visit),
        }
    }
}

impl<V: Clone> Run<V> {
    pub(crate) fn snapshot(&self, session_id: &Arc<str>) -> SubagentTaskSnapshot<V> {
        match self {
            Run::Live(entry) => entry.snapshot(session_id),
            Run::Finished(run) => run.snapshot(session_id),
        }
    }
}

impl<V> Retained for Run<V> {
    fn window_node(&self) -> &AtomicU32 {
        match self {
            Run::Live(entry) => &entry.window_node,
            Run::Finished(run) => &run.window_node,
        }
    }

    fn sequence(&self) -> u64 {
        Run::sequence(self)
    }

    fn allocations(&self) -> [usize; 2] {
        let record = match self {
            Run::Live(entry) => Arc::as_ptr(entry).addr(),
            Run::Finished(run) => triomphe::Arc::as_ptr(run).addr(),
        };
        [record, Arc::as_ptr(self.task_id()).cast::<u8>().addr()]
    }
}
