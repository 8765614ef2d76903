//! The index of a session's pending tasks, so that listing them costs what is pending, not what is retained.
//!
//! It is split into stripes, one per thread (threads are dealt stripes in turn as they first start a task),
//! and a task stays in the stripe of the thread that started it. Two threads that start and finish tasks in
//! one session then write different cache lines, where a map sharded by key would have both threads writing
//! every shard. Listing visits every stripe and sorts by start sequence.
//!
//! Each stripe's lock is a leaf (level 5 in the crate's lock hierarchy, see the crate root).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;

use crate::sync::Mutex;

/// What the index holds: a task that knows its stripe and its place in the start order.
pub(crate) trait Indexed {
    /// The stripe of the thread that started the task ([`current_stripe`] then).
    fn stripe(&self) -> u8;
    /// The task's start sequence, unique in its session.
    fn sequence(&self) -> u64;
}

type Stripe<T> = CachePadded<Mutex<HashMap<u64, Arc<T>, RandomState>>>;

pub(crate) struct PendingIndex<T> {
    stripes: Box<[Stripe<T>]>,
}

impl<T: Indexed> PendingIndex<T> {
    pub(crate) fn new() -> PendingIndex<T> {
        PendingIndex {
            stripes: (0..stripe_count())
                .map(|_| CachePadded::new(Mutex::new(HashMap::default())))
                .collect(),
        }
    }

    /// Indexes a pending task in its stripe.
    #[inline]
    pub(crate) fn insert(&self, entry: &Arc<T>) {
        self.stripes[usize::from(entry.stripe())]
            .lock()
            .insert(entry.sequence(), entry.clone());
    }

    /// Drops a task that is no longer pending; nothing happens if it was not indexed.
    pub(crate) fn remove(&self, entry: &T) {
        let removed = self.stripes[usize::from(entry.stripe())]
            .lock()
            .remove(&entry.sequence());
        // Dropped with the stripe unlocked.
        drop(removed);
    }

    /// Every indexed task, in start order. A task that stopped being pending a moment ago may be among them.
    pub(crate) fn entries(&self) -> Vec<Arc<T>> {
        let mut entries = Vec::new();
        for stripe in &*self.stripes {
            entries.extend(stripe.lock().values().cloned());
        }
        entries.sort_unstable_by_key(|entry| entry.sequence());
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
