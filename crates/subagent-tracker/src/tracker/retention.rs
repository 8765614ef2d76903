//! The bound on finished tasks kept for queries.
//!
//! The window holds each retained finished run's key (its id's hash and its start sequence) and when it ended,
//! not the run: the id map holds the run, so that a finished run has one owner, and the oldest is found in the
//! map by its key when it is evicted or forgotten for its age. The keys are a list in the order the runs finished, kept in an arena so that a run
//! replaced by a new run of its id (or forgotten for its age) leaves the list at once, wherever it stands,
//! without a search: the run keeps the number of its key's node.
//!
//! A run enters the window under the lock of its id's shard in the map, while the map holds it, and leaves it
//! under that lock when a new run of its id replaces it: so a run the map no longer holds is never counted.
//! The window's lock is a leaf, taken under a shard's (level 6 in the crate's lock hierarchy, see the crate
//! root): an eviction gives the evicted key back, for the caller to take the run out of the map once the
//! window's lock and the shard's are released. (Eviction and forgetting for age take a key out of the window
//! without the shard's lock; a restart of that run then finds its node free, or another run's, and counts
//! nothing twice.)

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use crate::sync::{AtomicU32, Mutex};

/// The default number of finished tasks a session keeps.
pub const DEFAULT_MAX_FINISHED_TASKS: usize = 10_000;

/// The node number of a run whose key is not in the window.
pub(crate) const NOT_IN_WINDOW: u32 = u32::MAX;

/// What the window holds of a run: how to find it in the id map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunKey {
    /// The hash of the run's task id in the id map.
    pub(crate) hash: u64,
    /// The run's start sequence, unique in its session.
    pub(crate) sequence: u64,
}

/// A run as the window sees it: its key, and the number of its key's node, read and written only under the
/// window's lock (so it moves by plain loads and stores).
pub(crate) trait Retained {
    fn window_node(&self) -> &AtomicU32;
    fn sequence(&self) -> u64;
    /// The addresses of the run's allocation and of its id's, which its eviction reads to free them: a prefetch
    /// takes them ahead (`tracker::prefetch`).
    fn allocations(&self) -> [usize; 2];
}

/// Finished runs' keys in the order they finished, so that the oldest is evicted first.
pub(crate) struct FinishedTasks {
    capacity: usize,
    window: Mutex<Window>,
}

/// A doubly linked list of keys, oldest first, in an arena of nodes.
struct Window {
    nodes: Vec<Node>,
    free: Vec<u32>,
    oldest: u32,
    newest: u32,
    retained: usize,
}

/// 40 bytes a retained run.
struct Node {
    /// [`FREE`] for a free node's.
    key: RunKey,
    /// When the run ended; `None` for a run with no end recorded, which no age reaches.
    ended: Option<SystemTime>,
    older: u32,
    newer: u32,
    /// The addresses of the run's allocation and its id's, which its eviction frees.
    allocations: [usize; 2],
}

/// A run that fell out of the window, for the caller to take out of the id map, and the run that is to fall out
/// next, for the caller to fetch what its eviction will read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Eviction {
    pub(crate) key: RunKey,
    pub(crate) next: Option<Upcoming>,
}

/// The oldest run the window holds, as its eviction will find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Upcoming {
    pub(crate) key: RunKey,
    /// The addresses of the run's allocation and its id's (see `Retained::allocations`).
    pub(crate) allocations: [usize; 2],
}

/// The key of a free node: no run's, since start sequences never reach it.
const FREE: RunKey = RunKey {
    hash: 0,
    sequence: u64::MAX,
};

impl Window {
    fn unlink(&mut self, node: u32) -> RunKey {
        let Node {
            key, older, newer, ..
        } = std::mem::replace(
            &mut self.nodes[node as usize],
            Node {
                key: FREE,
                ended: None,
                older: NOT_IN_WINDOW,
                newer: NOT_IN_WINDOW,
                allocations: [0; 2],
            },
        );
        match older {
            NOT_IN_WINDOW => self.oldest = newer,
            older => self.nodes[older as usize].newer = newer,
        }
        match newer {
            NOT_IN_WINDOW => self.newest = older,
            newer => self.nodes[newer as usize].older = older,
        }
        self.free.push(node);
        self.retained -= 1;
        key
    }

