//! The index of a session's pending tasks, so that listing them costs what is pending, not what is retained.
//!
//! It is split into stripes, one per thread (threads are dealt stripes in turn as they first start a task),
//! and a task stays in the stripe of the thread that started it. Two threads that start and finish tasks in
//! one session then write different cache lines, where a map sharded by key would have both threads writing
//! every shard. Listing visits every stripe and sorts by start sequence.
//!
//! Each stripe's lock is a leaf: nothing else is locked while it is held.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;

use crate::sync::Mutex;
use crate::task_entry::TaskEntry;

type Stripe<V> = CachePadded<Mutex<HashMap<u64, Arc<TaskEntry<V>>, RandomState>>>;

pub(crate) struct PendingIndex<V> {
    stripes: Box<[Stripe<V>]>,
}

impl<V> PendingIndex<V> {
    pub(crate) fn new() -> PendingIndex<V> {
        PendingIndex {
            stripes: (0..stripe_count())
                .map(|_| CachePadded::new(Mutex::new(HashMap::default())))
                .collect(),
        }
    }

    /// Indexes a pending task in its stripe.
    pub(crate) fn insert(&self, entry: &Arc<TaskEntry<V>>) {
        self.stripes[usize::from(entry.pending_stripe)]
            .lock()
            .insert(entry.sequence, entry.clone());
    }

    /// Drops a task that is no longer pending; nothing happens if it was not indexed.
    pub(crate) fn remove(&self, entry: &TaskEntry<V>) {
        let removed = self.stripes[usize::from(entry.pending_stripe)]
            .lock()
            .remove(&entry.sequence);
        // Dropped with the stripe unlocked.
        drop(removed);
    }

    /// Every indexed task, in start order. A task that stopped being pending a moment ago may be among them.
    pub(crate) fn entries(&self) -> Vec<Arc<TaskEntry<V>>> {
        let mut entries = Vec::new();
        for stripe in &*self.stripes {
            entries.extend(stripe.lock().values().cloned());
        }
        entries.sort_unstable_by_key(|entry| entry.sequence);
        entries
    }
}

/// The stripe of the calling thread, for a task it starts.
pub(crate) fn current_stripe() -> u8 {
    static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: u8 = stripe_of(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
    }
    STRIPE.with(|stripe| *stripe)
}

fn stripe_of(thread: usize) -> u8 {
    u8::try_from(thread % stripe_count()).expect("at most MAX_STRIPES stripes")
}

/// At most this many stripes, so that a stripe number fits in a byte and a session stays small on big machines.
const MAX_STRIPES: usize = 64;

/// Twice the cores, so that threads dealt stripes in turn rarely share one while they run at once.
fn stripe_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(8, |cores| (cores.get() * 2).clamp(2, MAX_STRIPES))
    })
}
