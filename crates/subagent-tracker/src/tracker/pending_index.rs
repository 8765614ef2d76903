//! The index of a session's pending tasks, so that listing them costs what is pending, not what is retained.
//!
//! It is split into stripes, one per thread (threads are dealt stripes in turn as they first start a task),
//! and a task stays in the stripe of the thread that started it. Two threads that start and finish tasks in
//! one session then write different cache lines, where a map sharded by key would have both threads writing
//! every shard. Listing visits every stripe and sorts by start sequence.
//!
//! A stripe is a slab: each task holds the number of its slot, so that it leaves without a hash or a probe.
//! The number is read and written only under the stripe's lock, so it moves by plain loads and stores. A
//! listing reads the free slots too: as many as the stripe ever held pending tasks at once, as a hash map's
//! listing reads its capacity.
//!
//! Each stripe's lock is a leaf (level 5 in the crate's lock hierarchy, see the crate root).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU32, Mutex};

/// What the index holds: a task that knows its stripe, its slot and its place in the start order.
pub(crate) trait Indexed {
    /// The stripe of the thread that started the task ([`current_stripe`] then).
    fn stripe(&self) -> u8;
    /// The task's slot in its stripe, [`NOT_INDEXED`] while it has none: kept for the index, by the index.
    fn slot(&self) -> &AtomicU32;
    /// The task's start sequence, unique in its session.
    fn sequence(&self) -> u64;
}

/// The slot number of a task that is not in the index.
pub(crate) const NOT_INDEXED: u32 = u32::MAX;

/// One stripe's tasks, each in the slot it holds the number of, and the slots free for the next ones.
struct Slab<T> {
    slots: Vec<Option<Arc<T>>>,
    free: Vec<u32>,
}

type Stripe<T> = CachePadded<Mutex<Slab<T>>>;

pub(crate) struct PendingIndex<T> {
    stripes: Box<[Stripe<T>]>,
}

impl<T: Indexed> PendingIndex<T> {
    pub(crate) fn new() -> PendingIndex<T> {
        PendingIndex {
            stripes: (0..stripe_count())
                .map(|_| {
                    CachePadded::new(Mutex::new(Slab {
                        slots: Vec::new(),
                        free: Vec::new(),
                    }))
                })
                .collect(),
        }
    }

    /// Indexes a pending task in its stripe.
    #[inline]
    pub(crate) fn insert(&self, entry: &Arc<T>) {
        let mut stripe = self.stripes[usize::from(entry.stripe())].lock();
        let slot = match stripe.free.pop() {
            Some(slot) => slot,
            None => {
                stripe.slots.push(None);
                u32::try_from(stripe.slots.len() - 1)
                    .expect("fewer pending tasks than slot numbers")
            }
        };
        stripe.slots[slot as usize] = Some(entry.clone());
        entry.slot().store(slot, Ordering::Relaxed);
    }

    /// Drops a task that is no longer pending; nothing happens if it was not indexed.
    pub(crate) fn remove(&self, entry: &T) {
        let mut stripe = self.stripes[usize::from(entry.stripe())].lock();
        let slot = entry.slot().load(Ordering::Relaxed);
        if slot == NOT_INDEXED {
            return;
        }
        entry.slot().store(NOT_INDEXED, Ordering::Relaxed);
        let removed = stripe.slots[slot as usize].take();
        stripe.free.push(slot);
        drop(stripe);
        // Dropped with the stripe unlocked.
        drop(removed);
    }

    /// How many slots the stripes hold, taken and free: what a listing reads.
    #[cfg(all(test, not(subagent_tracker_loom)))]
    fn slots(&self) -> usize {
        self.stripes
            .iter()
            .map(|stripe| stripe.lock().slots.len())
            .sum()
    }

    /// Every indexed task, in start order. A task that stopped being pending a moment ago may be among them.
    pub(crate) fn entries(&self) -> Vec<Arc<T>> {
        let mut entries = Vec::new();
        for stripe in &*self.stripes {
            entries.extend(stripe.lock().slots.iter().flatten().cloned());
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

#[cfg(all(test, not(subagent_tracker_loom)))]
mod tests {
    use super::*;

    struct Task {
        sequence: u64,
        slot: AtomicU32,
    }

    impl Indexed for Task {
        fn stripe(&self) -> u8 {
            0
        }

        fn slot(&self) -> &AtomicU32 {
            &self.slot
        }

        fn sequence(&self) -> u64 {
            self.sequence
        }
    }

    fn task(sequence: u64) -> Arc<Task> {
        Arc::new(Task {
            sequence,
            slot: AtomicU32::new(NOT_INDEXED),
        })
    }

    /// Contract §6: listing the pending tasks costs what is running, not what is retained. However many tasks
    /// have finished, the index holds no more slots than ever ran at once.
    #[test]
    fn the_index_grows_with_the_running_tasks_not_with_the_retained() {
        let tracker: crate::InMemorySubagentTaskTracker = crate::InMemorySubagentTaskTracker::new();
        let mut running = std::collections::VecDeque::new();
        for index in 0..5_000 {
            let start = crate::TaskStart::new().task_id(format!("t{index}"));
            running.push_back(tracker.start(start).unwrap());
            if running.len() > 3 {
                assert!(running.pop_front().unwrap().complete(None));
            }
        }
        assert_eq!(tracker.pending().len(), 3);
        assert_eq!(tracker.tasks().len(), 5_000);
        assert!(tracker.shared().pending.slots() <= 4);
    }

    fn listed(index: &PendingIndex<Task>) -> Vec<u64> {
        index.entries().iter().map(|task| task.sequence).collect()
    }

    /// A task leaves its slot free for the next one; a removal of a task not in the index, before its insert or
    /// a second time, changes nothing; the listing is in start order whatever the slots.
    #[test]
    fn slots_are_reused_and_a_removal_of_a_task_not_indexed_changes_nothing() {
        let index: PendingIndex<Task> = PendingIndex::new();
        let tasks: Vec<_> = (1..=4).map(task).collect();
        index.remove(&tasks[0]);
        for task in &tasks[..3] {
            index.insert(task);
        }
        index.remove(&tasks[0]);
        index.remove(&tasks[0]);
        assert_eq!(tasks[0].slot.load(Ordering::Relaxed), NOT_INDEXED);
        index.insert(&tasks[3]);
        assert_eq!(
            tasks[3].slot.load(Ordering::Relaxed),
            0,
            "the freed slot is reused"
        );
        assert_eq!(listed(&index), [2, 3, 4]);
        for task in &tasks[1..] {
            index.remove(task);
        }
        assert!(listed(&index).is_empty());
        let slab = index.stripes[0].lock();
        assert_eq!((slab.slots.len(), slab.free.len()), (3, 3));
    }
}
