//! CONTRACT §5 and §6: a finished run that the session collapses into its compact record answers every query
//! as its live entry did (its snapshot, claims, waits, a late escalation), and restarts of its id racing its
//! end keep the retention count exact.

use crate::common;
use std::time::Duration;

use subagent_tracker::{
    ClaimProblem, InMemorySubagentTaskTracker, SubagentStatus, SubagentTaskHandle, TaskStart,
    TrackerError,
};

fn tracker(max_finished_tasks: usize) -> InMemorySubagentTaskTracker {
    common::tracker_retaining(max_finished_tasks)
}

/// Finishes the run `end` is given and checks that the session's snapshot (the compact record; the handle
/// keeps the entry alive, so the two can be compared) equals the entry's own, field for field.
fn assert_record_matches_entry(
    tracker: &InMemorySubagentTaskTracker,
    handle: &SubagentTaskHandle,
    end: impl FnOnce(&SubagentTaskHandle),
) {
    end(handle);
    assert!(handle.is_finished());
    let from_entry = handle.snapshot();
    let from_session = tracker.get(handle.task_id()).unwrap();
    assert_eq!(from_session, from_entry, "task {}", handle.task_id());
}

#[test]
fn a_finished_runs_record_shows_the_snapshot_its_entry_showed() {
    let tracker = tracker(100);
    let parent = tracker.start(TaskStart::new().task_id("parent")).unwrap();

    let plain = tracker.start(TaskStart::new().task_id("plain")).unwrap();
    assert_record_matches_entry(&tracker, &plain, |handle| {
        assert!(handle.complete(None));
    });

    let full = tracker
        .start(
            TaskStart::new()
                .task_id("full")
                .parent_id("parent")
                .agent("researcher")
                .description("find papers")
                .metadata("m".to_owned())
                .timeout(Duration::from_secs(60)),
        )
        .unwrap();
    assert_record_matches_entry(&tracker, &full, |handle| {
        handle.progress("half way");
        handle.progress("nearly");
        assert!(handle.complete(Some("done".to_owned())));
    });
    let full = tracker.get("full").unwrap();
    assert_eq!(full.progress_count, 2);
    assert_eq!(full.result.as_deref(), Some("done"));
    assert!(full.deadline.is_some());

    let failed = tracker.start(TaskStart::new().task_id("failed")).unwrap();
    assert_record_matches_entry(&tracker, &failed, |handle| {
        assert!(handle.fail("boom"));
    });

    let cancelled = tracker
        .start(TaskStart::new().task_id("cancelled"))
        .unwrap();
    assert_record_matches_entry(&tracker, &cancelled, |handle| {
        assert!(tracker.cancel("cancelled", Some("stop")));
        handle.complete(Some("late".to_owned()));
    });
    let cancelled = tracker.get("cancelled").unwrap();
    assert_eq!(cancelled.status, SubagentStatus::Cancelled);
    assert_eq!(cancelled.cancel_reason.as_deref(), Some("stop"));
    assert_eq!(cancelled.result.as_deref(), Some("late"));

    let detached = tracker
        .start(
            TaskStart::new()
                .task_id("detached")
                .parent_id("parent")
                .detached(true),
        )
        .unwrap();
    assert_record_matches_entry(&tracker, &detached, |handle| {
        handle.complete(None);
    });
    assert!(tracker.get("detached").unwrap().detached);

    tracker
        .reserve(TaskStart::new().task_id("reserved"), None)
        .unwrap();
    let claimed = tracker.claim("reserved").unwrap();
    assert_record_matches_entry(&tracker, &claimed, |handle| {
        handle.complete(None);
    });
    let reserved = tracker.get("reserved").unwrap();
    assert!(reserved.queued_at.is_some() && reserved.claimed_at.is_some());

    let by_cascade = tracker
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .unwrap();
    assert_record_matches_entry(&tracker, &by_cascade, |handle| {
        tracker.cancel("parent", None);
        handle.stop_cancelled(None);
    });
    let child = tracker.get("child").unwrap();
    assert_eq!(child.cancel_origin.as_deref(), Some("parent"));
    drop(parent);
}

