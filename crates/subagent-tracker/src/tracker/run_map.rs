//! The session's id map: every retained run by its task id, in shards, each shard also indexing its pending runs.
//!
//! A shard is a hash table of runs, hashed and compared by their task ids (the map keeps no copy of an id
//! beside its run), and the slots of its pending runs, so that listing them costs what is pending, not what is
//! retained. A run enters its slot under the lock that makes it visible by id, and leaves it under the lock of
//! whatever moves it out of pending: a cancel, an end, or the end's collapse into its record, which holds the
//! lock already. A start and an end each take the one lock, where an index of its own would have had them
//! take two.
//!
//! A slot holds its run's hash and start sequence, by which a listing finds the run in the table; the run's
//! entry holds the slot's number, read and written only under the shard's lock, so it moves by plain loads
//! and stores. A listing reads the free slots too: as many as the shard ever held pending runs at once.
//!
//! Each shard's lock is level 5 in the crate's lock hierarchy (see the crate root): of the core's locks, only
//! the retention window's, a leaf, is taken under it (the crate root says what else runs under it). No run is
//! dropped under it: what the map lets go of is returned to the caller.

use std::hash::BuildHasher;
// The standard atomics, not `crate::sync`'s: the prefetch layout synchronises nothing (a stale value wastes a
// prefetch), so the model checks have nothing to explore in it.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;
// Seeded per process, so ids chosen by users cannot be crafted to collide; several times faster than SipHash
// on the short keys used here (measured in BENCHMARKS.md).
#[cfg(not(subagent_tracker_loom))]
use foldhash::fast::RandomState as IdHasher;
// The model checks replay each run, which must reach the same shards every time.
#[cfg(subagent_tracker_loom)]
use foldhash::fast::FixedState as IdHasher;
use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use crate::sync::RwLock;
use crate::tracker::entry::TaskEntry;
use crate::tracker::prefetch::prefetch;
use crate::tracker::retention::RunKey;
use crate::tracker::run::Run;

/// The slot number of a run that is not among the pending.
pub(crate) const NOT_INDEXED: u32 = u32::MAX;

pub(crate) struct RunMap<V> {
    hasher: IdHasher,
    /// How far a hash is shifted to give its shard's number.
    shift: u32,
    shards: Box<[CachePadded<RwLock<Shard<V>>>]>,
    /// Where each shard's table lies, read with no lock, for prefetches only: apart from the shards' locks,
    /// which every call writes, since these change only when a table grows.
    layouts: Box<[TableLayout]>,
    /// Whether a shard's table has grown to what the caches no longer keep close ([`PREFETCH_FROM_BUCKETS`]):
    /// every shard's runs are fetched ahead from then on, since the shards grow together; below it, a prefetch
    /// would cost more than the wait it saves.
    large: AtomicBool,
}

/// The number of buckets from which a shard's table is fetched ahead: 4,096 buckets of 16 bytes and their
/// control bytes, some 70 kB a shard, a few times a core's L1 and, over the shards, a good part of its L2.
const PREFETCH_FROM_BUCKETS: usize = 1 << 12;

/// Where a shard's table lies, as its last write saw it: its control bytes' address (0 before a first run)
/// and its number of buckets less one. A prefetch may read a stale layout; it then fetches a useless line.
#[derive(Default)]
struct TableLayout {
    control: AtomicUsize,
    mask: AtomicUsize,
}

struct Shard<V> {
    runs: HashTable<Run<V>>,
    pending: PendingSlots,
}

/// The pending runs of one shard, each by its hash and start sequence, and the slots free for the next ones.
#[derive(Default)]
struct PendingSlots {
    slots: Vec<Option<(u64, u64)>>,
    free: Vec<u32>,
}

impl<V> RunMap<V> {
    pub(crate) fn new() -> RunMap<V> {
        let count = shard_count();
        RunMap {
            hasher: IdHasher::default(),
            shift: u64::BITS - count.trailing_zeros(),
            shards: (0..count)
                .map(|_| {
                    CachePadded::new(RwLock::new(Shard {
                        runs: HashTable::new(),
                        pending: PendingSlots::default(),
                    }))
                })
                .collect(),
            layouts: (0..count).map(|_| TableLayout::default()).collect(),
            large: AtomicBool::new(false),
        }
    }

