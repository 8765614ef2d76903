//! What cancels owe to user code, when the thread that made them serves everyone (here the deadline timer),
//! runs on a bounded set of threads, and a slow callback never holds up another token's waiters. The
//! regression tests of a defect a hostile run found: one OS thread per delivery, 3,863 at once for a burst of
//! 10,000 cancels with callbacks. Alone in their process: thread counts are the process's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use subagent_tracker::{InMemorySubagentTaskTracker, TaskStart};

/// The pool's bound (`token::delivery_pool::MAX_THREADS`).
const MAX_DELIVERY_THREADS: usize = 32;

/// The threads of this process now.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux's /proc");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("a thread count")
}

/// Waits until `condition` holds, for at most `within`.
fn wait_until(within: Duration, condition: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// A gate that callbacks wait at until it opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    waiting: AtomicUsize,
}

impl Gate {
    fn wait(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

#[test]
fn ten_thousand_slow_callbacks_run_on_a_bounded_set_of_threads_and_never_hold_up_a_waiter() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let before = threads();
    let ran = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..10_000)
        .map(|index| {
            let start = TaskStart::new()
                .task_id(format!("slow-{index}"))
                .timeout(Duration::from_millis(20));
            let handle = tracker.start(start).unwrap();
            let (ran, peak) = (ran.clone(), peak.clone());
            handle.token().on_cancel(move || {
                peak.fetch_max(threads(), Ordering::Relaxed);
                // A callback that does a little I/O.
                std::thread::sleep(Duration::from_millis(1));
                ran.fetch_add(1, Ordering::Relaxed);
            });
            handle
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(60), || ran.load(Ordering::Relaxed)
            == 10_000),
        "{} of 10,000 callbacks ran",
        ran.load(Ordering::Relaxed)
    );
    let grown = peak.load(Ordering::Relaxed).saturating_sub(before);
    // The deadline timer's own thread, and the pool's.
    assert!(
        grown <= MAX_DELIVERY_THREADS + 1,
        "{grown} threads more than before, at the peak"
    );
    drop(handles);

    // Every callback thread but one blocked: another token's waiter still wakes at once, and a callback beyond
    // the blocked ones waits its turn instead of starting a thread.
    let gate = Arc::new(Gate::default());
    let blocked: Vec<_> = (0..2 * MAX_DELIVERY_THREADS)
        .map(|index| {
            let start = TaskStart::new()
                .task_id(format!("blocked-{index}"))
                .timeout(Duration::from_millis(5));
            let handle = tracker.start(start).unwrap();
            let gate = gate.clone();
            handle.token().on_cancel(move || gate.wait());
            handle
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || {
        gate.waiting.load(Ordering::SeqCst) == MAX_DELIVERY_THREADS - 1
    }));
    let before_waiter = threads();
    let waited = tracker
        .start(
            TaskStart::new()
                .task_id("waited")
                .timeout(Duration::from_millis(5)),
        )
        .unwrap();
    let began = Instant::now();
    assert!(waited.token().wait_blocking(Some(Duration::from_secs(5))));
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "the waiter woke {:?} after its deadline",
        began.elapsed()
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        gate.waiting.load(Ordering::SeqCst),
        MAX_DELIVERY_THREADS - 1,
        "the callbacks beyond the pool's threads wait their turn"
    );
    assert!(threads() <= before_waiter + 1);
    gate.open();
    assert!(wait_until(Duration::from_secs(10), || {
        gate.waiting.load(Ordering::SeqCst) == 2 * MAX_DELIVERY_THREADS
    }));
    drop(blocked);
}