    fn push(&mut self, key: RunKey, ended: Option<SystemTime>, allocations: [usize; 2]) -> u32 {
        let linked = Node {
            key,
            ended,
            allocations,
            older: self.newest,
            newer: NOT_IN_WINDOW,
        };
        let node = match self.free.pop() {
            Some(node) => {
                self.nodes[node as usize] = linked;
                node
            }
            None => {
                self.nodes.push(linked);
                u32::try_from(self.nodes.len() - 1)
                    .ok()
                    .filter(|&node| node != NOT_IN_WINDOW)
                    .expect("fewer retained runs than node numbers")
            }
        };
        match self.newest {
            NOT_IN_WINDOW => self.oldest = node,
            newest => self.nodes[newest as usize].newer = node,
        }
        self.newest = node;
        self.retained += 1;
        node
    }

    /// The node of `run`'s key, if the window holds it.
    fn node_of(&self, run: &impl Retained) -> Option<u32> {
        let node = run.window_node().load(Ordering::Relaxed);
        // A node the run was evicted from is free, or holds another run's key since: the sequence tells.
        (self.nodes.get(node as usize)?.key.sequence == run.sequence()).then_some(node)
    }
}

impl FinishedTasks {
    pub(crate) fn new(capacity: usize) -> FinishedTasks {
        FinishedTasks {
            capacity,
            window: Mutex::new(Window {
                nodes: Vec::new(),
                free: Vec::new(),
                oldest: NOT_IN_WINDOW,
                newest: NOT_IN_WINDOW,
                retained: 0,
            }),
        }
    }

    /// Counts a finished run, which `ended` (`None`: no age reaches it), against the bound, and returns the key of the run that falls out of
    /// the window, if one does (the run's own when nothing is retained), for the caller to take out of the id
    /// map. Called under the lock of the run's shard, in the critical section in which the map holds the run.
    #[inline(always)]
    pub(crate) fn record(
        &self,
        run: &impl Retained,
        key: RunKey,
        ended: Option<SystemTime>,
    ) -> Option<Eviction> {
        let mut window = self.window.lock();
        let node = window.push(key, ended, run.allocations());
        run.window_node().store(node, Ordering::Relaxed);
        if window.retained <= self.capacity {
            return None;
        }
        let oldest = window.oldest;
        let key = window.unlink(oldest);
        let next = window
            .nodes
            .get(window.oldest as usize)
            .map(|node| Upcoming {
                key: node.key,
                allocations: node.allocations,
            });
        Some(Eviction { key, next })
    }

    /// A finished run is being replaced by a new run of its id, or forgotten: it stops counting against the
    /// bound. Nothing happens if it is not counted (not yet recorded, or evicted). Called under the lock of the
    /// run's shard.
    pub(crate) fn forget(&self, run: &impl Retained) {
        let mut window = self.window.lock();
        if let Some(node) = window.node_of(run) {
            window.unlink(node);
        }
    }

    /// Stops counting the runs that ended at or before `cutoff`, oldest first, and returns their keys, for the
    /// caller to take them out of the id map. Runs are in the order they were recorded, which may differ from
    /// their end times by a little, so the scan stops at the first that ended later.
    pub(crate) fn forget_ended_before(&self, cutoff: SystemTime) -> Vec<RunKey> {
        let mut window = self.window.lock();
        let mut forgotten = Vec::new();
        while let Some(node) = window.nodes.get(window.oldest as usize) {
            if node.ended.is_none_or(|ended| ended > cutoff) {
                break;
            }
            let oldest = window.oldest;
            forgotten.push(window.unlink(oldest));
        }
        forgotten
    }

    /// How many finished runs count against the bound now.
    pub(crate) fn retained(&self) -> usize {
        self.window.lock().retained
    }
}

