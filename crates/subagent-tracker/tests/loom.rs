//! Model checks of the core's concurrent transitions: loom runs each scenario under every interleaving of
//! the core's locks and atomics (within a preemption bound), not just the ones a stress loop happens to hit.
//!
//! Run with `RUSTFLAGS="--cfg subagent_tracker_loom" cargo test -p subagent-tracker --test loom --release`
//! (`scripts/check.sh` does, in a target directory of its own).

#![cfg(subagent_tracker_loom)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use loom::thread;
use subagent_tracker::{
    CancelCause, InMemoryRegistry, InMemorySubagentTaskTracker, SubagentEventKind, SubagentStatus,
    SubagentTaskHandle, TaskStart, TrackerConfig,
};

fn model(scenario: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(scenario);
}

/// Which way each run of a model went, so that a test can require the model to reach every way: a model that
/// explores a race in one order only passes every assertion made of the other.
struct Outcomes<const N: usize>([AtomicUsize; N]);

impl<const N: usize> Outcomes<N> {
    const fn new() -> Self {
        Outcomes([const { AtomicUsize::new(0) }; N])
    }

    fn reached(&self, outcome: usize) {
        self.0[outcome].fetch_add(1, Ordering::Relaxed);
    }

    fn assert_all_reached(&self, ways: &str) {
        let counts: Vec<usize> = self
            .0
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .collect();
        assert!(
            counts.iter().all(|&count| count > 0),
            "the model never reached one of the {ways}: runs per way {counts:?}"
        );
    }
}

fn tracker(max_finished_tasks: usize) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        Some("session"),
        TrackerConfig::default().with_max_finished_tasks(max_finished_tasks),
    )
}

/// The session "session" of `registry`, with the default settings: a session that leaves its registry once it
/// is closed and every run it retains has finished.
fn listed_session(registry: &InMemoryRegistry) -> InMemorySubagentTaskTracker {
    registry
        .session(Some("session"), TrackerConfig::default())
        .unwrap()
}

/// A child started while its parent is being cancelled is reached by the cascade or starts cancelled.
#[test]
fn open_races_cancel() {
    model(|| {
        let tracker = tracker(16);
        let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
        let starter = tracker.clone();
        let child = thread::spawn(move || {
            starter
                .start(TaskStart::new().task_id("child").parent_id("parent"))
                .unwrap()
        });
        assert!(tracker.cancel("parent", None));
        let child = child.join().unwrap();
        assert!(child.is_cancelled());
        let snapshot = tracker.get("child").unwrap();
        assert_eq!(snapshot.cancel_origin.as_deref(), Some("parent"));
        drop(parent);
    });
}

/// A batch racing a cancel of its parent (contract §22): every child it opens, and the child of a child, is
/// reached by the cascade or starts cancelled.
#[test]
fn a_batch_races_a_cancel_of_its_parent() {
    model(|| {
        let tracker = tracker(16);
        let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
        let starter = tracker.clone();
        let batch = thread::spawn(move || {
            starter
                .start_batch(vec![
                    TaskStart::new().task_id("a").parent_id("parent"),
                    TaskStart::new().task_id("b").parent_id("a"),
                ])
                .unwrap()
        });
        assert!(tracker.cancel("parent", None));
        let children = batch.join().unwrap();
        assert!(children.iter().all(SubagentTaskHandle::is_cancelled));
        drop(parent);
    });
}

