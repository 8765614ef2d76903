//! The bound on finished tasks kept for queries.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use crate::retained_run::Run;
use crate::sync::Mutex;

/// The default number of finished tasks a session keeps.
pub const DEFAULT_MAX_FINISHED_TASKS: usize = 10_000;

/// A run's place in the retention window, kept on the run (`Run::retention`).
pub(crate) mod state {
    /// Finished, not yet recorded.
    pub(crate) const PENDING: u8 = 0;
    /// Counted against the bound.
    pub(crate) const RETAINED: u8 = 1;
    /// Evicted, or replaced by a new run of its id: no longer counted.
    pub(crate) const RELEASED: u8 = 2;
}

/// Finished runs in the order they finished, so that the oldest is evicted first.
///
/// Exactly the runs still retained count against the bound: a run replaced by a new run of its id stops
/// counting at once (its record stays queued, stale, until eviction passes it or a compaction drops it), so a
/// restart never evicts another run early, and stale records never outnumber the retained ones for long.
pub(crate) struct FinishedTasks<V> {
    capacity: usize,
    queue: Mutex<Window<V>>,
}

struct Window<V> {
    order: VecDeque<Run<V>>,
    retained: usize,
    stale: usize,
}

impl<V> FinishedTasks<V> {
    pub(crate) fn new(capacity: usize) -> FinishedTasks<V> {
        FinishedTasks {
            capacity,
            queue: Mutex::new(Window {
                order: VecDeque::new(),
                retained: 0,
                stale: 0,
            }),
        }
    }

    /// Records a finished run and returns the runs it lets go of: the one that falls out of the window, if one
    /// does (the run itself when nothing is retained), first, then stale records dropped on the way. The caller
    /// drops them with no lock held: the last reference to a run may own foreign objects. A run already
    /// replaced is not recorded.
    pub(crate) fn record(&self, run: &Run<V>) -> Released<V> {
        let mut released = Released::default();
        let mut window = self.queue.lock();
        if run
            .retention()
            .compare_exchange(
                state::PENDING,
                state::RETAINED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return released;
        }
        window.order.push_back(run.clone());
        window.retained += 1;
        if window.retained > self.capacity {
            while let Some(oldest) = window.order.pop_front() {
                if oldest.retention().swap(state::RELEASED, Ordering::AcqRel) == state::RETAINED {
                    window.retained -= 1;
                    released.evicted = Some(oldest);
                    break;
                }
                window.stale -= 1;
                released.stale.push(oldest);
            }
        }
        if window.stale > window.retained.max(64) {
            let (kept, stale): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut window.order)
                .into_iter()
                .partition(|run| run.retention().load(Ordering::Acquire) == state::RETAINED);
            window.order = kept;
            released.stale.extend(stale);
            window.stale = 0;
        }
        released
    }

    /// How many finished runs count against the bound now.
    pub(crate) fn retained(&self) -> usize {
        self.queue.lock().retained
    }

    /// A finished run is being replaced by a new run of its id: it stops counting against the bound.
    pub(crate) fn forget(&self, run: &Run<V>) {
        let mut window = self.queue.lock();
        if run.retention().swap(state::RELEASED, Ordering::AcqRel) == state::RETAINED {
            window.retained -= 1;
            window.stale += 1;
        }
    }
}

/// What [`FinishedTasks::record`] let go of, for the caller to drop once no lock is held.
pub(crate) struct Released<V> {
    /// The run evicted from the window.
    pub(crate) evicted: Option<Run<V>>,
    /// Records of runs replaced by a new run of their id, dropped from the window.
    pub(crate) stale: Vec<Run<V>>,
}

impl<V> Default for Released<V> {
    fn default() -> Self {
        Released {
            evicted: None,
            stale: Vec::new(),
        }
    }
}
