//! CONTRACT §19: sessions looked up by id in a registry.

use std::sync::{Arc, Barrier};
use std::thread;

use subagent_tracker::{InMemoryRegistry, TaskStart, TrackerConfig, TrackerError};

fn registry() -> InMemoryRegistry {
    InMemoryRegistry::new()
}

#[test]
fn session_gets_or_creates_and_get_session_never_creates() {
    let registry = registry();
    assert!(registry.get_session("run").is_none());
    let created = registry
        .session(
            Some("run"),
            TrackerConfig::default().with_max_finished_tasks(7),
        )
        .unwrap();
    assert_eq!(&**created.session_id(), "run");
    let again = registry
        .session(Some("run"), TrackerConfig::default())
        .unwrap();
    assert!(again.same_session(&created));
    assert_eq!(
        again.config().max_finished_tasks,
        7,
        "an existing session keeps its settings"
    );
    assert!(registry.get_session("run").unwrap().same_session(&created));
    assert!(registry.get_session("other").is_none());
    assert_eq!(registry.sessions(), [Arc::from("run")]);
}

#[test]
fn a_generated_session_id_is_listed() {
    let registry = registry();
    let session = registry.session(None, TrackerConfig::default()).unwrap();
    assert_eq!(registry.sessions(), [session.session_id().clone()]);
}

#[test]
fn a_bad_session_id_is_refused() {
    assert!(matches!(
        registry().session(Some(""), TrackerConfig::default()),
        Err(TrackerError::InvalidId {
            argument: "session_id",
            ..
        })
    ));
}

#[test]
fn a_stop_reaches_a_task_through_the_registry() {
    let registry = registry();
    let handle = registry
        .session(Some("run"), TrackerConfig::default())
        .unwrap()
        .start(TaskStart::new().task_id("worker"))
        .unwrap();
    // Code elsewhere holds only the ids.
    let session = registry.get_session("run").unwrap();
    assert!(session.cancel("worker", Some("user pressed stop")));
    assert!(handle.is_cancelled());
}

#[test]
fn a_closed_session_leaves_once_its_tasks_are_finished() {
    let registry = registry();
    let session = registry
        .session(Some("run"), TrackerConfig::default())
        .unwrap();
    let running = session.start(TaskStart::new().task_id("a")).unwrap();
    let queued = session
        .reserve(TaskStart::new().task_id("q"), None)
        .unwrap();
    assert_eq!(session.close(None), 2);
    assert!(
        registry.get_session("run").is_some(),
        "a cancelled runner is still running"
    );
    drop(running);
    assert!(registry.get_session("run").is_none());
    assert!(registry.sessions().is_empty());
    // The id now names a new session; the old one keeps answering for whoever holds it.
    let fresh = registry
        .session(Some("run"), TrackerConfig::default())
        .unwrap();
    assert!(!fresh.same_session(&session));
    assert!(!fresh.is_closed());
    assert!(session.get(&queued).unwrap().finished);
}

#[test]
fn an_empty_session_leaves_when_closed_and_an_open_one_stays() {
    let registry = registry();
    let session = registry
        .session(Some("empty"), TrackerConfig::default())
        .unwrap();
    let open = registry
        .session(Some("open"), TrackerConfig::default())
        .unwrap();
    let handle = open.start(TaskStart::new()).unwrap();
    assert!(handle.complete(None));
    assert_eq!(session.close(None), 0);
    assert_eq!(registry.sessions(), [Arc::from("open")]);
}

#[test]
fn a_session_made_outside_a_registry_is_in_none() {
    let registry = registry();
    let session = subagent_tracker::InMemorySubagentTaskTracker::<String>::with_config(
        Some("run"),
        TrackerConfig::default(),
    );
    session.close(None);
    let listed = registry
        .session(Some("run"), TrackerConfig::default())
        .unwrap();
    assert!(!listed.same_session(&session));
}

#[test]
fn concurrent_get_or_create_makes_one_session() {
    for round in 0..200 {
        let registry = registry();
        let barrier = Arc::new(Barrier::new(4));
        let creators: Vec<_> = (0..4)
            .map(|_| {
                let (registry, barrier) = (registry.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    registry
                        .session(Some("run"), TrackerConfig::default())
                        .unwrap()
                })
            })
            .collect();
        let sessions: Vec<_> = creators
            .into_iter()
            .map(|creator| creator.join().unwrap())
            .collect();
        assert!(
            sessions
                .iter()
                .all(|session| session.same_session(&sessions[0])),
            "round {round}"
        );
        assert_eq!(registry.sessions().len(), 1);
    }
}

#[test]
fn the_last_end_racing_close_removes_the_session() {
    for round in 0..300 {
        let registry = registry();
        let session = registry
            .session(Some("run"), TrackerConfig::default())
            .unwrap();
        let handles: Vec<_> = (0..3)
            .map(|_| session.start(TaskStart::new()).unwrap())
            .collect();
        let barrier = Arc::new(Barrier::new(handles.len() + 1));
        let enders: Vec<_> = handles
            .into_iter()
            .map(|handle| {
                let barrier = barrier.clone();
                thread::spawn(move || {
                    barrier.wait();
                    handle.complete(None);
                })
            })
            .collect();
        barrier.wait();
        session.close(None);
        for ender in enders {
            ender.join().unwrap();
        }
        assert!(registry.get_session("run").is_none(), "round {round}");
    }
}

/// `is_listed` says whether a registry lists the session now: from its creation there until it leaves (closed,
/// with every task finished) or the registry is cleared; a session of no registry, or one that a new session of
/// its id replaced, is not listed.
#[test]
fn a_session_is_listed_while_its_registry_lists_it() {
    use subagent_tracker::InMemorySubagentTaskTracker;

    let standalone: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    assert!(!standalone.is_listed());
    let registry = registry();
    let leaving = registry
        .session(Some("leaving"), TrackerConfig::default())
        .unwrap();
    assert!(leaving.is_listed());
    let handle = leaving.start(TaskStart::new().task_id("a")).unwrap();
    leaving.close(None);
    assert!(
        leaving.is_listed(),
        "its cancelled task's runner has not ended"
    );
    assert!(!handle.complete(None), "the close cancelled it");
    assert!(!leaving.is_listed());
    let successor = registry
        .session(Some("leaving"), TrackerConfig::default())
        .unwrap();
    assert!(successor.is_listed() && !leaving.is_listed());
    registry.clear();
    assert!(!successor.is_listed());
}
