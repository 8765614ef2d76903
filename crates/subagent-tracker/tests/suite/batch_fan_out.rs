//! CONTRACT §22: a batch starts or reserves every one of its tasks, or none; a cancel of a parent reaches every
//! child the batch opens under it, whenever the cancel lands; a batch of ends gives each end its own result.

use crate::common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use subagent_tracker::{
    EndTarget, InMemorySubagentTaskTracker, SubagentStatus, SubagentTaskHandle, TaskEnd,
    TaskFailure, TaskStart, TrackerError, BATCH_REFUSED_REASON,
};

/// What a refused batch's error must be.
type Expected = fn(&TrackerError) -> bool;

fn tracker() -> InMemorySubagentTaskTracker {
    common::tracker_retaining(100_000)
}

fn tracker_named(session_id: &str) -> InMemorySubagentTaskTracker {
    InMemorySubagentTaskTracker::with_config(
        Some(session_id),
        subagent_tracker::TrackerConfig::default(),
    )
}

#[test]
fn a_batch_starts_every_task_in_order_and_a_child_may_name_an_earlier_one() {
    let tracker = tracker();
    let handles = tracker
        .start_batch(vec![
            TaskStart::new().task_id("plan").agent("planner"),
            TaskStart::new().task_id("step-1").parent_id("plan"),
            TaskStart::new().parent_id("plan"),
        ])
        .unwrap();
    assert_eq!(handles.len(), 3);
    assert_eq!(&**handles[0].task_id(), "plan");
    let generated = handles[2].task_id().to_string();
    assert_eq!(common::task_ids(&tracker), ["plan", "step-1", &*generated]);
    assert!(tracker.cancel("plan", Some("stop")));
    assert!(handles.iter().all(SubagentTaskHandle::is_cancelled));
}

#[test]
fn a_bad_id_a_repeated_id_or_a_live_id_refuses_the_whole_batch_and_changes_nothing() {
    let tracker = tracker();
    let _live = tracker.start(TaskStart::new().task_id("live")).unwrap();
    let refusals: [(Vec<TaskStart>, Expected); 5] = [
        (
            vec![TaskStart::new().task_id("a"), TaskStart::new().task_id("")],
            |error| matches!(error, TrackerError::InvalidId { .. }),
        ),
        (
            vec![TaskStart::new().task_id("a"), TaskStart::new().task_id("a")],
            |error| matches!(error, TrackerError::DuplicateInBatch { .. }),
        ),
        (
            vec![
                TaskStart::new().task_id("a"),
                TaskStart::new().task_id("live"),
            ],
            |error| matches!(error, TrackerError::DuplicateTask { .. }),
        ),
        (
            vec![
                TaskStart::new().task_id("a"),
                TaskStart::new().task_id("b").parent_id("missing"),
            ],
            |error| matches!(error, TrackerError::UnknownTask { task_id, .. } if &**task_id == "missing"),
        ),
        // A parent must come before its child in the batch.
        (
            vec![
                TaskStart::new().task_id("child").parent_id("later"),
                TaskStart::new().task_id("later"),
            ],
            |error| matches!(error, TrackerError::UnknownTask { task_id, .. } if &**task_id == "later"),
        ),
    ];
    let mut events = tracker.subscribe();
    for (batch, expected) in refusals {
        let error = tracker.start_batch(batch).unwrap_err();
        assert!(expected(&error), "{error:?}");
    }
    assert_eq!(common::task_ids(&tracker), ["live"]);
    assert!(events.try_next().is_none(), "a refused batch emits nothing");
    let repeated = tracker
        .reserve_batch(vec![
            (TaskStart::new().task_id("q"), None),
            (TaskStart::new().task_id("q"), None),
        ])
        .unwrap_err();
    assert_eq!(
        repeated,
        TrackerError::DuplicateInBatch {
            task_id: Arc::from("q")
        }
    );
}