/// A cancel before start races the start of its id (contract §3, cancel before start): the cancel reaches the
/// task whichever comes first, either as the task's first status or as a cancel of the running task, and the
/// record is used up. The model reaches both ways: each side's write and the other's look meet in the id map's
/// shard, which orders them (`early_cancels`' docs), so this holds only while the map's accesses are steps of
/// the model.
#[test]
fn a_cancel_before_start_races_the_start() {
    static WAYS: Outcomes<2> = Outcomes::new();
    model(|| {
        let tracker = tracker(16);
        let canceller = tracker.clone();
        let cancel = thread::spawn(move || canceller.cancel_before_start("task", Some("stop")));
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        let cancelled_running = cancel.join().unwrap();
        WAYS.reached(usize::from(cancelled_running));
        assert!(handle.is_cancelled());
        assert_eq!(
            tracker.get("task").unwrap().cancel_reason.as_deref(),
            Some("stop")
        );
        drop(handle);
        // The record is used up: the id's next run starts pending.
        let next_run = tracker.start(TaskStart::new().task_id("task")).unwrap();
        assert!(!next_run.is_cancelled());
    });
    WAYS.assert_all_reached("two ways a cancel before start reaches its task");
}

/// The runner's end and a cancel race: exactly one wins, and the status says which. The model reaches both
/// winners: the cancel finds the task by id, so this holds only while the id map's shard locks are steps of the
/// model (loom's locks, through the crate's `sync`), not invisible to it.
#[test]
fn end_races_cancel() {
    static WINNERS: Outcomes<2> = Outcomes::new();
    model(|| {
        let tracker = tracker(16);
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        let canceller = tracker.clone();
        let cancel = thread::spawn(move || canceller.cancel("task", None));
        let completed = handle.complete(None);
        let cancelled = cancel.join().unwrap();
        assert!(completed ^ cancelled, "exactly one transition wins");
        let snapshot = tracker.get("task").unwrap();
        let expected = if completed {
            SubagentStatus::Completed
        } else {
            SubagentStatus::Cancelled
        };
        assert_eq!(snapshot.status, expected);
        assert!(snapshot.finished);
        assert_eq!(handle.token().is_cancelled(), cancelled);
        WINNERS.reached(usize::from(cancelled));
    });
    WINNERS.assert_all_reached("winners (the end, the cancel)");
}

