//! Cancels recorded before their task starts (contract §3, cancel before start): the next start or reservation
//! of the id begins `Cancelled`, with the recorded reason and cause `requested`. A record lasts the session's
//! `early_cancel_ttl`; at most [`MAX_EARLY_CANCELS`] are kept, and the oldest goes first.
//!
//! A cancel records and then looks for the task in the session's id map; a start becomes visible in the id map
//! and then looks for a record. Both looks at the map go through the lock of the id's shard, so one side's
//! critical section comes first and everything before it happens before the other's, and all after: either
//! the cancel finds the task, or the start finds the record. So a record never misses the start it was meant
//! for, with no fence of its own (`tests/loom.rs` checks it). The records' lock is a leaf (level 6 in the
//! crate's lock hierarchy, see the crate root).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::fast::RandomState;

use crate::sync::{AtomicU64, Mutex};

/// How many cancels a session keeps for tasks that have not started; past this the oldest is dropped.
pub const MAX_EARLY_CANCELS: usize = 10_000;

/// How long a session keeps a cancel for a task that has not started, unless it is made with another
/// `early_cancel_ttl`.
pub const DEFAULT_EARLY_CANCEL_TTL: Duration = Duration::from_secs(60);

pub(crate) struct EarlyCancels {
    /// How many records there are: a start in a session that has none takes no lock. Written under the records'
    /// lock; read with no order of its own, since the id map's lock orders a start with a cancel (module docs).
    count: AtomicU64,
    records: Mutex<Records>,
}

#[derive(Default)]
struct Records {
    by_id: HashMap<Arc<str>, Recorded, RandomState>,
    /// Ids in the order they were recorded, with the stamp of that record (a later record of the id, or its
    /// taking, leaves the entry stale): the oldest expire and are dropped first.
    order: VecDeque<(Arc<str>, u64)>,
    next_stamp: u64,
}

struct Recorded {
    reason: Arc<str>,
    expires: Option<Instant>,
    stamp: u64,
}

impl Records {
    fn is_current(&self, task_id: &str, stamp: u64) -> bool {
        self.by_id
            .get(task_id)
            .is_some_and(|recorded| recorded.stamp == stamp)
    }

    /// Drops the expired records, and the oldest beyond the bound.
    fn trim(&mut self, now: Instant) {
        while let Some((task_id, stamp)) = self.order.front() {
            let current = self.is_current(task_id, *stamp);
            let expired = current
                && self.by_id[&**task_id]
                    .expires
                    .is_some_and(|expires| expires <= now);
            if current && !expired && self.by_id.len() <= MAX_EARLY_CANCELS {
                break;
            }
            if current {
                self.by_id.remove(&**task_id);
            }
            self.order.pop_front();
        }
        if self.order.len() > 2 * self.by_id.len() + 64 {
            let by_id = &self.by_id;
            self.order.retain(|(task_id, stamp)| {
                by_id
                    .get(&**task_id)
                    .is_some_and(|recorded| recorded.stamp == *stamp)
            });
        }
    }
}

impl EarlyCancels {
    pub(crate) fn new() -> EarlyCancels {
        EarlyCancels {
            count: AtomicU64::new(0),
            records: Mutex::new(Records::default()),
        }
    }

    /// Records a cancel of `task_id` for its next start, kept for `ttl`; a later record of the id replaces it.
    pub(crate) fn record(&self, task_id: Arc<str>, reason: Arc<str>, ttl: Duration) {
        let now = Instant::now();
        let mut records = self.records.lock();
        records.next_stamp += 1;
        let stamp = records.next_stamp;
        records.by_id.insert(
            task_id.clone(),
            Recorded {
                reason,
                expires: now.checked_add(ttl),
                stamp,
            },
        );
        records.order.push_back((task_id, stamp));
        records.trim(now);
        self.count
            .store(records.by_id.len() as u64, Ordering::Relaxed);
    }

    /// The reason of the live record for `task_id`, left in place.
    #[inline]
    pub(crate) fn peek(&self, task_id: &str) -> Option<Arc<str>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.peek_recorded(task_id)
    }

    fn peek_recorded(&self, task_id: &str) -> Option<Arc<str>> {
        let records = self.records.lock();
        let recorded = records.by_id.get(task_id)?;
        recorded
            .expires
            .is_none_or(|expires| expires > Instant::now())
            .then(|| recorded.reason.clone())
    }

    /// Takes the live record for `task_id`: its reason, once. Called once the task it applies to is visible in
    /// the id map (see the module's docs).
    #[inline]
    pub(crate) fn take(&self, task_id: &str) -> Option<Arc<str>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.take_recorded(task_id)
    }

    fn take_recorded(&self, task_id: &str) -> Option<Arc<str>> {
        let mut records = self.records.lock();
        let recorded = records.by_id.remove(task_id)?;
        self.count
            .store(records.by_id.len() as u64, Ordering::Relaxed);
        recorded
            .expires
            .is_none_or(|expires| expires > Instant::now())
            .then_some(recorded.reason)
    }
}