#[test]
fn a_reserved_batch_is_queued_for_claims() {
    let tracker = tracker();
    let _parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
    let reserved = tracker
        .reserve_batch(
            (0..5)
                .map(|index| {
                    (
                        TaskStart::new()
                            .task_id(format!("job-{index}"))
                            .parent_id("parent"),
                        None,
                    )
                })
                .collect(),
        )
        .unwrap();
    assert_eq!(reserved.len(), 5);
    assert!(reserved
        .iter()
        .all(|id| tracker.get(id).unwrap().status == SubagentStatus::Queued));
    let claimed = tracker.claim("job-3").unwrap();
    assert_eq!(&**claimed.task_id(), "job-3");
}

#[test]
fn a_cancel_of_the_parent_racing_a_batch_reaches_every_child() {
    for round in 0..200 {
        let tracker = tracker();
        let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let canceller = {
            let (tracker, barrier) = (tracker.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                tracker.cancel("parent", Some("stop"))
            })
        };
        barrier.wait();
        let children = tracker
            .start_batch(
                (0..20)
                    .map(|index| {
                        TaskStart::new()
                            .task_id(format!("child-{index}"))
                            .parent_id("parent")
                    })
                    .collect(),
            )
            .unwrap();
        assert!(canceller.join().unwrap());
        assert!(
            children.iter().all(SubagentTaskHandle::is_cancelled),
            "round {round}: a child of the batch escaped its parent's cancel"
        );
        drop(parent);
    }
}

#[test]
fn a_start_of_one_of_its_ids_racing_the_batch_leaves_no_task_of_a_refused_batch_pending() {
    let mut refused_part_way = 0;
    for round in 0..300 {
        let tracker = tracker();
        let barrier = Arc::new(Barrier::new(2));
        let batch_done = Arc::new(AtomicBool::new(false));
        let racer = {
            let (tracker, barrier, batch_done) =
                (tracker.clone(), barrier.clone(), batch_done.clone());
            thread::spawn(move || {
                barrier.wait();
                // Tries until it wins the id or the batch is over, so that some rounds land mid batch.
                while !batch_done.load(Ordering::Acquire) {
                    if let Ok(handle) = tracker.start(TaskStart::new().task_id("task-55")) {
                        return Some(handle);
                    }
                }
                None
            })
        };
        barrier.wait();
        let batch = tracker.start_batch(
            (0..60)
                .map(|index| TaskStart::new().task_id(format!("task-{index}")))
                .collect(),
        );
        batch_done.store(true, Ordering::Release);
        let raced = racer.join().unwrap();
        match (batch, raced) {
            (Ok(handles), None) => assert_eq!(handles.len(), 60),
            (Err(TrackerError::DuplicateTask { .. }), Some(_racer)) => {
                let pending: Vec<_> = tracker
                    .pending()
                    .into_iter()
                    .map(|task| task.task_id.to_string())
                    .collect();
                assert_eq!(pending, ["task-55"], "round {round}");
                let opened = tracker.get("task-0");
                if let Some(opened) = opened {
                    refused_part_way += 1;
                    assert!(opened.finished);
                    assert_eq!(opened.cancel_reason.as_deref(), Some(BATCH_REFUSED_REASON));
                }
            }
            (batch, raced) => panic!(
                "round {round}: the batch {:?} and the racing start {:?} both won or both lost",
                batch.map(|handles| handles.len()),
                raced.map(|handle| handle.task_id().to_string())
            ),
        }
    }
    // Not asserted: whether the race ever lands between the checks and the opens depends on the machine.
    eprintln!("refused part way in {refused_part_way} of 300 rounds");
}