    #[inline]
    fn hash(&self, task_id: &str) -> u64 {
        self.hasher.hash_one(task_id)
    }

    /// The number of the shard of `hash`, chosen by the bits below the seven at the top that the table keeps
    /// as each run's tag, so that the tags within a shard stay as varied as the hashes.
    #[inline]
    fn shard_number(&self, hash: u64) -> usize {
        usize::try_from((hash << 7) >> self.shift).expect("fewer shards than usize::MAX")
    }

    /// The shard of `hash`.
    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard<V>> {
        &self.shards[self.shard_number(hash)]
    }

    /// Whether the map is large enough for prefetches to pay (see [`PREFETCH_FROM_BUCKETS`]).
    #[inline]
    pub(crate) fn is_large(&self) -> bool {
        self.large.load(Ordering::Relaxed)
    }

    /// Asks for the lines a lookup of `task_id` will read first, in a large map: where its probe begins in
    /// its shard's table.
    #[inline]
    pub(crate) fn prefetch_id(&self, task_id: &str) {
        if self.is_large() {
            self.prefetch(self.hash(task_id));
        }
    }

    /// Asks for the lines a lookup of `hash` will read first: the control bytes where its probe begins, and
    /// the bucket there, in which a run is most often found (hashbrown keeps bucket `i` at `i + 1` buckets
    /// before the control bytes).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let layout = &self.layouts[self.shard_number(hash)];
        let control = layout.control.load(Ordering::Relaxed);
        if control == 0 {
            return;
        }
        // hashbrown's probe begins at the hash's low bits.
        #[allow(clippy::cast_possible_truncation)]
        let position = hash as usize & layout.mask.load(Ordering::Relaxed);
        let bucket = std::mem::size_of::<Run<V>>();
        prefetch(control.wrapping_add(position));
        prefetch(control.wrapping_sub((position + 1) * bucket));
    }

    /// `read` given the run of `task_id`, under its shard's read lock.
    #[inline]
    pub(crate) fn read<R>(&self, task_id: &str, read: impl FnOnce(&Run<V>) -> R) -> Option<R> {
        let hash = self.hash(task_id);
        let shard = self.shard(hash).read();
        shard
            .runs
            .find(hash, |run| &**run.task_id() == task_id)
            .map(read)
    }

    /// `write` given the slot of `task_id` (its run, if there is one), under its shard's write lock.
    #[inline]
    pub(crate) fn write<R>(&self, task_id: &str, write: impl FnOnce(&mut Slot<'_, V>) -> R) -> R {
        let hash = self.hash(task_id);
        let mut shard = self.shard(hash).write();
        let Shard { runs, pending } = &mut *shard;
        let entry = runs.entry(
            hash,
            |run| &**run.task_id() == task_id,
            |run| self.hasher.hash_one(&**run.task_id()),
        );
        let written = write(&mut Slot {
            entry: Some(entry),
            pending,
            hash,
        });
        if self.layouts[self.shard_number(hash)].follow(runs) {
            self.large.store(true, Ordering::Relaxed);
        }
        written
    }

    /// Takes the run of `key` out of the map, unless its id names another run now; returns it, for the caller
    /// to drop once no lock is held (it may be the last reference).
    pub(crate) fn remove(&self, key: RunKey) -> Option<Run<V>> {
        let mut shard = self.shard(key.hash).write();
        match shard
            .runs
            .find_entry(key.hash, |run| run.sequence() == key.sequence)
        {
            Ok(occupied) => Some(occupied.remove().0),
            Err(_) => None,
        }
    }

    /// Takes `entry` out of the pending runs; nothing happens if it is not among them.
    pub(crate) fn unindex_pending(&self, entry: &TaskEntry<V>) {
        let mut shard = self.shard(self.hash(&entry.task_id)).write();
        shard.pending.release(entry);
    }

    /// How many runs the map holds.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.read().runs.len())
            .sum()
    }

    /// Every run, copied out so that no lock of the map is held after, in start order.
    pub(crate) fn runs(&self) -> Vec<Run<V>> {
        let mut runs = Vec::new();
        for shard in &*self.shards {
            runs.extend(shard.read().runs.iter().cloned());
        }
        runs.sort_unstable_by_key(Run::sequence);
        runs
    }

    /// Calls `visit` with every run, under each shard's read lock in turn: `visit` takes no lock of the core's.
    pub(crate) fn visit(&self, mut visit: impl FnMut(&Run<V>)) {
        for shard in &*self.shards {
            shard.read().runs.iter().for_each(&mut visit);
        }
    }

    /// The entries of the pending runs, in start order. A run that stopped being pending a moment ago may be
    /// among them.
    pub(crate) fn pending_entries(&self) -> Vec<Arc<TaskEntry<V>>> {
        let mut entries = Vec::new();
        for shard in &*self.shards {
            let shard = shard.read();
            entries.extend(
                shard
                    .pending
                    .slots
                    .iter()
                    .flatten()
                    .filter_map(|&(hash, sequence)| {
                        match shard.runs.find(hash, |run| run.sequence() == sequence) {
                            Some(Run::Live(entry)) => Some(entry.clone()),
                            _ => None,
                        }
                    }),
            );
        }
        entries.sort_unstable_by_key(|entry| entry.sequence);
        entries
    }

    /// How many pending slots the shards hold, taken and free: what a listing reads.
    #[cfg(all(test, not(subagent_tracker_loom)))]
    pub(crate) fn pending_slots(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.read().pending.slots.len())
            .sum()
    }
}

