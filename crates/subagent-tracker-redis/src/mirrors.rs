//! The in-memory mirrors of the sessions a worker process runs tasks in: one tracker per session id, holding the
//! tokens of this process's runs there, kept exactly as long as a session object or a runner's handle of this
//! process uses it, so that a long-lived worker keeps no memory for the sessions it once touched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use subagent_tracker::{InMemorySubagentTaskTracker, TrackerConfig};

use crate::coalesce::CoalescedCalls;
use crate::watched_tokens::Watches;

type Table = Mutex<HashMap<Arc<str>, Weak<Mirror>>>;

/// The mirrors of one worker process, by session id.
#[derive(Default)]
pub(crate) struct Mirrors {
    table: Arc<Table>,
}

/// The mirror of one session: leaves the table when its last user lets go of it.
pub(crate) struct Mirror {
    pub(crate) tracker: InMemorySubagentTaskTracker<String>,
    /// The runs of the session that this process watches for tokens by id.
    pub(crate) watches: Watches,
    /// The coalesced calls of the incarnation last opened here (`calls`).
    calls: Mutex<Option<(Arc<str>, Arc<CoalescedCalls>)>>,
    session_id: Arc<str>,
    table: Weak<Table>,
}

impl Mirrors {
    /// The mirror of `session_id`, made if no user holds one.
    pub(crate) fn use_session(&self, session_id: &Arc<str>) -> Arc<Mirror> {
        let mut table = lock(&self.table);
        if let Some(mirror) = table.get(session_id).and_then(Weak::upgrade) {
            return mirror;
        }
        let mirror = Arc::new(Mirror {
            // The mirror retains nothing: queries go to Redis.
            tracker: InMemorySubagentTaskTracker::with_config(
                Some(&**session_id),
                TrackerConfig::default().with_max_finished_tasks(0),
            ),
            watches: Watches::new(session_id),
            calls: Mutex::new(None),
            session_id: session_id.clone(),
            table: Arc::downgrade(&self.table),
        });
        table.insert(session_id.clone(), Arc::downgrade(&mirror));
        mirror
    }

    /// The mirror of `session_id`, if some user holds it.
    pub(crate) fn get(&self, session_id: &str) -> Option<Arc<Mirror>> {
        lock(&self.table).get(session_id).and_then(Weak::upgrade)
    }

    /// How many sessions are mirrored now.
    pub(crate) fn len(&self) -> usize {
        lock(&self.table).len()
    }
}

impl Mirror {
    /// The coalesced calls of the session's incarnation `incarnation`, shared by every object of it in this
    /// process (`made` makes them for the first).
    pub(crate) fn calls(
        &self,
        incarnation: &Arc<str>,
        made: impl FnOnce() -> CoalescedCalls,
    ) -> Arc<CoalescedCalls> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*calls {
            Some((kept, shared)) if kept == incarnation => shared.clone(),
            _ => {
                let shared = Arc::new(made());
                *calls = Some((incarnation.clone(), shared.clone()));
                shared
            }
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        let mut table = lock(&table);
        // A new mirror of the id may have been made since this one's last user let go: it stays.
        if table
            .get(&self.session_id)
            .is_some_and(|entry| entry.strong_count() == 0)
        {
            table.remove(&self.session_id);
            crate::maps::shrink_if_mostly_empty(&mut *table);
        }
    }
}

fn lock(table: &Table) -> MutexGuard<'_, HashMap<Arc<str>, Weak<Mirror>>> {
    // Each change is one insert or remove: the table stays consistent across a panic.
    table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