/// A callback registered as the task is cancelled runs exactly once, registered before the cancel or after.
#[test]
fn on_cancel_races_cancel() {
    static REGISTERED: Outcomes<2> = Outcomes::new();
    model(|| {
        let tracker = tracker(16);
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        let canceller = tracker.clone();
        let cancel = thread::spawn(move || canceller.cancel("task", None));
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let _registration = handle.token().on_cancel(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        // A callback registered after the cancel runs in the registration.
        REGISTERED.reached(runs.load(Ordering::SeqCst));
        assert!(cancel.join().unwrap());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
    REGISTERED.assert_all_reached("orders (registered before the cancel, after)");
}

/// A task linked to a token that fires during its start is cancelled, never missed.
#[test]
fn linking_during_start_races_the_source_firing() {
    model(|| {
        let tracker = tracker(16);
        let source = tracker.start(TaskStart::new().task_id("source")).unwrap();
        let token = source.token();
        let starter = tracker.clone();
        let linked = thread::spawn(move || {
            starter
                .start(TaskStart::new().task_id("linked").linked(token))
                .unwrap()
        });
        assert!(tracker.cancel("source", Some("stop")));
        let linked = linked.join().unwrap();
        assert!(linked.is_cancelled());
        let snapshot = tracker.get("linked").unwrap();
        assert_eq!(snapshot.cancel_cause, Some(CancelCause::Linked));
        assert_eq!(source.token().callback_count(), 0);
    });
}

/// A cascade races a grandchild's parent finishing: the grandchild is adopted or reached, never missed.
#[test]
fn a_cascade_races_a_parent_finishing() {
    model(|| {
        let tracker = tracker(16);
        let _root = tracker.start(TaskStart::new().task_id("root")).unwrap();
        let middle = tracker
            .start(TaskStart::new().task_id("middle").parent_id("root"))
            .unwrap();
        let leaf = tracker
            .start(TaskStart::new().task_id("leaf").parent_id("middle"))
            .unwrap();
        let finisher = thread::spawn(move || middle.complete(None));
        assert!(tracker.cancel("root", None));
        finisher.join().unwrap();
        assert!(leaf.is_cancelled());
    });
}

/// Eviction races a restart of the evicted id: the new run is never evicted, and the bound holds.
#[test]
fn eviction_races_restart() {
    model(|| {
        let tracker = tracker(1);
        assert!(tracker
            .start(TaskStart::new().task_id("old"))
            .unwrap()
            .complete(None));
        let next = tracker.start(TaskStart::new().task_id("next")).unwrap();
        let restarter = tracker.clone();
        let restart =
            thread::spawn(move || restarter.start(TaskStart::new().task_id("old")).unwrap());
        next.complete(None);
        let restarted = restart.join().unwrap();
        let snapshot = tracker.get("old").expect("a running task is never evicted");
        assert_eq!(snapshot.status, SubagentStatus::Running);
        assert!(!restarted.is_finished());
        // Retained: the running restart, and at most one finished run.
        let finished = tracker.tasks().iter().filter(|task| task.finished).count();
        assert!(
            finished <= 1,
            "{finished} finished runs retained with a bound of 1"
        );
    });
}

/// A restart races the end of the run it replaces, which, outside any tree, collapses into its record within
/// its end: the restart is refused while the run is live, and otherwise the replaced run stops counting as
/// retained. A closed session leaves its registry once every run it retains is finished, so it stays listed
/// exactly while the restart runs: a replaced run still counted would let it leave early.
#[test]
fn restart_races_an_end() {
    static OUTCOMES: Outcomes<2> = Outcomes::new();
    model(|| {
        let registry: InMemoryRegistry = InMemoryRegistry::new();
        let session = listed_session(&registry);
        let first = session.start(TaskStart::new().task_id("a")).unwrap();
        let restarter = session.clone();
        let restart = thread::spawn(move || restarter.start(TaskStart::new().task_id("a")).ok());
        assert!(first.complete(None));
        let restarted = restart.join().unwrap();
        OUTCOMES.reached(usize::from(restarted.is_none()));
        session.close(None);
        assert_eq!(
            registry.get_session("session").is_some(),
            restarted.is_some(),
            "listed while the restart runs, and only then"
        );
    });
    OUTCOMES.assert_all_reached("restart after the end, restart refused");
}

/// Two generations finish at once while the root is cancelled: the great-grandchild is adopted past both
/// finished ancestors, or reached by the cascade, never left out of the root's reach.
#[test]
fn adoption_walks_past_ancestors_that_finish_concurrently() {
    model(|| {
        let tracker = tracker(16);
        let _root = tracker.start(TaskStart::new().task_id("root")).unwrap();
        let parent = tracker
            .start(TaskStart::new().task_id("parent").parent_id("root"))
            .unwrap();
        let child = tracker
            .start(TaskStart::new().task_id("child").parent_id("parent"))
            .unwrap();
        let leaf = tracker
            .start(TaskStart::new().task_id("leaf").parent_id("child"))
            .unwrap();
        let parent_ends = thread::spawn(move || parent.complete(None));
        assert!(child.complete(None));
        parent_ends.join().unwrap();
        assert!(tracker.cancel("root", None));
        assert!(
            leaf.is_cancelled(),
            "the root's cancel missed a running descendant"
        );
    });
}

/// A claim and a cancel of a reserved task race: the cancel always wins its transition, and the runner always
/// gets a handle whose token has fired.
#[test]
fn claim_races_cancel() {
    model(|| {
        let tracker = tracker(16);
        tracker
            .reserve(TaskStart::new().task_id("task"), None)
            .unwrap();
        let canceller = tracker.clone();
        let cancel = thread::spawn(move || canceller.cancel("task", None));
        let handle = tracker.claim("task").unwrap();
        assert!(cancel.join().unwrap());
        assert!(handle.is_cancelled());
        assert!(!handle.complete(None));
        let snapshot = tracker.get("task").unwrap();
        assert_eq!(snapshot.status, SubagentStatus::Cancelled);
        assert!(snapshot.finished);
    });
}

/// Two runners claim one reserved task: exactly one gets it, either one.
#[test]
fn claims_race() {
    static WINNERS: Outcomes<2> = Outcomes::new();
    model(|| {
        let tracker = tracker(16);
        tracker
            .reserve(TaskStart::new().task_id("task"), None)
            .unwrap();
        let rival = tracker.clone();
        let other = thread::spawn(move || rival.claim("task").ok());
        let mine = tracker.claim("task").ok();
        let other = other.join().unwrap();
        assert!(mine.is_some() ^ other.is_some());
        assert_eq!(tracker.get("task").unwrap().status, SubagentStatus::Running);
        WINNERS.reached(usize::from(other.is_some()));
        drop((mine, other));
    });
    WINNERS.assert_all_reached("winners (this thread, the rival)");
}

/// A session closed through its registry while its last task ends leaves the registry, whichever comes first.
#[test]
fn close_races_the_last_end() {
    model(|| {
        let registry: InMemoryRegistry = InMemoryRegistry::new();
        let session = listed_session(&registry);
        let handle = session.start(TaskStart::new().task_id("task")).unwrap();
        let ender = thread::spawn(move || handle.complete(None));
        session.close(None);
        ender.join().unwrap();
        assert!(registry.get_session("session").is_none());
    });
}

/// A runner's end races a wait for it that registers on the task's signal: the waiter is woken, or finds the
/// task finished. An end takes no lock while nothing waits on the signal, so this holds only while the first
/// registration is seen by every later end.
#[test]
fn an_end_races_a_wait_for_it() {
    static FIRST: Outcomes<2> = Outcomes::new();
    model(|| {
        let tracker = tracker(16);
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        let mut wait = tracker.watch("task").unwrap().wait_finished();
        let ender = thread::spawn(move || assert!(handle.complete(None)));
        let flag = Arc::new(WakeFlag::default());
        let waker = Waker::from(flag.clone());
        let registered = wait
            .poll_finished(&mut Context::from_waker(&waker))
            .is_pending();
        FIRST.reached(usize::from(registered));
        ender.join().unwrap();
        if registered {
            assert!(flag.0.load(Ordering::SeqCst), "the waiter was woken");
        }
        assert!(wait
            .poll_finished(&mut Context::from_waker(&waker))
            .is_ready());
    });
    FIRST.assert_all_reached("orders (the end first, the wait first)");
}

/// A resume and a cancel race on a paused task whose runner waits: the runner is woken whichever comes first,
/// the cancel always ends the pause, and a resume never undoes it (contract §5, pause and resume).
#[test]
fn resume_races_cancel_of_a_paused_task() {
    static FIRST: Outcomes<2> = Outcomes::new();
    model(|| {
        let tracker = tracker(16);
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        assert!(handle.pause(Some("approval")));
        let flag = Arc::new(WakeFlag::default());
        let waker = Waker::from(flag.clone());
        let mut wait = handle.resume_watch().wait_for_resume();
        assert!(wait
            .poll_resumed(&mut Context::from_waker(&waker))
            .is_pending());
        let resumer = tracker.clone();
        let resume = thread::spawn(move || resumer.resume("task", Some("yes".into())));
        assert!(tracker.cancel("task", None));
        let resumed = resume.join().unwrap();
        FIRST.reached(usize::from(resumed));
        assert!(
            flag.0.load(Ordering::SeqCst),
            "the waiting runner was woken"
        );
        assert!(wait
            .poll_resumed(&mut Context::from_waker(&waker))
            .is_ready());
        assert_eq!(handle.resumption(), subagent_tracker::Resumption::Cancelled);
        assert_eq!(
            tracker.get("task").unwrap().status,
            SubagentStatus::Cancelled
        );
    });
    FIRST.assert_all_reached("orders (the cancel first, the resume first)");
}

/// A cancel handler that hands its work on finishes it in another thread while a canceller starts to wait for
/// it: the waiter is woken, or finds the work done (contract §3, cancel and wait).
#[test]
fn a_handler_finishing_races_the_wait_for_it() {
    use subagent_tracker::{HandlerDone, OnCancel};

    struct HandsOn(Arc<loom::sync::Mutex<Option<HandlerDone>>>);
    impl OnCancel for HandsOn {
        fn on_cancel(self: Box<Self>) {}
        fn on_cancel_with(self: Box<Self>, done: HandlerDone) {
            *self.0.lock().unwrap() = Some(done);
        }
    }

    model(|| {
        let tracker = tracker(16);
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        let kept = Arc::new(loom::sync::Mutex::new(None));
        let _registration = handle.token().on_cancel(HandsOn(kept.clone()));
        let wait = tracker.cancel_and_watch("task", None).unwrap();
        let done = kept
            .lock()
            .unwrap()
            .take()
            .expect("the handler ran with the cancel");
        let finisher = thread::spawn(move || done.finish());
        let flag = Arc::new(WakeFlag::default());
        let waker = Waker::from(flag.clone());
        let mut waiting = wait.wait_for_handlers();
        let ready_at_once = waiting
            .poll_handlers(&mut Context::from_waker(&waker))
            .is_ready();
        finisher.join().unwrap();
        assert!(
            ready_at_once || flag.0.load(Ordering::SeqCst),
            "the waiter was woken"
        );
        assert!(waiting
            .poll_handlers(&mut Context::from_waker(&waker))
            .is_ready());
        handle.stop_cancelled(None);
    });
}

/// A waker that records that it was woken.
#[derive(Default)]
struct WakeFlag(AtomicBool);

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A subscriber polls for its next event as a task's end publishes it: it reads the event at once, or waits
/// and is woken by the publish, never left waiting with the event buffered. The model reaches both ways.
#[test]
fn a_subscriber_s_poll_races_a_publish() {
    static WAYS: Outcomes<2> = Outcomes::new();
    model(|| {
        let tracker = tracker(16);
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        let mut subscription = tracker.subscribe();
        let ending = thread::spawn(move || handle.complete(None));
        let woken = Arc::new(WakeFlag::default());
        let waker = Waker::from(woken.clone());
        let first = subscription.poll_next(&mut Context::from_waker(&waker));
        assert!(ending.join().unwrap());
        let event = match first {
            Poll::Ready(event) => {
                WAYS.reached(0);
                event
            }
            Poll::Pending => {
                assert!(
                    woken.0.load(Ordering::Relaxed),
                    "the publish woke the waiting subscriber"
                );
                WAYS.reached(1);
                subscription.try_next()
            }
        };
        let event = event.expect("the end's event");
        assert_eq!(
            (event.kind, event.status),
            (SubagentEventKind::Ended, SubagentStatus::Completed)
        );
    });
    WAYS.assert_all_reached("ways (read at once, woken by the publish)");
}

/// A subscription closed from another thread as an event is published: whichever comes first, the waiting
/// subscriber is woken and reads nothing after the close.
#[test]
fn a_subscription_s_close_races_a_publish() {
    model(|| {
        let tracker = tracker(16);
        let handle = tracker.start(TaskStart::new().task_id("task")).unwrap();
        let mut subscription = tracker.subscribe();
        let woken = Arc::new(WakeFlag::default());
        let waker = Waker::from(woken.clone());
        assert!(subscription
            .poll_next(&mut Context::from_waker(&waker))
            .is_pending());
        let closer = subscription.closer();
        let closing = thread::spawn(move || closer.close());
        assert!(handle.complete(None));
        closing.join().unwrap();
        assert!(
            woken.0.load(Ordering::Relaxed),
            "the waiting subscriber was woken"
        );
        assert!(subscription.is_closed());
        assert!(
            subscription.try_next().is_none(),
            "nothing is read after the close"
        );
    });
}