/// The place of one task id in its shard, with the shard's lock held: the id's run, if there is one, and the
/// shard's pending runs.
pub(crate) struct Slot<'a, V> {
    /// `None` only while a method moves the table's entry from vacant to occupied.
    entry: Option<Entry<'a, Run<V>>>,
    pending: &'a mut PendingSlots,
    hash: u64,
}

impl<V> Slot<'_, V> {
    /// The run the id names, if there is one.
    #[inline]
    pub(crate) fn run(&self) -> Option<&Run<V>> {
        match &self.entry {
            Some(Entry::Occupied(occupied)) => Some(occupied.get()),
            _ => None,
        }
    }

    /// Makes the id name `run`; returns the run it named before, for the caller to drop once no lock is held.
    #[inline]
    pub(crate) fn put(&mut self, run: Run<V>) -> Option<Run<V>> {
        match self.entry.take() {
            Some(Entry::Occupied(mut occupied)) => {
                let before = std::mem::replace(occupied.get_mut(), run);
                self.entry = Some(Entry::Occupied(occupied));
                Some(before)
            }
            Some(Entry::Vacant(vacant)) => {
                self.entry = Some(Entry::Occupied(vacant.insert(run)));
                None
            }
            None => unreachable!("a slot's entry is put back by every method that takes it"),
        }
    }

    /// The key under which the window knows the id's run of start sequence `sequence`.
    #[inline]
    pub(crate) fn key(&self, sequence: u64) -> RunKey {
        RunKey {
            hash: self.hash,
            sequence,
        }
    }

    /// Adds `entry`, the id's run, to the shard's pending runs.
    #[inline]
    pub(crate) fn index_pending(&mut self, entry: &TaskEntry<V>) {
        let slot = match self.pending.free.pop() {
            Some(slot) => slot,
            None => {
                self.pending.slots.push(None);
                u32::try_from(self.pending.slots.len() - 1)
                    .ok()
                    .filter(|&slot| slot != NOT_INDEXED)
                    .expect("fewer pending tasks than slot numbers")
            }
        };
        self.pending.slots[slot as usize] = Some((self.hash, entry.sequence));
        entry.pending_slot.store(slot, Ordering::Relaxed);
    }

    /// Takes `entry`, a run of the id, out of the shard's pending runs; nothing happens if it is not among them.
    #[inline]
    pub(crate) fn unindex_pending(&mut self, entry: &TaskEntry<V>) {
        self.pending.release(entry);
    }
}

