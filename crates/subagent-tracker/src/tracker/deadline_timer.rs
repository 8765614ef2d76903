//! One timer thread for every deadline of every tracker in the process.
//!
//! Deadlines sit in an ordered map, so 100,000 tasks with deadlines cost 100,000 map entries, not as many OS
//! timers or threads; a task that finishes first removes its entry at once.
//!
//! The timer thread makes the transitions (a deadline's cancel and its cascade) and nothing else: the
//! wake-ups and callbacks they owe run on the delivery pool's threads (`token::delivery_pool`), so no user
//! code runs on the timer and a slow callback never delays another deadline.
//!
//! # Fork
//!
//! A forked child has no timer thread. [`fork`] has the three hooks a runtime calls around `fork()`: before
//! it, they take the timer's locks (so the child gets them unlocked and no due deadline is lost in flight),
//! and in the child they start a new timer thread over the same deadlines. The timer's mutexes and condvar
//! are the standard library's, which keep their waiters only in the kernel: a child starts with none, where
//! a user-space queue would still list the parent's threads and hand a wake-up or the lock to one of them.
//!
//! `firing` is level 1 in the crate's lock hierarchy (see the crate root), `scheduled` a leaf at level 6.
//! Neither is held while expiries are delivered to user code.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use crate::token::contained::run_contained;
use crate::token::delivery::Delivery;

/// What happens when a deadline passes.
pub(crate) trait Expire: Send + Sync {
    /// Makes the deadline's transitions; what they owe goes to `delivery`.
    fn expire(&self, delivery: &mut Delivery);
}

/// Identifies a scheduled deadline, to cancel it.
pub(crate) type DeadlineKey = (Instant, u64);

type Schedule = BTreeMap<DeadlineKey, Box<dyn Expire>>;

struct DeadlineTimer {
    scheduled: Mutex<Schedule>,
    earliest_changed: Condvar,
    /// Held while a batch of due deadlines is taken out and fired, so a fork never happens in between.
    firing: Mutex<()>,
}

/// Locks a mutex of the timer. Nothing panics while holding one (expiries run contained), so poisoning
/// cannot mean a broken schedule.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

static TIMER: OnceLock<Arc<DeadlineTimer>> = OnceLock::new();
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

fn timer() -> &'static Arc<DeadlineTimer> {
    TIMER.get_or_init(|| {
        let timer = Arc::new(DeadlineTimer {
            scheduled: Mutex::new(BTreeMap::new()),
            earliest_changed: Condvar::new(),
            firing: Mutex::new(()),
        });
        timer.start_thread();
        timer
    })
}

impl DeadlineTimer {
    fn start_thread(self: &Arc<Self>) {
        let worker = self.clone();
        // Without its thread no deadline would ever fire: failing loudly is the only honest outcome.
        std::thread::Builder::new()
            .name("subagent-deadlines".to_owned())
            .spawn(move || worker.run())
            .expect("the deadline timer thread could not be started");
    }

    fn run(&self) {
        loop {
            self.wait_until_due();
            let _firing = lock(&self.firing);
            let due = self.take_due();
            let mut delivery = Delivery::default();
            for expiry in due {
                run_contained(|| expiry.expire(&mut delivery));
            }
            delivery.deliver_in_own_thread();
        }
    }

    /// Sleeps until the earliest deadline has passed.
    fn wait_until_due(&self) {
        let mut scheduled = lock(&self.scheduled);
        loop {
            let now = Instant::now();
            scheduled = match scheduled.first_key_value().map(|(key, _)| key.0) {
                None => self
                    .earliest_changed
                    .wait(scheduled)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(earliest) if earliest > now => {
                    self.earliest_changed
                        .wait_timeout(scheduled, earliest - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                Some(_) => return,
            };
        }
    }

    /// Takes every deadline that has passed.
    fn take_due(&self) -> Vec<Box<dyn Expire>> {
        let now = Instant::now();
        let mut scheduled = lock(&self.scheduled);
        let mut due = Vec::new();
        while let Some(entry) = scheduled.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }
}

/// Runs `expiry` at `deadline` from the timer thread, unless unscheduled first.
pub(crate) fn schedule(deadline: Instant, expiry: Box<dyn Expire>) -> DeadlineKey {
    let timer = timer();
    let key = (deadline, NEXT_KEY.fetch_add(1, Ordering::Relaxed));
    let mut scheduled = lock(&timer.scheduled);
    let becomes_earliest = scheduled
        .first_key_value()
        .is_none_or(|(earliest, _)| key < *earliest);
    scheduled.insert(key, expiry);
    drop(scheduled);
    if becomes_earliest {
        timer.earliest_changed.notify_one();
    }
    key
}

/// Removes a scheduled deadline; true if it had not fired yet.
pub(crate) fn unschedule(key: DeadlineKey) -> bool {
    let Some(timer) = TIMER.get() else {
        return false;
    };
    let removed = lock(&timer.scheduled).remove(&key);
    // Dropped here, outside the timer's lock.
    removed.is_some()
}

/// How many deadlines are scheduled in this process and have neither fired nor been removed. A diagnostic:
/// it returns to its earlier value once the tasks with deadlines have finished.
#[must_use]
pub fn pending_deadlines() -> usize {
    TIMER.get().map_or(0, |timer| lock(&timer.scheduled).len())
}

/// Hooks to call around `fork()` (Python's `os.register_at_fork` does), so that deadlines keep firing in a
/// forked child. Without them a child has no timer thread, and may inherit the timer's locks held.
pub mod fork {
    use std::cell::RefCell;
    use std::sync::MutexGuard;

    use super::{lock, Schedule, TIMER};
    use crate::token::delivery_pool;

    type HeldLocks = (MutexGuard<'static, ()>, MutexGuard<'static, Schedule>);

    thread_local! {
        /// The timer's locks, held across the fork by the thread that forks (the hooks run on it).
        static HELD: RefCell<Option<HeldLocks>> = const { RefCell::new(None) };
    }

    /// Before `fork()`: waits for a batch being fired to finish and holds the timer's locks across the fork.
    pub fn prepare() {
        if let Some(timer) = TIMER.get() {
            let firing = lock(&timer.firing);
            let scheduled = lock(&timer.scheduled);
            HELD.with(|held| *held.borrow_mut() = Some((firing, scheduled)));
        }
        delivery_pool::fork::prepare();
    }

    /// After `fork()`, in the parent: releases the locks.
    pub fn after_in_parent() {
        delivery_pool::fork::after_in_parent();
        HELD.with(|held| drop(held.borrow_mut().take()));
    }

    /// After `fork()`, in the child: releases the locks (the child's copies) and starts a timer thread, since
    /// the parent's did not come along; the delivery pool forgets the parent's threads.
    pub fn after_in_child() {
        delivery_pool::fork::after_in_child();
        HELD.with(|held| drop(held.borrow_mut().take()));
        if let Some(timer) = TIMER.get() {
            timer.start_thread();
        }
    }
}