#[test]
fn a_reservation_that_would_finish_as_it_opens_cannot_parent_a_later_task() {
    let tracker = tracker();
    let _plan = tracker.start(TaskStart::new().task_id("plan")).unwrap();
    assert!(tracker.cancel("plan", Some("stopped")));
    let refused = tracker
        .reserve_batch(vec![
            (TaskStart::new().task_id("a").parent_id("plan"), None),
            (TaskStart::new().task_id("b").parent_id("a"), None),
        ])
        .unwrap_err();
    assert!(
        matches!(&refused, TrackerError::ParentFinished { parent_id, .. } if &**parent_id == "a"),
        "{refused:?}"
    );
    let refused = tracker
        .reserve_batch(vec![
            (
                TaskStart::new()
                    .task_id("a")
                    .timeout(std::time::Duration::ZERO),
                None,
            ),
            (TaskStart::new().task_id("b").parent_id("a"), None),
        ])
        .unwrap_err();
    assert!(matches!(refused, TrackerError::ParentFinished { .. }));
    assert_eq!(
        common::task_ids(&tracker),
        ["plan"],
        "a refused batch changes nothing"
    );
    let started = tracker
        .start_batch(vec![
            TaskStart::new().task_id("a").parent_id("plan"),
            TaskStart::new().task_id("b").parent_id("a"),
        ])
        .unwrap();
    assert!(started.iter().all(SubagentTaskHandle::is_cancelled));
}

/// A batch of ends records each end on its own, as one after the other would, and gives each its own result.
#[test]
fn a_batch_of_ends_gives_each_end_its_own_result() {
    let tracker = tracker_named("s");
    let done = tracker.start(TaskStart::new().task_id("done")).unwrap();
    let stopped = tracker.start(TaskStart::new().task_id("stopped")).unwrap();
    let _by_id = tracker.start(TaskStart::new().task_id("by-id")).unwrap();
    assert!(tracker.cancel("stopped", Some("no longer needed")));
    let moved = tracker
        .end_batch(vec![
            (
                EndTarget::Handle(&done),
                TaskEnd::Completed(Some("answer".to_owned())),
            ),
            (EndTarget::Handle(&stopped), TaskEnd::Completed(None)),
            (
                EndTarget::TaskId("by-id".into()),
                TaskEnd::Failed(TaskFailure::new("it broke")),
            ),
            (
                EndTarget::TaskId("unknown".into()),
                TaskEnd::Completed(None),
            ),
        ])
        .unwrap();
    assert_eq!(moved, [true, false, true, false]);
    assert!(!done.fail("late"), "a handle a batch ended has ended");
    let snapshot = |task_id: &str| tracker.get(task_id).unwrap();
    assert_eq!(snapshot("done").status, SubagentStatus::Completed);
    assert_eq!(snapshot("done").result.as_deref(), Some("answer"));
    assert_eq!(
        (snapshot("stopped").status, snapshot("stopped").finished),
        (SubagentStatus::Cancelled, true)
    );
    assert_eq!(snapshot("by-id").error.as_deref(), Some("it broke"));
}

/// A batch of ends that names a handle of another session, an invalid id, or a task twice, ends nothing.
#[test]
fn a_batch_of_ends_with_a_foreign_handle_or_a_bad_id_ends_nothing() {
    let tracker = tracker_named("s");
    let other = tracker_named("other");
    let mine = tracker.start(TaskStart::new().task_id("mine")).unwrap();
    let theirs = other.start(TaskStart::new().task_id("theirs")).unwrap();
    let refused = tracker.end_batch(vec![
        (EndTarget::Handle(&mine), TaskEnd::Completed(None)),
        (EndTarget::Handle(&theirs), TaskEnd::Completed(None)),
    ]);
    assert!(matches!(
        refused,
        Err(TrackerError::HandleOfAnotherSession { ref task_id, ref session_id })
            if &**task_id == "theirs" && &**session_id == "s"
    ));
    let refused = tracker.end_batch(vec![
        (EndTarget::Handle(&mine), TaskEnd::Completed(None)),
        (EndTarget::TaskId("".into()), TaskEnd::Completed(None)),
    ]);
    assert!(matches!(refused, Err(TrackerError::InvalidId { .. })));
    let refused = tracker.end_batch(vec![
        (EndTarget::Handle(&mine), TaskEnd::Completed(None)),
        (EndTarget::TaskId("mine".into()), TaskEnd::Completed(None)),
    ]);
    assert!(matches!(
        refused,
        Err(TrackerError::DuplicateInBatch { ref task_id }) if &**task_id == "mine"
    ));
    assert_eq!(tracker.get("mine").unwrap().status, SubagentStatus::Running);
    assert_eq!(other.get("theirs").unwrap().status, SubagentStatus::Running);
}