impl TableLayout {
    /// Takes the layout of `runs` again if the table has grown since it was last taken; returns whether it
    /// grew to [`PREFETCH_FROM_BUCKETS`].
    #[inline]
    fn follow<V>(&self, runs: &HashTable<Run<V>>) -> bool {
        let mask = runs.num_buckets() - 1;
        if self.mask.load(Ordering::Relaxed) == mask && self.control.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // The control bytes begin where bucket 0 ends; any run's bucket gives their address.
        let Some((index, run)) = runs
            .iter_buckets()
            .next()
            .and_then(|index| Some((index, runs.get_bucket(index)?)))
        else {
            return false;
        };
        let control = std::ptr::from_ref(run).addr() + (index + 1) * std::mem::size_of::<Run<V>>();
        self.control.store(control, Ordering::Relaxed);
        self.mask.store(mask, Ordering::Relaxed);
        mask >= PREFETCH_FROM_BUCKETS - 1
    }
}

impl PendingSlots {
    /// Frees the slot of `entry`, if it holds one.
    #[inline]
    fn release<V>(&mut self, entry: &TaskEntry<V>) {
        let slot = entry.pending_slot.load(Ordering::Relaxed);
        if slot == NOT_INDEXED {
            return;
        }
        entry.pending_slot.store(NOT_INDEXED, Ordering::Relaxed);
        self.slots[slot as usize] = None;
        self.free.push(slot);
    }
}

/// Four shards a core, as dashmap has, so that threads that run at once rarely wait for one another's shard.
fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(8, |cores| (cores.get() * 4).next_power_of_two())
            .clamp(2, 1 << 10)
    })
}

#[cfg(all(test, not(subagent_tracker_loom)))]
mod tests {
    use std::sync::atomic::Ordering;

    use crate::{InMemorySubagentTaskTracker, TaskStart, TrackerConfig};

    use super::{shard_count, Run, RunMap, PREFETCH_FROM_BUCKETS};

    /// The layout each shard publishes for prefetches names its table's control bytes where hashbrown keeps
    /// them (every run's bucket gives the same address) and its number of buckets, as the table grows; the map
    /// counts as large once a table reaches the prefetch threshold; and the evictions that prefetch in a large
    /// map still take the oldest first.
    #[test]
    fn the_layout_a_prefetch_reads_follows_each_table_and_evictions_keep_their_order() {
        // Enough for every shard to reach the threshold on a machine of up to 8 cores (32 shards), and bounded
        // on a larger one, whose tables may stay below it; the layouts are checked either way.
        let retained = PREFETCH_FROM_BUCKETS * shard_count().min(32);
        let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::with_config(
            None,
            TrackerConfig::default().with_max_finished_tasks(retained),
        );
        let map = &tracker.shared().tasks;
        let runs = 2 * retained;
        for index in 0..runs {
            let handle = tracker
                .start(TaskStart::new().task_id(format!("t{index}")))
                .unwrap();
            assert!(handle.complete(None));
            if index % (runs / 16) == 0 || index == runs - 1 {
                assert_layouts_follow_the_tables(map);
            }
        }
        assert!(map.is_large() || shard_count() > 32);
        let kept: Vec<String> = (runs - retained..runs)
            .map(|index| format!("t{index}"))
            .collect();
        let ids: Vec<String> = tracker
            .tasks()
            .into_iter()
            .map(|task| task.task_id.to_string())
            .collect();
        assert_eq!(ids, kept, "the oldest are evicted first");
    }

    fn assert_layouts_follow_the_tables(map: &RunMap<String>) {
        let mut large = false;
        for (shard, layout) in map.shards.iter().zip(&map.layouts) {
            let shard = shard.read();
            if shard.runs.is_empty() {
                continue;
            }
            let control = layout.control.load(Ordering::Relaxed);
            assert_eq!(
                layout.mask.load(Ordering::Relaxed),
                shard.runs.num_buckets() - 1
            );
            for index in shard.runs.iter_buckets() {
                let bucket = std::ptr::from_ref(shard.runs.get_bucket(index).unwrap()).addr();
                assert_eq!(
                    bucket + (index + 1) * std::mem::size_of::<Run<String>>(),
                    control
                );
            }
            large |= shard.runs.num_buckets() >= PREFETCH_FROM_BUCKETS;
        }
        assert_eq!(map.is_large(), large);
    }

