//! CONTRACT §5, inherited metadata: a child in its parent's reach starts with its parent's metadata, updated
//! with its own through the session's merge; a detached child, or a root, keeps its own.

use std::sync::Arc;

use subagent_tracker::{InMemoryRegistry, InMemorySubagentTaskTracker, TaskStart, TrackerConfig};

fn metadata(tracker: &InMemorySubagentTaskTracker, task_id: &str) -> Option<String> {
    tracker.get(task_id).unwrap().metadata
}

#[test]
fn a_child_takes_its_parent_s_metadata_merged_with_its_own() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    assert!(
        tracker.set_metadata_merge(Arc::new(|parent: &String, own: String| format!(
            "{parent}+{own}"
        )))
    );
    assert!(
        !tracker.set_metadata_merge(Arc::new(|_: &String, own: String| own)),
        "set once"
    );
    let _root = tracker
        .start(
            TaskStart::new()
                .task_id("root")
                .metadata("user=ana".to_owned()),
        )
        .unwrap();
    let _child = tracker
        .start(
            TaskStart::new()
                .task_id("child")
                .parent_id("root")
                .metadata("step=1".to_owned()),
        )
        .unwrap();
    let _bare = tracker
        .start(TaskStart::new().task_id("bare").parent_id("child"))
        .unwrap();
    let _detached = tracker
        .start(
            TaskStart::new()
                .task_id("detached")
                .parent_id("root")
                .detached(true)
                .metadata("step=9".to_owned()),
        )
        .unwrap();
    assert_eq!(
        metadata(&tracker, "child").as_deref(),
        Some("user=ana+step=1")
    );
    assert_eq!(
        metadata(&tracker, "bare").as_deref(),
        Some("user=ana+step=1")
    );
    assert_eq!(metadata(&tracker, "detached").as_deref(), Some("step=9"));
    assert_eq!(metadata(&tracker, "root").as_deref(), Some("user=ana"));
}

#[test]
fn without_a_merge_a_child_keeps_its_own_and_takes_its_parent_s_when_it_has_none() {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let _root = tracker
        .start(
            TaskStart::new()
                .task_id("root")
                .metadata("user=ana".to_owned()),
        )
        .unwrap();
    let _own = tracker
        .start(
            TaskStart::new()
                .task_id("own")
                .parent_id("root")
                .metadata("step=1".to_owned()),
        )
        .unwrap();
    let _bare = tracker
        .start(TaskStart::new().task_id("bare").parent_id("root"))
        .unwrap();
    assert_eq!(metadata(&tracker, "own").as_deref(), Some("step=1"));
    assert_eq!(metadata(&tracker, "bare").as_deref(), Some("user=ana"));
}

#[test]
fn a_registry_sets_its_merge_on_every_session_it_creates() {
    let registry: InMemoryRegistry =
        InMemoryRegistry::with_metadata_merge(Arc::new(|parent: &String, own: String| {
            format!("{parent}+{own}")
        }));
    let session = registry
        .session(Some("s"), TrackerConfig::default())
        .unwrap();
    let _root = session
        .start(TaskStart::new().task_id("root").metadata("a".to_owned()))
        .unwrap();
    let _child = session
        .start(
            TaskStart::new()
                .task_id("child")
                .parent_id("root")
                .metadata("b".to_owned()),
        )
        .unwrap();
    assert_eq!(metadata(&session, "child").as_deref(), Some("a+b"));
}
