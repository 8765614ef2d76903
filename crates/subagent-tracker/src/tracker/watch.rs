//! Waiting for one run of a task to finish.

use std::sync::Arc;

use crate::token::WaitForFinish;
use crate::tracker::run::Run;
use crate::SubagentTaskSnapshot;

/// Follows one run of a task, even after that run is evicted or its id is started again.
///
/// Made by [`InMemorySubagentTaskTracker::watch`](crate::InMemorySubagentTaskTracker::watch).
pub struct TaskWatch<V = String> {
    run: Run<V>,
    session_id: Arc<str>,
}

impl<V> Clone for TaskWatch<V> {
    fn clone(&self) -> Self {
        TaskWatch {
            run: self.run.clone(),
            session_id: self.session_id.clone(),
        }
    }
}

impl<V: Clone> TaskWatch<V> {
    pub(crate) fn new(run: Run<V>, session_id: Arc<str>) -> Self {
        TaskWatch { run, session_id }
    }

    /// True once the run has finished.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.run.is_finished()
    }

    /// A future that is ready once the run has finished; dropping it takes its registration back.
    pub fn wait_finished(&self) -> WaitForFinish {
        match &self.run {
            Run::Live(entry) => WaitForFinish::new(entry.signal.clone()),
            Run::Finished(_) => WaitForFinish::ready(),
        }
    }

    /// Waits until the run has finished and returns its final snapshot.
    pub async fn finished(&self) -> SubagentTaskSnapshot<V> {
        self.wait_finished().await;
        self.run.snapshot(&self.session_id)
    }

    /// A snapshot of the run now.
    #[must_use]
    pub fn snapshot(&self) -> SubagentTaskSnapshot<V> {
        self.run.snapshot(&self.session_id)
    }

    /// Calls `visit` with the run's metadata and result, if any.
    pub fn visit_values(&self, visit: impl FnMut(&V)) {
        self.run.visit_values(visit);
    }
}
