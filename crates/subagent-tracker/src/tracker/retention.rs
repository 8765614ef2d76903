//! The bound on finished tasks kept for queries.
//!
//! The window's lock is a leaf (level 5 in the crate's lock hierarchy, see the crate root).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use crate::sync::{AtomicU8, Mutex};

/// The default number of finished tasks a session keeps.
pub const DEFAULT_MAX_FINISHED_TASKS: usize = 10_000;

/// What the window holds: a run that knows its own place in it.
pub(crate) trait Retained: Clone {
    /// Where this run stands in the window: one of [`state`]'s values, read and written only under the
    /// window's lock.
    fn retention(&self) -> &AtomicU8;
    /// When the run ended. Called with no lock of the window held: it may take the run's own lock.
    fn ended_at(&self) -> Option<SystemTime>;
    /// True when both are the same run in the same form.
    fn is(&self, other: &Self) -> bool;
}

/// A run's place in the retention window, kept on the run ([`Retained::retention`]).
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
pub(crate) struct FinishedTasks<R> {
    capacity: usize,
    queue: Mutex<Window<R>>,
}

struct Window<R> {
    order: VecDeque<R>,
    retained: usize,
    stale: usize,
}

impl<R: Retained> FinishedTasks<R> {
    pub(crate) fn new(capacity: usize) -> FinishedTasks<R> {
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
    /// replaced is not recorded: it comes back among the stale. (Taken by value: the window keeps the caller's
    /// reference rather than a copy of it, which saves a count up and one down on every end.)
    #[inline(always)]
    pub(crate) fn record(&self, run: R) -> Released<R> {
        let mut released = Released::default();
        let mut window = self.queue.lock();
        if run.retention().load(Ordering::Acquire) != state::PENDING {
            drop(window);
            released.stale.push(run);
            return released;
        }
        run.retention().store(state::RETAINED, Ordering::Release);
        window.order.push_back(run);
        window.retained += 1;
        if window.retained > self.capacity {
            while let Some(oldest) = window.order.pop_front() {
                if release(&oldest) == state::RETAINED {
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

    /// Forgets the retained runs that ended at or before `cutoff`, oldest first, and returns them with the stale
    /// records dropped on the way, for the caller to drop once no lock is held. Runs are in the order they
    /// finished, so the scan stops at the first that ended later. Each run's end is read with the window
    /// unlocked (the window's lock is a leaf), and a run is taken out only if it is still at the front.
    pub(crate) fn forget_ended_before(&self, cutoff: SystemTime) -> Released<R> {
        let mut released = Released::default();
        loop {
            let front = {
                let mut window = self.queue.lock();
                loop {
                    match window.order.front() {
                        None => return released,
                        Some(front)
                            if front.retention().load(Ordering::Acquire) != state::RETAINED =>
                        {
                            if let Some(stale) = window.order.pop_front() {
                                window.stale = window.stale.saturating_sub(1);
                                released.stale.push(stale);
                            }
                        }
                        Some(front) => break front.clone(),
                    }
                }
            };
            if front.ended_at().is_none_or(|ended_at| ended_at > cutoff) {
                return released;
            }
            let mut window = self.queue.lock();
            if !window.order.front().is_some_and(|still| still.is(&front)) {
                // Evicted or replaced meanwhile: look again.
                continue;
            }
            if release(&front) == state::RETAINED {
                window.retained -= 1;
                if let Some(forgotten) = window.order.pop_front() {
                    released.forgotten.push(forgotten);
                }
            }
        }
    }

    /// How many finished runs count against the bound now.
    pub(crate) fn retained(&self) -> usize {
        self.queue.lock().retained
    }

    /// A finished run is being replaced by a new run of its id: it stops counting against the bound.
    pub(crate) fn forget(&self, run: &R) {
        let mut window = self.queue.lock();
        if release(run) == state::RETAINED {
            window.retained -= 1;
            window.stale += 1;
        }
    }
}

/// Marks `run` released and returns where it stood. Under the window's lock, which every change of a run's
/// place takes (a run belongs to one session's window), so a load and a store do what a swap would, without
/// its locked instruction.
fn release<R: Retained>(run: &R) -> u8 {
    let was = run.retention().load(Ordering::Acquire);
    run.retention().store(state::RELEASED, Ordering::Release);
    was
}

/// What [`FinishedTasks::record`] or [`FinishedTasks::forget_ended_before`] let go of, for the caller to drop
/// once no lock is held.
pub(crate) struct Released<R> {
    /// The run evicted from the window.
    pub(crate) evicted: Option<R>,
    /// Records of runs replaced by a new run of their id, dropped from the window.
    pub(crate) stale: Vec<R>,
    /// Runs forgotten for their age.
    pub(crate) forgotten: Vec<R>,
}

impl<R> Default for Released<R> {
    fn default() -> Self {
        Released {
            evicted: None,
            stale: Vec::new(),
            forgotten: Vec::new(),
        }
    }
}
