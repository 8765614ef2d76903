//! CONTRACT §18: reserved tasks are queued until claimed, and a cancel before the claim is never lost.

use crate::common;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use subagent_tracker::{
    CancelCause, ClaimProblem, InMemorySubagentTaskTracker, SubagentEventKind, SubagentStatus,
    TaskStart, TrackerError, CLAIM_TIMEOUT_ERROR,
};

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(100_000)
}

fn reserve(tracker: &InMemorySubagentTaskTracker, start: TaskStart) -> Arc<str> {
    tracker.reserve(start, None).unwrap()
}

#[test]
fn a_reserved_task_is_queued_pending_and_holds_its_id() {
    let tracker = tracker();
    let running = tracker.start(TaskStart::new().task_id("first")).unwrap();
    let id = reserve(&tracker, TaskStart::new().task_id("job").agent("coder"));
    assert_eq!(&*id, "job");
    let snapshot = tracker.get("job").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Queued);
    assert!(!snapshot.finished);
    assert_eq!(snapshot.queued_at, Some(snapshot.started_at));
    assert_eq!(snapshot.claimed_at, None);
    assert_eq!(snapshot.agent.as_deref(), Some("coder"));
    let pending: Vec<_> = tracker
        .pending()
        .into_iter()
        .map(|task| task.task_id)
        .collect();
    assert_eq!(pending, [Arc::from("first"), Arc::from("job")]);
    assert!(matches!(
        tracker.reserve(TaskStart::new().task_id("job"), None),
        Err(TrackerError::DuplicateTask { .. })
    ));
    assert!(matches!(
        tracker.start(TaskStart::new().task_id("job")),
        Err(TrackerError::DuplicateTask { .. })
    ));
    drop(running);
}

#[test]
fn a_generated_id_is_returned() {
    let tracker = tracker();
    let id = reserve(&tracker, TaskStart::new());
    assert!(!id.is_empty());
    assert_eq!(tracker.get(&id).unwrap().status, SubagentStatus::Queued);
}

#[test]
fn a_claim_makes_the_task_running_for_its_runner() {
    let tracker = tracker();
    reserve(&tracker, TaskStart::new().task_id("job"));
    let handle = tracker.claim("job").unwrap();
    let snapshot = tracker.get("job").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Running);
    assert!(snapshot.claimed_at.unwrap() >= snapshot.queued_at.unwrap());
    assert!(!handle.is_cancelled());
    assert!(handle.complete(Some("done".into())));
    assert_eq!(
        tracker.get("job").unwrap().status,
        SubagentStatus::Completed
    );
}

#[test]
fn claims_of_unknown_claimed_or_started_tasks_are_refused() {
    let tracker = tracker();
    let Err(refused) = tracker.claim("nobody") else {
        panic!("nothing was reserved, yet the claim succeeded")
    };
    assert!(matches!(refused, TrackerError::NotReserved { .. }));
    assert!(
        refused.to_string().contains("reserve it first"),
        "the refusal says what a claim needs: {refused}"
    );
    reserve(&tracker, TaskStart::new().task_id("job"));
    let handle = tracker.claim("job").unwrap();
    let second = tracker.claim("job").err().unwrap();
    assert!(matches!(
        second,
        TrackerError::NotClaimable {
            problem: ClaimProblem::AlreadyClaimed,
            ..
        }
    ));
    assert!(second.to_string().contains("already claimed"), "{second}");
    let started = tracker.start(TaskStart::new().task_id("started")).unwrap();
    assert!(matches!(
        tracker.claim("started"),
        Err(TrackerError::NotClaimable {
            problem: ClaimProblem::AlreadyClaimed,
            ..
        })
    ));
    drop((handle, started));
}

