//! CONTRACT §6, export and restore: a session filled from another's snapshots gets its finished tasks back as
//! they were, and its pending ones failed, never running without a runner.

use subagent_tracker::{
    InMemorySubagentTaskTracker, SubagentStatus, TaskStart, TrackerError,
    RESTORED_WITHOUT_RUNNER_ERROR,
};

#[test]
fn finished_tasks_come_back_as_they_were_and_pending_ones_failed() {
    let source: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let done = source
        .start(
            TaskStart::new()
                .task_id("done")
                .agent("coder")
                .metadata("m".into()),
        )
        .unwrap();
    assert!(done.progress("half way"));
    assert!(done.complete(Some("result".into())));
    let running = source.start(TaskStart::new().task_id("running")).unwrap();
    let stopping = source.start(TaskStart::new().task_id("stopping")).unwrap();
    assert!(source.cancel("stopping", Some("stop")));
    let exported = source.tasks();

    let target: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    assert_eq!(target.restore(exported.clone()).unwrap(), 3);
    let restored = target.get("done").unwrap();
    let original = &exported[0];
    assert_eq!(
        (
            &restored.status,
            &restored.result,
            &restored.metadata,
            &restored.progress,
            restored.started_at,
            restored.ended_at
        ),
        (
            &original.status,
            &original.result,
            &original.metadata,
            &original.progress,
            original.started_at,
            original.ended_at
        )
    );
    let was_running = target.get("running").unwrap();
    assert_eq!(
        (was_running.status, was_running.finished),
        (SubagentStatus::Failed, true)
    );
    assert_eq!(
        was_running.error.as_deref(),
        Some(RESTORED_WITHOUT_RUNNER_ERROR)
    );
    let was_stopping = target.get("stopping").unwrap();
    assert_eq!(
        (was_stopping.status, was_stopping.finished),
        (SubagentStatus::Cancelled, true)
    );
    assert_eq!(was_stopping.cancel_reason.as_deref(), Some("stop"));
    assert!(target.pending().is_empty());
    assert!(
        !target.cancel("running", None),
        "a restored task is finished"
    );
    assert!(
        target.start(TaskStart::new().task_id("done")).is_ok(),
        "a restored id starts again"
    );
    drop((running, stopping));
}

#[test]
fn a_restore_that_names_a_retained_or_repeated_id_restores_nothing() {
    let source: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    source
        .start(TaskStart::new().task_id("a"))
        .unwrap()
        .complete(None);
    let exported = source.tasks();
    let target: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let _held = target.start(TaskStart::new().task_id("b")).unwrap();
    let mut both = exported.clone();
    both.extend(target.tasks());
    assert!(matches!(
        target.restore(both),
        Err(TrackerError::DuplicateTask { .. })
    ));
    assert!(target.get("a").is_none(), "nothing restored");
    let repeated = [exported.clone(), exported].concat();
    assert!(matches!(
        target.restore(repeated),
        Err(TrackerError::DuplicateInBatch { .. })
    ));
    assert_eq!(target.retained_count(), 1);
}

#[test]
fn restored_tasks_count_against_the_bound() {
    let source: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    for index in 0..5 {
        source
            .start(TaskStart::new().task_id(format!("t{index}")))
            .unwrap()
            .complete(None);
    }
    let target: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::with_config(
        None,
        subagent_tracker::TrackerConfig::default().with_max_finished_tasks(2),
    );
    assert_eq!(target.restore(source.tasks()).unwrap(), 5);
    let kept: Vec<_> = target
        .tasks()
        .into_iter()
        .map(|task| task.task_id)
        .collect();
    assert_eq!(
        kept,
        vec!["t3".into(), "t4".into()] as Vec<std::sync::Arc<str>>
    );
}
