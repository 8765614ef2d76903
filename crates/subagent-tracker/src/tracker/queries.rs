//! Reading a session in memory: one task, every task, pages of them, the pending ones, a task's token and
//! watch, and the event stream; and the session's own reads of every retained run.

use std::sync::Arc;
use std::time::SystemTime;

use crate::tracker::engine::TrackerShared;
use crate::tracker::event_bus::EventSubscription;
use crate::tracker::run::Run;
use crate::InMemorySubagentTaskTracker;
use crate::{SubagentTaskSnapshot, SubagentTaskToken, TrackerError};

impl<V: Clone + Send + Sync + 'static> InMemorySubagentTaskTracker<V> {
    /// A snapshot of the retained task `task_id`, or `None`. Copies that one task only.
    #[must_use]
    pub fn get(&self, task_id: &str) -> Option<SubagentTaskSnapshot<V>> {
        let cutoff = self.shared.forget_aged();
        self.shared
            .lookup(task_id)
            .map(|run| run.snapshot(&self.shared.session_id))
            .filter(|task| !is_aged(task, cutoff))
    }

    /// The cancellation token of the retained task `task_id` (contract §4, a token by id), for code that
    /// holds no handle: it fires when the task is cancelled, or has fired if it was. A task that completed or
    /// failed gives a token that never fires.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] when no task of that id is retained.
    pub fn token(&self, task_id: &str) -> Result<SubagentTaskToken, TrackerError> {
        let cutoff = self.shared.forget_aged();
        let unknown = || TrackerError::unknown_task(task_id, &self.shared.session_id);
        match self.shared.lookup(task_id).ok_or_else(unknown)? {
            Run::Live(entry) => Ok(SubagentTaskToken::new(
                entry.signal.clone(),
                entry.task_id.clone(),
            )),
            Run::Finished(run) => {
                if is_aged(&run.snapshot(&self.shared.session_id), cutoff) {
                    return Err(unknown());
                }
                Ok(SubagentTaskToken::new(
                    run.settled_signal(),
                    run.task_id.clone(),
                ))
            }
        }
    }

    /// Snapshots of every retained task, in start order.
    #[must_use]
    pub fn tasks(&self) -> Vec<SubagentTaskSnapshot<V>> {
        let cutoff = self.shared.forget_aged();
        self.shared
            .tasks
            .runs()
            .iter()
            .map(|run| run.snapshot(&self.shared.session_id))
            .filter(|task| !is_aged(task, cutoff))
            .collect()
    }

    /// One page of the session's retained tasks (with `pending`, of its pending tasks), in start order: at most
    /// `limit` (at least one) from `cursor` (`None` for the first page), and the cursor of the next page (`None`
    /// once the listing is done). The in-memory twin of the Redis store's pages (contract §6): each page is a
    /// slice of the listing as it is when the page is asked for, so a task started or finished between pages
    /// may move a later page by one, and come twice or not at all.
    ///
    /// # Errors
    /// [`TrackerError::InvalidCursor`] for a cursor no page gave.
    pub fn tasks_page(
        &self,
        pending: bool,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<SubagentTaskSnapshot<V>>, Option<String>), TrackerError> {
        let first = match cursor {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .map_err(|_| TrackerError::InvalidCursor {
                    cursor: Arc::from(cursor),
                })?,
        };
        let listed = if pending {
            self.pending()
        } else {
            self.tasks()
        };
        let last = first.saturating_add(limit.max(1)).min(listed.len());
        let next = (last < listed.len()).then(|| last.to_string());
        Ok((
            listed
                .into_iter()
                .skip(first)
                .take(last.saturating_sub(first))
                .collect(),
            next,
        ))
    }

    /// Snapshots of the pending (`Queued` and `Running`) tasks, in start order. Costs O(p log p) in the number
    /// p of pending tasks, whatever the number retained.
    #[must_use]
    pub fn pending(&self) -> Vec<SubagentTaskSnapshot<V>> {
        self.shared
            .tasks
            .pending_entries()
            .iter()
            .map(|entry| entry.snapshot(&self.shared.session_id))
            // A task cancelled a moment ago may still be indexed; the snapshot tells.
            .filter(|snapshot| !snapshot.status.is_terminal())
            .collect()
    }

    /// How many tasks are retained (pending, cancelled-but-unfinished and finished).
    #[must_use]
    pub fn retained_count(&self) -> usize {
        self.shared.forget_aged();
        self.shared.tasks.len()
    }

    /// Waits until the task `task_id` has finished and returns its final snapshot.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] when no task with that id is retained at the call.
    pub async fn wait_finished(
        &self,
        task_id: &str,
    ) -> Result<SubagentTaskSnapshot<V>, TrackerError> {
        let watch = self
            .watch(task_id)
            .ok_or_else(|| TrackerError::unknown_task(task_id, &self.shared.session_id))?;
        Ok(watch.finished().await)
    }

    /// A [`TaskWatch`](crate::TaskWatch) on the current run of `task_id`, or `None` for an unknown id.
    #[must_use]
    pub fn watch(&self, task_id: &str) -> Option<crate::TaskWatch<V>> {
        self.shared
            .lookup(task_id)
            .map(|run| crate::TaskWatch::new(run, self.shared.session_id.clone()))
    }

    /// A watch on the current run of `task_id`.
    ///
    /// # Errors
    /// [`TrackerError::UnknownTask`] for an unknown id.
    pub fn watch_or_error(&self, task_id: &str) -> Result<crate::TaskWatch<V>, TrackerError> {
        self.watch(task_id)
            .ok_or_else(|| TrackerError::unknown_task(task_id, &self.shared.session_id))
    }

    /// Subscribes to lifecycle events from this moment on, with the configured per-subscriber buffer.
    #[must_use]
    pub fn subscribe(&self) -> EventSubscription {
        self.shared.bus.subscribe(self.shared.config.event_buffer)
    }
}

/// True for a finished task that ended at or before `cutoff`: no query shows it (contract §7).
fn is_aged<V>(task: &SubagentTaskSnapshot<V>, cutoff: Option<SystemTime>) -> bool {
    task.finished
        && cutoff.is_some_and(|cutoff| task.ended_at.is_some_and(|ended_at| ended_at <= cutoff))
}

impl<V: Clone> TrackerShared<V> {
    /// Calls `visit` with the values of every retained run: a finished record's where the map holds it (they
    /// are read with no lock of the run's), a live entry's once the map's lock is released (they are read under
    /// its record lock, never taken under the map's).
    pub(super) fn visit_values(&self, mut visit: impl FnMut(&V)) {
        let mut live = Vec::new();
        // Where the map holds them, counting no reference per run: the collector visits every retained run.
        self.tasks.visit(|retained| match retained {
            Run::Finished(run) => run.visit_values(&mut visit),
            Run::Live(entry) => live.push(entry.clone()),
        });
        for entry in live {
            entry.visit_values(&mut visit);
        }
    }
}