#[test]
fn a_cancel_before_the_claim_finishes_the_task_and_reaches_the_runner() {
    let tracker = tracker();
    reserve(&tracker, TaskStart::new().task_id("job"));
    let watch = tracker.watch("job").unwrap();
    assert!(tracker.cancel("job", Some("user pressed stop")));
    assert!(!tracker.cancel("job", None));
    let snapshot = tracker.get("job").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Cancelled);
    assert!(snapshot.finished, "nothing runs, so nothing is waited for");
    assert!(snapshot.ended_at.is_some());
    assert!(watch.is_finished());
    assert!(tracker.pending().is_empty());

    let handle = tracker.claim("job").unwrap();
    assert!(handle.is_cancelled());
    assert_eq!(
        handle.token().reason().as_deref(),
        Some("user pressed stop")
    );
    assert!(!handle.complete(None));
    assert!(tracker.get("job").unwrap().claimed_at.is_some());
    assert!(matches!(
        tracker.claim("job"),
        Err(TrackerError::NotClaimable {
            problem: ClaimProblem::AlreadyClaimed,
            ..
        })
    ));
}

#[test]
fn cascades_session_cancels_and_deadlines_reach_queued_tasks() {
    let tracker = tracker();
    let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
    reserve(
        &tracker,
        TaskStart::new().task_id("queued-child").parent_id("parent"),
    );
    reserve(
        &tracker,
        TaskStart::new()
            .task_id("grandchild")
            .parent_id("queued-child"),
    );
    assert!(tracker.cancel("parent", None));
    for id in ["queued-child", "grandchild"] {
        let snapshot = tracker.get(id).unwrap();
        assert_eq!(snapshot.status, SubagentStatus::Cancelled, "{id}");
        assert_eq!(snapshot.cancel_cause, Some(CancelCause::Parent));
        assert_eq!(snapshot.cancel_origin.as_deref(), Some("parent"));
        assert!(snapshot.finished, "{id}");
    }
    // A reservation under a cancelled parent starts cancelled, and finished.
    reserve(
        &tracker,
        TaskStart::new().task_id("late").parent_id("parent"),
    );
    let late = tracker.get("late").unwrap();
    assert_eq!(late.status, SubagentStatus::Cancelled);
    assert!(late.finished);
    drop(parent);

    reserve(&tracker, TaskStart::new().task_id("a"));
    reserve(&tracker, TaskStart::new().task_id("b"));
    assert_eq!(tracker.cancel_all(Some("shutdown")), 2);
    assert!(tracker.pending().is_empty());

    reserve(
        &tracker,
        TaskStart::new()
            .task_id("deadline")
            .timeout(Duration::from_millis(20)),
    );
    let finished = wait_until(|| tracker.get("deadline").unwrap().finished);
    assert!(finished, "the deadline reached the queued task");
    assert_eq!(
        tracker.get("deadline").unwrap().cancel_cause,
        Some(CancelCause::Deadline)
    );
}

#[test]
fn a_queued_parent_s_running_children_go_on_under_its_ancestor_when_it_is_ended_by_id() {
    let tracker = tracker();
    let root = tracker.start(TaskStart::new().task_id("root")).unwrap();
    reserve(
        &tracker,
        TaskStart::new().task_id("queued").parent_id("root"),
    );
    let child = tracker
        .start(TaskStart::new().task_id("child").parent_id("queued"))
        .unwrap();
    assert!(tracker.end("queued", Ok(None)));
    assert_eq!(
        tracker.get("queued").unwrap().status,
        SubagentStatus::Completed
    );
    assert!(matches!(
        tracker.claim("queued"),
        Err(TrackerError::NotClaimable {
            problem: ClaimProblem::Ended(SubagentStatus::Completed),
            ..
        })
    ));
    assert!(tracker.cancel("root", None));
    assert!(
        child.is_cancelled(),
        "the root's cancel reached the adopted child"
    );
    drop(root);
}

