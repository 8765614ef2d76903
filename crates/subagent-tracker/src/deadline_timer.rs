//! One timer thread for every deadline of every tracker in the process.
//!
//! Deadlines sit in an ordered map, so 100,000 tasks with deadlines cost 100,000 map entries, not as many OS
//! timers or threads; a task that finishes first removes its entry at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::notifications::run_contained;

/// What happens when a deadline passes.
pub(crate) trait Expire: Send + Sync {
    fn expire(&self);
}

/// Identifies a scheduled deadline, to cancel it.
pub(crate) type DeadlineKey = (Instant, u64);

struct DeadlineTimer {
    scheduled: Mutex<BTreeMap<DeadlineKey, Box<dyn Expire>>>,
    earliest_changed: Condvar,
}

static TIMER: OnceLock<Arc<DeadlineTimer>> = OnceLock::new();
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

fn timer() -> &'static Arc<DeadlineTimer> {
    TIMER.get_or_init(|| {
        let timer = Arc::new(DeadlineTimer {
            scheduled: Mutex::new(BTreeMap::new()),
            earliest_changed: Condvar::new(),
        });
        let worker = timer.clone();
        std::thread::Builder::new()
            .name("subagent-deadlines".to_owned())
            .spawn(move || worker.run())
            .expect("the deadline timer thread could not be started");
        timer
    })
}

impl DeadlineTimer {
    fn run(&self) {
        loop {
            let due = self.wait_for_due();
            for expiry in due {
                run_contained(|| expiry.expire());
            }
        }
    }

    /// Sleeps until the earliest deadline passes, then takes every deadline that has.
    fn wait_for_due(&self) -> Vec<Box<dyn Expire>> {
        let mut scheduled = self.scheduled.lock();
        loop {
            match scheduled.first_key_value().map(|(key, _)| key.0) {
                None => self.earliest_changed.wait(&mut scheduled),
                Some(earliest) if earliest > Instant::now() => {
                    self.earliest_changed.wait_until(&mut scheduled, earliest);
                }
                Some(_) => break,
            }
        }
        let now = Instant::now();
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

/// Runs `expiry` at `deadline` on the timer thread, unless unscheduled first.
pub(crate) fn schedule(deadline: Instant, expiry: Box<dyn Expire>) -> DeadlineKey {
    let timer = timer();
    let key = (deadline, NEXT_KEY.fetch_add(1, Ordering::Relaxed));
    let mut scheduled = timer.scheduled.lock();
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
    let removed = timer.scheduled.lock().remove(&key);
    // Dropped here, outside the timer's lock.
    removed.is_some()
}

/// How many deadlines are scheduled in this process and have neither fired nor been removed. A diagnostic:
/// it returns to its earlier value once the tasks with deadlines have finished.
pub fn pending_deadlines() -> usize {
    TIMER.get().map_or(0, |timer| timer.scheduled.lock().len())
}
