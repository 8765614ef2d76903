//! A tight start + complete loop for profilers: `cargo run --release --example lifecycle_loop -- [threads]`.

use std::time::Instant;

use subagent_tracker::{InMemorySubagentTaskTracker, TaskStart};

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|value| value.parse().ok())
        .unwrap_or(1);
    let per_thread = 2_000_000;
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let began = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let tracker = &tracker;
            scope.spawn(move || {
                for index in 0..per_thread {
                    let handle = tracker
                        .start(TaskStart::new().task_id(format!("{thread}-{index}")))
                        .unwrap();
                    handle.complete(None);
                }
            });
        }
    });
    let elapsed = began.elapsed();
    let total = threads * per_thread;
    println!(
        "{threads} thread(s): {total} lifecycles in {elapsed:.2?}: {:.2} M/s, {:.0} ns each per thread",
        total as f64 / elapsed.as_secs_f64() / 1e6,
        elapsed.as_nanos() as f64 / per_thread as f64
    );
}