    /// Contract §6: listing the pending tasks costs what is running, not what is retained. However many tasks
    /// have finished, the shards hold no more pending slots than ever ran at once in each.
    #[test]
    fn the_pending_slots_grow_with_the_running_tasks_not_with_the_retained() {
        let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
        let mut running = std::collections::VecDeque::new();
        for index in 0..5_000 {
            let start = TaskStart::new().task_id(format!("t{index}"));
            running.push_back(tracker.start(start).unwrap());
            if running.len() > 3 {
                assert!(running.pop_front().unwrap().complete(None));
            }
        }
        assert_eq!(tracker.pending().len(), 3);
        assert_eq!(tracker.tasks().len(), 5_000);
        assert!(tracker.shared().tasks.pending_slots() <= 4 * shard_count());
    }

    /// Every way out of pending takes a run out of the pending runs: an end, a cancel and its cascade, the
    /// cancel of a reservation nobody claimed, a closed handle, a close; and a run that starts cancelled never
    /// enters them.
    #[test]
    fn every_way_out_of_pending_leaves_the_pending_runs() {
        let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
        let pending = || tracker.shared().tasks.pending_entries().len();
        let ended = tracker.start(TaskStart::new().task_id("ended")).unwrap();
        assert_eq!(pending(), 1);
        assert!(ended.complete(None));
        assert_eq!(pending(), 0);
        let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
        let child = tracker
            .start(TaskStart::new().task_id("child").parent_id("parent"))
            .unwrap();
        let reserved = tracker
            .reserve(TaskStart::new().task_id("reserved"), None)
            .unwrap();
        assert_eq!(pending(), 3);
        assert!(tracker.cancel("parent", None));
        assert!(tracker.cancel(&reserved, None));
        assert_eq!(pending(), 0);
        let late_child = tracker
            .start(TaskStart::new().task_id("late").parent_id("parent"))
            .unwrap();
        assert!(late_child.is_cancelled());
        assert_eq!(pending(), 0);
        drop((parent, child, late_child));
        let dropped = tracker.start(TaskStart::new().task_id("dropped")).unwrap();
        drop(dropped);
        let restarted = tracker.start(TaskStart::new().task_id("ended")).unwrap();
        assert_eq!(pending(), 1);
        tracker.close(None);
        assert_eq!(pending(), 0);
        drop(restarted);
    }

    /// A run leaves its slot free for the next one; an unindexing of a run not among the pending, or a second
    /// time, changes nothing; the listing is in start order whatever the slots.
    #[test]
    fn slots_are_reused_and_unindexing_a_run_not_pending_changes_nothing() {
        let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
        let handles: Vec<_> = (0..4)
            .map(|index| {
                tracker
                    .start(TaskStart::new().task_id(format!("t{index}")))
                    .unwrap()
            })
            .collect();
        let map = &tracker.shared().tasks;
        let entries = map.pending_entries();
        let sequences = |entries: &[std::sync::Arc<crate::tracker::entry::TaskEntry<String>>]| {
            entries
                .iter()
                .map(|entry| entry.sequence)
                .collect::<Vec<_>>()
        };
        assert_eq!(sequences(&entries), [0, 1, 2, 3]);
        let slots = map.pending_slots();
        map.unindex_pending(&entries[0]);
        map.unindex_pending(&entries[0]);
        assert_eq!(sequences(&map.pending_entries()), [1, 2, 3]);
        map.write(&entries[0].task_id, |slot| slot.index_pending(&entries[0]));
        assert_eq!(map.pending_slots(), slots, "the freed slot is reused");
        assert_eq!(sequences(&map.pending_entries()), [0, 1, 2, 3]);
        drop(handles);
        assert!(map.pending_entries().is_empty());
    }
}
