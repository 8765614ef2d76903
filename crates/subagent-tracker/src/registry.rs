//! Sessions looked up by id, for the code that must stop a run without holding its session.
//!
//! The registry's lock is a leaf (level 6 in the crate's lock hierarchy, see the crate root).

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use crate::sync::Mutex;
use crate::task_id::validate_task_id;
use crate::tracker::engine::{MetadataMerge, SessionList};
use crate::{InMemorySubagentTaskTracker, TrackerConfig, TrackerError};

/// The live sessions of one process, by id: the embedded default registry.
///
/// [`session`](Self::session) returns the live session with an id, creating it if there is none, so every
/// part of a program that names a session reaches the same one. A session closed with
/// [`close`](InMemorySubagentTaskTracker::close) leaves the registry once all its tasks are finished; the id
/// then names a new session. Cheap to clone: clones share the sessions.
pub struct InMemoryRegistry<V = String> {
    shared: Arc<RegistryShared<V>>,
}

struct RegistryShared<V> {
    sessions: Mutex<HashMap<Arc<str>, InMemorySubagentTaskTracker<V>, RandomState>>,
    /// Set on every session the registry creates (see `InMemorySubagentTaskTracker::set_metadata_merge`).
    metadata_merge: Option<MetadataMerge<V>>,
}

impl<V> Clone for InMemoryRegistry<V> {
    fn clone(&self) -> Self {
        InMemoryRegistry {
            shared: self.shared.clone(),
        }
    }
}

impl<V: Clone + Send + Sync + 'static> InMemoryRegistry<V> {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        InMemoryRegistry {
            shared: Arc::new(RegistryShared {
                sessions: Mutex::new(HashMap::with_hasher(RandomState::default())),
                metadata_merge: None,
            }),
        }
    }

    /// An empty registry whose sessions merge a parent's metadata with a child's own with `merge` (see
    /// [`InMemorySubagentTaskTracker::set_metadata_merge`]).
    #[must_use]
    pub fn with_metadata_merge(merge: MetadataMerge<V>) -> Self {
        InMemoryRegistry {
            shared: Arc::new(RegistryShared {
                sessions: Mutex::new(HashMap::with_hasher(RandomState::default())),
                metadata_merge: Some(merge),
            }),
        }
    }

    /// The live session `session_id`, created with `config` if there is none (`config` is ignored for a
    /// session that exists). `None` creates a session with a generated id. Of concurrent calls for one id,
    /// exactly one creates it and all return it.
    ///
    /// # Errors
    /// [`TrackerError::InvalidId`] for an empty or oversized id.
    pub fn session(
        &self,
        session_id: Option<&str>,
        config: TrackerConfig,
    ) -> Result<InMemorySubagentTaskTracker<V>, TrackerError> {
        if let Some(session_id) = session_id {
            validate_task_id("session_id", session_id)?;
            if let Some(session) = self.get_session(session_id) {
                return Ok(session);
            }
        }
        // Made outside the lock (it generates ids and allocates); a racing creator's copy is dropped unused.
        // It knows its registry before anyone can reach it, so a close always finds the registry to leave.
        let created = InMemorySubagentTaskTracker::with_config(session_id, config);
        if let Some(merge) = &self.shared.metadata_merge {
            created.set_metadata_merge(merge.clone());
        }
        let listing: Arc<dyn SessionList> = self.shared.clone();
        let _ = created.shared().registry.set(Arc::downgrade(&listing));
        let session = self
            .shared
            .sessions
            .lock()
            .entry(created.session_id().clone())
            .or_insert(created)
            .clone();
        Ok(session)
    }

    /// The live session `session_id`, or `None`; never creates one.
    #[must_use]
    pub fn get_session(&self, session_id: &str) -> Option<InMemorySubagentTaskTracker<V>> {
        self.shared.sessions.lock().get(session_id).cloned()
    }

    /// The ids of the live sessions, in no particular order.
    #[must_use]
    pub fn sessions(&self) -> Vec<Arc<str>> {
        self.shared.sessions.lock().keys().cloned().collect()
    }

    /// Calls `visit` with every live session (for a binding that must show its garbage collector what the
    /// registry holds). The registry is not locked while `visit` runs.
    pub fn visit_sessions(&self, mut visit: impl FnMut(&InMemorySubagentTaskTracker<V>)) {
        let sessions: Vec<_> = self.shared.sessions.lock().values().cloned().collect();
        for session in &sessions {
            visit(session);
        }
    }

    /// Forgets every session (they keep working for whoever holds them).
    pub fn clear(&self) {
        let sessions = std::mem::take(&mut *self.shared.sessions.lock());
        drop(sessions);
    }
}

impl<V: Clone + Send + Sync + 'static> Default for InMemoryRegistry<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Send + Sync> SessionList for RegistryShared<V> {
    fn leave(&self, session_id: &str, session_key: usize) {
        let left = {
            let mut sessions = self.sessions.lock();
            match sessions.get(session_id) {
                Some(listed) if listed.shared().key() == session_key => sessions.remove(session_id),
                _ => None,
            }
        };
        drop(left);
    }

    fn lists(&self, session_id: &str, session_key: usize) -> bool {
        self.sessions
            .lock()
            .get(session_id)
            .is_some_and(|listed| listed.shared().key() == session_key)
    }
}