#[test]
fn a_dropped_handles_run_and_an_expired_reservation_keep_their_end() {
    let tracker = tracker(100);
    drop(tracker.start(TaskStart::new().task_id("dropped")).unwrap());
    let dropped = tracker.get("dropped").unwrap();
    assert_eq!(dropped.status, SubagentStatus::Failed);
    assert!(dropped.finished && dropped.ended_at.is_some());
    assert_eq!(
        dropped.error.as_deref(),
        Some(subagent_tracker::DROPPED_HANDLE_ERROR)
    );

    tracker
        .reserve(
            TaskStart::new().task_id("expires"),
            Some(Duration::from_millis(1)),
        )
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !tracker.get("expires").unwrap().finished {
        assert!(
            std::time::Instant::now() < deadline,
            "the claim timeout never fired"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let expired = tracker.get("expires").unwrap();
    assert_eq!(expired.status, SubagentStatus::Failed);
    assert!(expired.claimed_at.is_none());
}

#[test]
fn an_escalation_recorded_after_the_end_reaches_the_record() {
    let tracker = tracker(10);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    tracker.cancel("a", None);
    handle.stop_cancelled(None);
    assert!(!tracker.get("a").unwrap().escalated);
    handle.record_escalation();
    assert!(tracker.get("a").unwrap().escalated);
    assert_eq!(tracker.get("a").unwrap(), handle.snapshot());
}

#[test]
fn an_escalation_of_a_replaced_run_stays_with_that_run() {
    let tracker = tracker(10);
    let first = tracker.start(TaskStart::new().task_id("a")).unwrap();
    first.complete(None);
    let second = tracker.start(TaskStart::new().task_id("a")).unwrap();
    second.complete(None);
    first.record_escalation();
    assert!(first.snapshot().escalated);
    assert!(!tracker.get("a").unwrap().escalated);
}

#[test]
fn claims_of_a_finished_run_are_refused_as_before() {
    let tracker = tracker(10);
    let started = tracker.start(TaskStart::new().task_id("started")).unwrap();
    started.complete(None);
    drop(started);
    tracker
        .reserve(TaskStart::new().task_id("claimed"), None)
        .unwrap();
    tracker.claim("claimed").unwrap().complete(None);
    tracker
        .reserve(TaskStart::new().task_id("ended-by-id"), None)
        .unwrap();
    assert!(tracker.end("ended-by-id", Ok(None)));
    for (task_id, problem) in [
        ("started", ClaimProblem::AlreadyClaimed),
        ("claimed", ClaimProblem::AlreadyClaimed),
        (
            "ended-by-id",
            ClaimProblem::Ended(SubagentStatus::Completed),
        ),
    ] {
        match tracker.claim(task_id) {
            Err(TrackerError::NotClaimable {
                problem: refused, ..
            }) => assert_eq!(refused, problem, "{task_id}"),
            other => panic!("{task_id}: {other:?}"),
        }
    }
}

#[test]
fn a_reservation_cancelled_before_its_claim_can_still_be_claimed_once() {
    let tracker = tracker(10);
    tracker
        .reserve(TaskStart::new().task_id("a"), None)
        .unwrap();
    assert!(tracker.cancel("a", Some("not needed")));
    // Other runs finishing around it collapse; this one must keep what a claim needs.
    for index in 0..5 {
        tracker
            .start(TaskStart::new().task_id(format!("other-{index}")))
            .unwrap()
            .complete(None);
    }
    let handle = tracker.claim("a").unwrap();
    assert!(handle.token().is_cancelled());
    let snapshot = tracker.get("a").unwrap();
    assert!(snapshot.claimed_at.is_some());
    assert_eq!(snapshot.cancel_reason.as_deref(), Some("not needed"));
    assert!(matches!(
        tracker.claim("a"),
        Err(TrackerError::NotClaimable {
            problem: ClaimProblem::AlreadyClaimed,
            ..
        })
    ));
}

#[tokio::test]
async fn a_watch_on_a_finished_run_is_ready_at_once_with_its_final_snapshot() {
    let tracker = tracker(10);
    let handle = tracker.start(TaskStart::new().task_id("a")).unwrap();
    handle.complete(Some("r".to_owned()));
    drop(handle);
    let watch = tracker.watch("a").unwrap();
    assert!(watch.is_finished());
    let snapshot = tokio::time::timeout(Duration::from_secs(1), watch.finished())
        .await
        .unwrap();
    assert_eq!(snapshot.result.as_deref(), Some("r"));
    let waited = tokio::time::timeout(Duration::from_secs(1), tracker.wait_finished("a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waited, snapshot);
}

#[test]
fn restarts_racing_the_end_of_the_run_they_replace_keep_the_count_exact() {
    // Two threads end and restart the same few ids, so that a restart often lands between a run's end and
    // its collapse into a record. Every run must be counted once: the retained count equals the number of
    // ids kept, and the bound holds.
    const BOUND: usize = 3;
    let tracker = tracker(BOUND);
    std::thread::scope(|scope| {
        for thread in 0..2 {
            let tracker = &tracker;
            scope.spawn(move || {
                for index in 0..20_000 {
                    let task_id = format!("id-{}", (index + thread) % 4);
                    if let Ok(handle) = tracker.start(TaskStart::new().task_id(task_id)) {
                        if index % 3 == 0 {
                            tracker.cancel(handle.task_id(), None);
                        }
                        handle.complete(None);
                    }
                }
            });
        }
    });
    let retained = tracker.tasks();
    assert_eq!(retained.len(), tracker.retained_count());
    assert!(retained.len() <= BOUND, "retained {}", retained.len());
    assert!(retained.iter().all(|snapshot| snapshot.finished));
    // The window's count agrees with the map: with every run finished, one more finished run evicts exactly
    // the oldest, and the count stays at the bound.
    for index in 0..BOUND + 1 {
        tracker
            .start(TaskStart::new().task_id(format!("after-{index}")))
            .unwrap()
            .complete(None);
    }
    assert_eq!(tracker.retained_count(), BOUND);
}

/// `visit_values` shows a binding's garbage collector every value the session holds, each once: a finished
/// record's metadata, progress data and result (read where the id map holds the record), and a live run's (read
/// under its own record lock, once the map's is released).
#[test]
fn the_visit_of_values_reaches_finished_records_and_live_runs_once_each() {
    let tracker = tracker(100);
    let done = tracker
        .start(
            TaskStart::new()
                .task_id("done")
                .metadata("done-metadata".to_owned()),
        )
        .unwrap();
    assert!(done.progress_with("step", "done-progress".to_owned()));
    assert!(done.complete(Some("done-result".to_owned())));
    drop(done);
    tracker
        .reserve(
            TaskStart::new()
                .task_id("queued")
                .metadata("queued-metadata".to_owned()),
            None,
        )
        .unwrap();
    let running = tracker.start(TaskStart::new().task_id("running")).unwrap();
    assert!(running.progress_with("step", "running-progress".to_owned()));
    let mut seen = Vec::new();
    tracker.visit_values(|value| seen.push(value.clone()));
    seen.sort();
    assert_eq!(
        seen,
        [
            "done-metadata",
            "done-progress",
            "done-result",
            "queued-metadata",
            "running-progress"
        ]
    );
}
