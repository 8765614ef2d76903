//! The threads that deliver what a cancel owes to user code when the thread that made the cancel serves
//! everyone: the deadline timer, a Redis worker's runtime and listener, a handle's `Drop`.
//!
//! One process-wide pool, bounded: at most [`MAX_THREADS`] threads, started when work comes and none is free,
//! and ended after [`IDLE_EXIT`] without work, so a burst of ten thousand cancels with slow callbacks costs a
//! bounded number of threads, not one each. Each delivery is split in jobs: its wake-ups (waiters, bridged
//! tokens), and each callback on its own. Wake-ups go first, and the last thread never takes callbacks, so
//! however many callbacks are slow, every other token's waiters still wake at once, and a slow callback holds up
//! no other while a thread is free; callbacks beyond the threads wait their turn, in order.
//!
//! # Fork
//!
//! A forked child has none of the pool's threads. The fork hooks of the deadline timer (`fork`) hold the
//! pool's lock across `fork()` and, in the child, forget the parent's threads: work still queued there is
//! taken by threads of the child's own. The lock is the standard library's, which keeps its waiters in the
//! kernel only (see the deadline timer).
//!
//! The pool's lock is a leaf of the crate's hierarchy: nothing else is taken under it, and no job runs under it.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// The most threads the pool runs at once. One of them only ever wakes waiters.
pub(crate) const MAX_THREADS: usize = 32;

/// How long a thread waits for work before it ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(2);

/// What the pool runs: a settled delivery's wake-ups, or one of its callbacks, each contained where it runs
/// user code. The pool knows no more of it, so that it serves whoever owes such work.
pub(crate) type Work = Box<dyn FnOnce() + Send>;

/// What the pool's threads take: wake-ups, or a callback.
struct Job {
    work: Work,
    wakes: bool,
}

#[derive(Default)]
struct Queue {
    wake_ups: VecDeque<Work>,
    callbacks: VecDeque<Work>,
    threads: usize,
    idle: usize,
    /// Threads running callbacks now: at most `MAX_THREADS - 1`, so that one is always left for wake-ups.
    running_callbacks: usize,
}

impl Queue {
    fn next_job(&mut self) -> Option<Job> {
        if let Some(work) = self.wake_ups.pop_front() {
            return Some(Job { work, wakes: true });
        }
        if self.running_callbacks + 1 < MAX_THREADS {
            if let Some(work) = self.callbacks.pop_front() {
                self.running_callbacks += 1;
                return Some(Job { work, wakes: false });
            }
        }
        None
    }

    /// Whether a job is waiting that a free thread could take now.
    fn has_work(&self) -> bool {
        !self.wake_ups.is_empty()
            || (!self.callbacks.is_empty() && self.running_callbacks + 1 < MAX_THREADS)
    }
}

struct Pool {
    queue: Mutex<Queue>,
    work: Condvar,
}

static POOL: OnceLock<Pool> = OnceLock::new();

fn pool() -> &'static Pool {
    POOL.get_or_init(|| Pool {
        queue: Mutex::new(Queue::default()),
        work: Condvar::new(),
    })
}

/// Locks the queue. No job runs under it, so poisoning cannot mean a broken queue.
fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands `wake_ups` (a settled delivery of wake-ups, if any are owed) and `callbacks` (settled deliveries, one
/// callback each) to the pool's threads. Should no thread start, the caller delivers them itself: late is better
/// than lost.
pub(crate) fn submit(wake_ups: Option<Work>, callbacks: Vec<Work>) {
    let pool = pool();
    let mut queue = lock(&pool.queue);
    queue.wake_ups.extend(wake_ups);
    queue.callbacks.extend(callbacks);
    if queue.idle > 0 {
        pool.work.notify_all();
        return;
    }
    if queue.threads >= MAX_THREADS || !queue.has_work() {
        return;
    }
    queue.threads += 1;
    drop(queue);
    let spawned = std::thread::Builder::new()
        .name("subagent-cancel-delivery".to_owned())
        .spawn(serve);
    if spawned.is_err() {
        let mut queue = lock(&pool.queue);
        queue.threads -= 1;
        let mut owed = Vec::new();
        while let Some(job) = queue.next_job() {
            if !job.wakes {
                queue.running_callbacks -= 1;
            }
            owed.push(job.work);
        }
        drop(queue);
        owed.into_iter().for_each(|work| work());
    }
}

/// A pool thread: takes jobs until none comes for [`IDLE_EXIT`].
fn serve() {
    let pool = pool();
    let mut queue = lock(&pool.queue);
    loop {
        if let Some(job) = queue.next_job() {
            // Another thread for what this one leaves waiting, if the pool may grow.
            if queue.has_work() && queue.idle == 0 && queue.threads < MAX_THREADS {
                queue.threads += 1;
                if std::thread::Builder::new()
                    .name("subagent-cancel-delivery".to_owned())
                    .spawn(serve)
                    .is_err()
                {
                    queue.threads -= 1;
                }
            }
            drop(queue);
            (job.work)();
            queue = lock(&pool.queue);
            if !job.wakes {
                queue.running_callbacks -= 1;
            }
            continue;
        }
        queue.idle += 1;
        let (woken, waited) = pool
            .work
            .wait_timeout(queue, IDLE_EXIT)
            .unwrap_or_else(PoisonError::into_inner);
        queue = woken;
        queue.idle -= 1;
        if waited.timed_out() && !queue.has_work() {
            queue.threads -= 1;
            return;
        }
    }
}

/// The pool's part of the fork hooks (`deadline_timer::fork`).
pub(crate) mod fork {
    use std::cell::RefCell;
    use std::sync::MutexGuard;

    use super::{lock, Queue, POOL};

    thread_local! {
        /// The pool's lock, held across the fork by the thread that forks.
        static HELD: RefCell<Option<MutexGuard<'static, Queue>>> = const { RefCell::new(None) };
    }

    /// Before `fork()`: holds the pool's lock, so the child never inherits it held by a thread it lacks.
    pub(crate) fn prepare() {
        if let Some(pool) = POOL.get() {
            let queue = lock(&pool.queue);
            HELD.with(|held| *held.borrow_mut() = Some(queue));
        }
    }

    /// After `fork()`, in the parent: releases the lock.
    pub(crate) fn after_in_parent() {
        HELD.with(|held| drop(held.borrow_mut().take()));
    }

    /// After `fork()`, in the child: forgets the parent's threads, and starts one for work still queued.
    pub(crate) fn after_in_child() {
        let held = HELD.with(|held| held.borrow_mut().take());
        let Some(mut queue) = held else {
            return;
        };
        queue.threads = 0;
        queue.idle = 0;
        queue.running_callbacks = 0;
        drop(queue);
        super::submit(None, Vec::new());
    }
}
