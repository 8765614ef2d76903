//! Rust microbenchmarks of the core tracker (divan): `cargo bench -p subagent-tracker --bench tracker`.
//!
//! `baseline_mutex_hashmap_lifecycle` is the hand-written alternative measured in the same run: one
//! `Mutex<HashMap>` holding every task, with a retention queue.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_utils::CachePadded;
use dashmap::DashMap;

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

/// Ids that never collide across benchmark threads: a per-thread prefix and a per-thread counter, so that
/// making ids shares no memory between the threads (a shared counter would be measured along with the tracker).
fn next_id() -> String {
    static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static NEXT: Cell<(usize, usize)> = Cell::new((NEXT_THREAD.fetch_add(1, Ordering::Relaxed), 0));
    }
    NEXT.with(|next| {
        let (thread, count) = next.get();
        next.set((thread, count + 1));
        format!("task-{thread}-{count}")
    })
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

/// start + complete as in `lifecycle`, each thread in a session of its own: how the tracker scales when
/// threads share nothing but the process.
#[divan::bench(threads = [1, 2], sample_size = 1000)]
fn lifecycle_session_per_thread(bencher: Bencher) {
    thread_local! {
        static TRACKER: InMemorySubagentTaskTracker = tracker(10_000);
    }
    bencher
        .counter(divan::counter::ItemsCount::new(1usize))
        .bench(|| {
            TRACKER.with(|tracker| {
                let handle = tracker.start(TaskStart::new().task_id(next_id())).unwrap();
                handle.complete(None)
            })
        });
}

/// What every design that keeps the contract must share between two threads of one session, and nothing
/// else: an id map for lookups and duplicate checks (sharded, as ours), a start sequence for start order, and
/// one queue of finished runs for "the oldest finished is evicted first". Its `t=2` / `t=1` ratio bounds
/// what any such design can reach on the machine it runs on.
#[divan::bench(threads = [1, 2], sample_size = 1000)]
fn floor_shared_by_contract_lifecycle(bencher: Bencher) {
    struct Run {
        id: Arc<str>,
    }
    struct Floor {
        ids: DashMap<Arc<str>, Arc<Run>, foldhash::fast::RandomState>,
        sequence: CachePadded<AtomicU64>,
        finished: CachePadded<Mutex<VecDeque<Arc<Run>>>>,
    }
    static FLOOR: OnceLock<Floor> = OnceLock::new();
    let floor = FLOOR.get_or_init(|| Floor {
        ids: DashMap::with_hasher(foldhash::fast::RandomState::default()),
        sequence: CachePadded::new(AtomicU64::new(0)),
        finished: CachePadded::new(Mutex::new(VecDeque::new())),
    });
    bencher
        .counter(divan::counter::ItemsCount::new(1usize))
        .bench(|| {
            let id: Arc<str> = Arc::from(next_id());
            black_box(floor.sequence.fetch_add(1, Ordering::Relaxed));
            let run = Arc::new(Run { id: id.clone() });
            floor.ids.insert(id, run.clone());
            let evicted = {
                let mut finished = floor.finished.lock().unwrap();
                finished.push_back(run);
                if finished.len() > 10_000 {
                    finished.pop_front()
                } else {
                    None
                }
            };
            if let Some(evicted) = evicted {
                floor.ids.remove(&evicted.id);
            }
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

/// One uncontended atomic read-modify-write (a `lock`-prefixed add to memory, as an `Arc`'s clone compiles to; a
/// lock's acquire is a `lock`-prefixed compare-exchange, of like cost), beside the same add to memory without
/// the prefix. callgrind counts each as one instruction, so this is the figure that turns
/// `benches/lifecycle_profile.py`'s count of atomics per lifecycle into time.
#[divan::bench(args = [false, true], sample_size = 10_000)]
fn read_modify_write(bencher: Bencher, atomic: bool) {
    let counter = AtomicU64::new(0);
    let mut plain = 0u64;
    if atomic {
        bencher.bench_local(|| {
            black_box(&counter).fetch_add(1, Ordering::Relaxed);
        });
    } else {
        bencher.bench_local(|| {
            *black_box(&mut plain) += 1;
        });
    }
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