#[test]
fn an_unclaimed_reservation_fails_after_its_claim_timeout() {
    let tracker = tracker();
    tracker
        .reserve(
            TaskStart::new().task_id("job"),
            Some(Duration::from_millis(20)),
        )
        .unwrap();
    assert!(wait_until(|| tracker.get("job").unwrap().finished));
    let snapshot = tracker.get("job").unwrap();
    assert_eq!(snapshot.status, SubagentStatus::Failed);
    let error = snapshot.error.unwrap();
    assert!(error.starts_with(CLAIM_TIMEOUT_ERROR), "{error}");
    assert!(error.contains("0.02 seconds"), "{error}");
    let refused = tracker.claim("job").err().unwrap();
    assert!(refused.to_string().contains("ended failed"), "{refused}");
}

#[test]
fn a_claim_in_time_disarms_the_claim_timeout() {
    let tracker = tracker();
    tracker
        .reserve(
            TaskStart::new().task_id("job"),
            Some(Duration::from_millis(30)),
        )
        .unwrap();
    let handle = tracker.claim("job").unwrap();
    thread::sleep(Duration::from_millis(80));
    assert_eq!(tracker.get("job").unwrap().status, SubagentStatus::Running);
    assert!(handle.complete(None));
}

#[test]
fn events_tell_the_reservation_and_the_claim() {
    let tracker = tracker();
    let mut events = tracker.subscribe();
    reserve(&tracker, TaskStart::new().task_id("job"));
    let handle = tracker.claim("job").unwrap();
    assert!(handle.complete(None));
    let kinds: Vec<_> = (0..3)
        .map(|_| {
            let event = events.try_next().unwrap();
            (event.kind, event.status)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (SubagentEventKind::Started, SubagentStatus::Queued),
            (SubagentEventKind::Claimed, SubagentStatus::Running),
            (SubagentEventKind::Ended, SubagentStatus::Completed),
        ]
    );
    reserve(&tracker, TaskStart::new().task_id("stopped"));
    assert!(tracker.cancel("stopped", None));
    let kinds: Vec<_> = (0..3).map(|_| events.try_next().unwrap().kind).collect();
    assert_eq!(
        kinds,
        [
            SubagentEventKind::Started,
            SubagentEventKind::Cancelled,
            SubagentEventKind::Ended
        ]
    );
}

#[test]
fn of_many_concurrent_claims_exactly_one_succeeds() {
    for round in 0..200 {
        let tracker = tracker();
        let id = format!("job-{round}");
        reserve(&tracker, TaskStart::new().task_id(id.as_str()));
        let barrier = Arc::new(Barrier::new(4));
        let winners = Arc::new(AtomicUsize::new(0));
        let claimers: Vec<_> = (0..4)
            .map(|_| {
                let (tracker, barrier, winners, id) = (
                    tracker.clone(),
                    barrier.clone(),
                    winners.clone(),
                    id.clone(),
                );
                thread::spawn(move || {
                    barrier.wait();
                    if let Ok(handle) = tracker.claim(&id) {
                        winners.fetch_add(1, Ordering::SeqCst);
                        handle.complete(None);
                    }
                })
            })
            .collect();
        for claimer in claimers {
            claimer.join().unwrap();
        }
        assert_eq!(winners.load(Ordering::SeqCst), 1, "round {round}");
    }
}

#[test]
fn a_cancel_racing_a_claim_is_never_lost() {
    for round in 0..500 {
        let tracker = tracker();
        reserve(&tracker, TaskStart::new().task_id("job"));
        let barrier = Arc::new(Barrier::new(2));
        let canceller = {
            let (tracker, barrier) = (tracker.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                tracker.cancel("job", None)
            })
        };
        barrier.wait();
        let handle = tracker.claim("job").unwrap();
        assert!(canceller.join().unwrap(), "round {round}");
        assert!(handle.is_cancelled(), "round {round}");
        assert!(!handle.complete(None));
        let snapshot = tracker.get("job").unwrap();
        assert_eq!(snapshot.status, SubagentStatus::Cancelled);
        assert!(snapshot.finished);
    }
}

fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        thread::sleep(Duration::from_millis(2));
    }
    false
}