#[cfg(all(test, not(subagent_tracker_loom)))]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    struct Run {
        sequence: u64,
        node: AtomicU32,
    }

    impl Retained for Run {
        fn window_node(&self) -> &AtomicU32 {
            &self.node
        }

        fn sequence(&self) -> u64 {
            self.sequence
        }

        fn allocations(&self) -> [usize; 2] {
            [std::ptr::from_ref(self).addr(), 0]
        }
    }

    /// The eviction of `evicted`, with `next` the oldest left.
    fn eviction(evicted: &(Run, RunKey), next: Option<&(Run, RunKey)>) -> Option<Eviction> {
        Some(Eviction {
            key: evicted.1,
            next: next.map(|(run, key)| Upcoming {
                key: *key,
                allocations: run.allocations(),
            }),
        })
    }

    fn run(sequence: u64) -> (Run, RunKey) {
        let key = RunKey {
            hash: sequence * 7,
            sequence,
        };
        (
            Run {
                sequence,
                node: AtomicU32::new(NOT_IN_WINDOW),
            },
            key,
        )
    }

    /// The run ended `seconds` after the epoch.
    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_secs(seconds)
    }

    /// The oldest goes first; a run forgotten wherever it stands leaves at once and stops counting; a run
    /// evicted and then forgotten (a restart that found it before the map let it go) is not counted twice, even
    /// once its node holds another run's key.
    #[test]
    fn the_oldest_goes_first_and_a_forgotten_run_stops_counting_once() {
        let window = FinishedTasks::new(2);
        let runs: Vec<_> = (0..4).map(run).collect();
        assert_eq!(window.record(&runs[0].0, runs[0].1, Some(at(10))), None);
        assert_eq!(window.record(&runs[1].0, runs[1].1, Some(at(11))), None);
        // The eviction names the run to go next, for its reads to be fetched ahead.
        assert_eq!(
            window.record(&runs[2].0, runs[2].1, Some(at(12))),
            eviction(&runs[0], Some(&runs[1]))
        );
        window.forget(&runs[0].0);
        assert_eq!(window.retained(), 2);
        window.forget(&runs[2].0);
        window.forget(&runs[2].0);
        assert_eq!(window.retained(), 1);
        assert_eq!(window.record(&runs[3].0, runs[3].1, Some(at(13))), None);
        // Run 3 reuses a freed node; run 0's and run 2's numbers may name it now.
        window.forget(&runs[0].0);
        window.forget(&runs[2].0);
        assert_eq!(window.retained(), 2);
        assert_eq!(window.forget_ended_before(at(12)), [runs[1].1]);
        assert_eq!(window.retained(), 1);
    }

    /// Forgetting by age takes the runs that ended at or before the cutoff, oldest first, and stops at the
    /// first that ended later, in the order they were recorded.
    #[test]
    fn forgetting_by_age_stops_at_the_first_run_that_ended_later() {
        let window = FinishedTasks::new(8);
        let runs: Vec<_> = (0..4).map(run).collect();
        for ((run, key), ended) in runs.iter().zip([at(1), at(3), at(2), at(4)]) {
            assert_eq!(window.record(run, *key, Some(ended)), None);
        }
        assert!(window.forget_ended_before(at(0)).is_empty());
        assert_eq!(window.forget_ended_before(at(2)), [runs[0].1]);
        assert_eq!(window.forget_ended_before(at(3)), [runs[1].1, runs[2].1]);
        assert_eq!(window.retained(), 1);
        assert!(window
            .forget_ended_before(UNIX_EPOCH - std::time::Duration::from_secs(1))
            .is_empty());
        // A run with no end recorded is reached by no age, and the scan stops there.
        let (unended, unended_key) = run(9);
        assert_eq!(window.record(&unended, unended_key, None), None);
        assert_eq!(window.forget_ended_before(at(100)), [runs[3].1]);
        assert!(window.forget_ended_before(at(100)).is_empty());
        assert_eq!(window.retained(), 1);
    }

    /// A window that keeps nothing gives a run's own key back at once.
    #[test]
    fn a_window_that_keeps_nothing_evicts_each_run_at_once() {
        let window = FinishedTasks::new(0);
        let only = run(1);
        assert_eq!(
            window.record(&only.0, only.1, Some(at(1))),
            eviction(&only, None)
        );
        assert_eq!(window.retained(), 0);
        assert!(window.forget_ended_before(at(2)).is_empty());
    }
}
