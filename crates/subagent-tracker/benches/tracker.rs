//! Rust microbenchmarks of the core tracker (divan): `cargo bench -p subagent-tracker --bench tracker`.
//!
//! `baseline_mutex_hashmap_lifecycle` is the hand-written alternative measured in the same run: one
//! `Mutex<HashMap>` holding every task, with a retention queue.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use divan::{black_box, Bencher};
use subagent_tracker::{InMemorySubagentTaskTracker, SubagentStatus, TaskStart, TrackerConfig};

fn main() {
    divan::main();
}

fn tracker(max_finished_tasks: usize) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        None,
        TrackerConfig::default().with_max_finished_tasks(max_finished_tasks),
    )
}

/// Ids that never collide across benchmark threads: a per-call counter.
fn next_id() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let next = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("task-{next}")
}

/// start + complete of a task with an explicit id, on 1 and 2 threads sharing one session.
#[divan::bench(threads = [1, 2], sample_size = 1000)]
fn lifecycle(bencher: Bencher) {
    static TRACKER: OnceLock<InMemorySubagentTaskTracker> = OnceLock::new();
    let tracker = TRACKER.get_or_init(|| tracker(10_000));
    bencher
        .counter(divan::counter::ItemsCount::new(1usize))
        .bench(|| {
            let handle = tracker.start(TaskStart::new().task_id(next_id())).unwrap();
            handle.complete(None)
        });
}

/// The hand-written alternative: one `Mutex<HashMap>` for every task, plus a retention queue.
#[divan::bench(threads = [1, 2], sample_size = 1000)]
fn baseline_mutex_hashmap_lifecycle(bencher: Bencher) {
    struct NaiveTracker {
        tasks: HashMap<String, SubagentStatus>,
        finished: VecDeque<String>,
    }
    static NAIVE: OnceLock<Mutex<NaiveTracker>> = OnceLock::new();
    let naive = NAIVE.get_or_init(|| {
        Mutex::new(NaiveTracker {
            tasks: HashMap::new(),
            finished: VecDeque::new(),
        })
    });
    bencher
        .counter(divan::counter::ItemsCount::new(1usize))
        .bench(|| {
            let task_id = next_id();
            naive
                .lock()
                .unwrap()
                .tasks
                .insert(task_id.clone(), SubagentStatus::Running);
            let mut guard = naive.lock().unwrap();
            let state = &mut *guard;
            if let Some(status) = state.tasks.get_mut(&task_id) {
                *status = SubagentStatus::Completed;
            }
            state.finished.push_back(task_id);
            if state.finished.len() > 10_000 {
                let evicted = state.finished.pop_front().unwrap();
                state.tasks.remove(&evicted);
            }
        });
}

#[divan::bench(args = [false, true])]
fn is_cancelled(bencher: Bencher, cancelled: bool) {
    let tracker = tracker(10);
    let handle = tracker.start(TaskStart::new().task_id("t")).unwrap();
    if cancelled {
        tracker.cancel("t", None);
    }
    let token = handle.token();
    bencher.bench(|| black_box(&token).is_cancelled());
}

#[divan::bench]
fn cancel_by_id(bencher: Bencher) {
    let tracker = tracker(100_000);
    bencher
        .with_inputs(|| tracker.start(TaskStart::new().task_id(next_id())).unwrap())
        .bench_local_values(|handle| {
            tracker.cancel(handle.task_id(), None);
            handle
        });
}

fn build_tree(
    tracker: &InMemorySubagentTaskTracker,
    wide: bool,
) -> Vec<subagent_tracker::SubagentTaskHandle> {
    let root_id = next_id();
    let mut handles = vec![tracker
        .start(TaskStart::new().task_id(root_id.clone()))
        .unwrap()];
    let mut parent = root_id;
    for _ in 0..if wide { 10_000 } else { 1_000 } {
        let id = next_id();
        let start = TaskStart::new()
            .task_id(id.clone())
            .parent_id(parent.clone());
        handles.push(tracker.start(start).unwrap());
        if !wide {
            parent = id;
        }
    }
    handles
}

/// Cancel of a root with 10,000 running children.
#[divan::bench(sample_count = 20, sample_size = 1)]
fn cascade_wide_10k(bencher: Bencher) {
    let tracker = tracker(1_000_000);
    bencher
        .with_inputs(|| build_tree(&tracker, true))
        .bench_local_values(|handles| {
            assert!(tracker.cancel(handles[0].task_id(), None));
            handles
        });
}

/// Cancel of the root of a chain 1,000 deep.
#[divan::bench(sample_count = 50, sample_size = 1)]
fn cascade_deep_1000(bencher: Bencher) {
    let tracker = tracker(1_000_000);
    bencher
        .with_inputs(|| build_tree(&tracker, false))
        .bench_local_values(|handles| {
            assert!(tracker.cancel(handles[0].task_id(), None));
            handles
        });
}

fn retained_session() -> (
    InMemorySubagentTaskTracker,
    Vec<subagent_tracker::SubagentTaskHandle>,
) {
    let tracker = tracker(100_000);
    for index in 0..100_000 {
        tracker
            .start(TaskStart::new().task_id(format!("done-{index}")))
            .unwrap()
            .complete(None);
    }
    let running = (0..100).map(|index| {
        tracker
            .start(TaskStart::new().task_id(format!("run-{index}")))
            .unwrap()
    });
    let running = running.collect();
    (tracker, running)
}

/// `pending()` with 100 running among 100,000 retained.
#[divan::bench]
fn pending_100_of_100k(bencher: Bencher) {
    let (tracker, _running) = retained_session();
    bencher.bench(|| tracker.pending());
}

/// `get()` of one task among 100,000 retained.
#[divan::bench]
fn get_one_of_100k(bencher: Bencher) {
    let (tracker, _running) = retained_session();
    bencher.bench(|| tracker.get(black_box("done-50000")));
}
