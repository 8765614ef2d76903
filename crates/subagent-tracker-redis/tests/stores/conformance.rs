//! One suite, two stores: each scenario below runs against the in-memory tracker, against a Redis session on a
//! real `redis-server`, and against one on a Redis Cluster, through one small interface (`Store`, `Runner`), and
//! must see the same outcome. It covers
//! status races, the cascade, retention, queued tasks, late ends and deadlines. Where the contract lets Redis
//! differ (a runner's token fires a notification later, contract §20), the scenarios wait for it with
//! `eventually`; nothing else differs.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{eventually, RedisCluster, RedisServer};
use subagent_tracker::{
    CancelCause, ClaimProblem, InMemorySubagentTaskTracker, RecordedEvent, Resumption,
    SubagentStatus, SubagentTaskHandle, SubagentTaskSnapshot, SubagentTaskToken, TaskFailure,
    TaskFilter, TaskStart, TrackerConfig, TrackerError,
};
use subagent_tracker_redis::{RedisRegistry, RedisSession, RedisTaskHandle, RedisTrackerError};

/// A session of either store.
enum Store {
    Memory(InMemorySubagentTaskTracker<String>),
    Redis {
        session: RedisSession,
        // Kept running for as long as the session is used (a cluster outlives the store).
        _server: Option<RedisServer>,
        _registry: RedisRegistry,
    },
}

/// A runner's handle of either store.
enum Runner {
    Memory(SubagentTaskHandle<String>),
    Redis(RedisTaskHandle),
}

/// A refusal of the contract; any other error fails the scenario.
fn refusal(error: RedisTrackerError) -> TrackerError {
    match error {
        RedisTrackerError::Tracker(error) => error,
        other => panic!("Redis failed: {other}"),
    }
}

impl Store {
    fn memory(max_finished_tasks: usize) -> Store {
        Store::Memory(InMemorySubagentTaskTracker::with_config(
            Some("conformance"),
            TrackerConfig::default().with_max_finished_tasks(max_finished_tasks),
        ))
    }

    async fn redis(max_finished_tasks: usize) -> Store {
        let server = RedisServer::start();
        let registry = server.worker("conformance:", "runner").await;
        Store::on(registry, Some(server), "conformance", max_finished_tasks).await
    }

    /// A session of its own (`name`) on the cluster.
    async fn on_cluster(cluster: &RedisCluster, name: &str, max_finished_tasks: usize) -> Store {
        let options = subagent_tracker_redis::RedisOptions::default()
            .with_key_prefix("conformance:")
            .with_reconcile_interval(Duration::from_millis(200))
            .with_timeout(Duration::from_secs(2));
        let registry = RedisRegistry::connect(&cluster.url(), options)
            .await
            .unwrap();
        Store::on(registry, None, name, max_finished_tasks).await
    }

    async fn on(
        registry: RedisRegistry,
        server: Option<RedisServer>,
        name: &str,
        max_finished_tasks: usize,
    ) -> Store {
        let session = registry
            .session(
                Some(name),
                TrackerConfig::default().with_max_finished_tasks(max_finished_tasks),
            )
            .await
            .unwrap();
        Store::Redis {
            session,
            _server: server,
            _registry: registry,
        }
    }

    /// Another session of the same kind of store, named `name` on Redis, that keeps 10,000 finished tasks.
    async fn fresh(&self, name: &str) -> Store {
        match self {
            Store::Memory(_) => Store::memory(10_000),
            Store::Redis {
                _registry: registry,
                ..
            } => Store::on(registry.clone(), None, name, 10_000).await,
        }
    }

    async fn start(&self, start: TaskStart<String>) -> Result<Runner, TrackerError> {
        match self {
            Store::Memory(tracker) => tracker.start(start).map(Runner::Memory),
            Store::Redis { session, .. } => session
                .start(start)
                .await
                .map(Runner::Redis)
                .map_err(refusal),
        }
    }

    async fn start_batch(
        &self,
        starts: Vec<TaskStart<String>>,
    ) -> Result<Vec<Runner>, TrackerError> {
        match self {
            Store::Memory(tracker) => tracker
                .start_batch(starts)
                .map(|handles| handles.into_iter().map(Runner::Memory).collect()),
            Store::Redis { session, .. } => session
                .start_batch(starts)
                .await
                .map(|handles| handles.into_iter().map(Runner::Redis).collect())
                .map_err(refusal),
        }
    }

    async fn reserve_batch(
        &self,
        starts: Vec<TaskStart<String>>,
    ) -> Result<Vec<Arc<str>>, TrackerError> {
        let reservations = starts.into_iter().map(|start| (start, None)).collect();
        match self {
            Store::Memory(tracker) => tracker.reserve_batch(reservations),
            Store::Redis { session, .. } => {
                session.reserve_batch(reservations).await.map_err(refusal)
            }
        }
    }

    async fn reserve(
        &self,
        start: TaskStart<String>,
        claim_timeout: Option<Duration>,
    ) -> Result<Arc<str>, TrackerError> {
        match self {
            Store::Memory(tracker) => tracker.reserve(start, claim_timeout),
            Store::Redis { session, .. } => {
                session.reserve(start, claim_timeout).await.map_err(refusal)
            }
        }
    }

    async fn claim(&self, task_id: &str) -> Result<Runner, TrackerError> {
        match self {
            Store::Memory(tracker) => tracker.claim(task_id).map(Runner::Memory),
            Store::Redis { session, .. } => session
                .claim(task_id)
                .await
                .map(Runner::Redis)
                .map_err(refusal),
        }
    }

    async fn cancel_and_wait(&self, task_id: &str) -> SubagentTaskSnapshot<String> {
        let waited = async {
            match self {
                Store::Memory(tracker) => tracker.cancel_and_wait(task_id, None).await.unwrap(),
                Store::Redis { session, .. } => {
                    session.cancel_and_wait(task_id, None).await.unwrap()
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), waited)
            .await
            .expect("the cancel's work ended")
    }

    async fn restore(
        &self,
        snapshots: Vec<SubagentTaskSnapshot<String>>,
    ) -> Result<usize, TrackerError> {
        match self {
            Store::Memory(tracker) => tracker.restore(snapshots),
            Store::Redis { session, .. } => session.restore(snapshots).await.map_err(refusal),
        }
    }

    async fn close(&self) {
        match self {
            Store::Memory(tracker) => {
                tracker.close(None);
            }
            Store::Redis { session, .. } => {
                session.close(None).await.unwrap();
            }
        }
    }

    async fn tasks(&self) -> Vec<SubagentTaskSnapshot<String>> {
        match self {
            Store::Memory(tracker) => tracker.tasks(),
            Store::Redis { session, .. } => session.tasks().await.unwrap(),
        }
    }

    async fn record_event(&self, event: RecordedEvent<String>) -> bool {
        match self {
            Store::Memory(tracker) => tracker.record_event(event).unwrap(),
            Store::Redis { session, .. } => session.record_event(event).await.unwrap(),
        }
    }

    async fn resume(&self, task_id: &str, value: Option<&str>) -> bool {
        match self {
            Store::Memory(tracker) => tracker.resume(task_id, value.map(str::to_owned)),
            Store::Redis { session, .. } => session.resume(task_id, value).await.unwrap(),
        }
    }

    async fn cancel(&self, task_id: &str, reason: Option<&str>) -> bool {
        match self {
            Store::Memory(tracker) => tracker.cancel(task_id, reason),
            Store::Redis { session, .. } => session.cancel(task_id, reason).await.unwrap(),
        }
    }

    /// A cancel by filter; `metadata` is JSON text, which the in-memory store (whose metadata is opaque text)
    /// compares whole.
    async fn cancel_matching(
        &self,
        agent: Option<&str>,
        status: Option<SubagentStatus>,
        metadata: Option<&str>,
    ) -> Vec<Arc<str>> {
        fn narrowed<'a, M>(
            mut filter: TaskFilter<'a, M>,
            agent: Option<&'a str>,
            status: Option<SubagentStatus>,
        ) -> TaskFilter<'a, M> {
            if let Some(agent) = agent {
                filter = filter.agent(agent);
            }
            if let Some(status) = status {
                filter = filter.status(status);
            }
            filter
        }
        match self {
            Store::Memory(tracker) => {
                let holds = |stored: Option<&String>| {
                    metadata.is_none_or(|wanted| stored.map(String::as_str) == Some(wanted))
                };
                tracker.cancel_matching(
                    &narrowed(TaskFilter::new().metadata(holds), agent, status),
                    None,
                )
            }
            Store::Redis { session, .. } => {
                let mut filter = narrowed(TaskFilter::new(), agent, status);
                if let Some(metadata) = metadata {
                    filter = filter.metadata(metadata);
                }
                session.cancel_matching(&filter, None).await.unwrap()
            }
        }
    }

    async fn end(&self, task_id: &str, outcome: Result<Option<&str>, &str>) -> bool {
        match self {
            Store::Memory(tracker) => {
                tracker.end(task_id, outcome.map(|value| value.map(str::to_owned)))
            }
            Store::Redis { session, .. } => session.end(task_id, outcome).await.unwrap(),
        }
    }

    async fn cancel_before_start(&self, task_id: &str, reason: Option<&str>) -> bool {
        match self {
            Store::Memory(tracker) => tracker.cancel_before_start(task_id, reason),
            Store::Redis { session, .. } => {
                session.cancel_before_start(task_id, reason).await.unwrap()
            }
        }
    }

    async fn fail(&self, task_id: &str, failure: &TaskFailure) -> bool {
        match self {
            Store::Memory(tracker) => tracker.fail(task_id, failure.clone()),
            Store::Redis { session, .. } => session.fail(task_id, failure).await.unwrap(),
        }
    }

    async fn forget_finished(&self, older_than: Duration) -> usize {
        match self {
            Store::Memory(tracker) => tracker.forget_finished(older_than),
            Store::Redis { session, .. } => session.forget_finished(older_than).await.unwrap(),
        }
    }

    async fn token(&self, task_id: &str) -> Result<SubagentTaskToken, TrackerError> {
        match self {
            Store::Memory(tracker) => tracker.token(task_id),
            Store::Redis { session, .. } => session.token(task_id).await.map_err(refusal),
        }
    }

    async fn get(&self, task_id: &str) -> Option<SubagentTaskSnapshot<String>> {
        match self {
            Store::Memory(tracker) => tracker.get(task_id),
            Store::Redis { session, .. } => session.get(task_id).await.unwrap(),
        }
    }

    async fn listed(&self) -> Vec<Arc<str>> {
        let tasks = match self {
            Store::Memory(tracker) => tracker.tasks(),
            Store::Redis { session, .. } => session.tasks().await.unwrap(),
        };
        tasks.into_iter().map(|task| task.task_id).collect()
    }

    async fn status(&self, task_id: &str) -> Option<SubagentStatus> {
        self.get(task_id).await.map(|task| task.status)
    }
}

impl Runner {
    async fn progress(&self, message: &str, data: Option<&str>) -> bool {
        match (self, data) {
            (Runner::Memory(handle), None) => handle.progress(message),
            (Runner::Memory(handle), Some(data)) => handle.progress_with(message, data.to_owned()),
            (Runner::Redis(handle), None) => handle.progress(message).await.unwrap(),
            (Runner::Redis(handle), Some(data)) => {
                handle.progress_with(message, data).await.unwrap()
            }
        }
    }

    async fn pause(&self, reason: Option<&str>) -> bool {
        match self {
            Runner::Memory(handle) => handle.pause(reason),
            Runner::Redis(handle) => handle.pause(reason).await.unwrap(),
        }
    }

    /// How the pause ended, once it has (within the time a notification takes to reach the runner).
    async fn resumed(&self) -> Resumption<String> {
        let watch = match self {
            Runner::Memory(handle) => handle.resume_watch(),
            Runner::Redis(handle) => handle.resume_watch().unwrap(),
        };
        tokio::time::timeout(Duration::from_secs(10), watch.resumed())
            .await
            .expect("the pause ended")
    }

    fn token(&self) -> SubagentTaskToken {
        match self {
            Runner::Memory(handle) => handle.token(),
            Runner::Redis(handle) => handle.token(),
        }
    }

    fn is_cancelled(&self) -> bool {
        match self {
            Runner::Memory(handle) => handle.is_cancelled(),
            Runner::Redis(handle) => handle.is_cancelled(),
        }
    }

    async fn complete(&mut self, result: &str) -> bool {
        match self {
            Runner::Memory(handle) => handle.complete(Some(result.to_owned())),
            Runner::Redis(handle) => handle.complete(Some(result)).await.unwrap(),
        }
    }

    async fn fail(&mut self, error: &str) -> bool {
        match self {
            Runner::Memory(handle) => handle.fail(error),
            Runner::Redis(handle) => handle.fail(error).await.unwrap(),
        }
    }

    async fn fail_with(&mut self, failure: &TaskFailure) -> bool {
        match self {
            Runner::Memory(handle) => handle.fail_with(failure.clone()),
            Runner::Redis(handle) => handle.fail_with(failure).await.unwrap(),
        }
    }
}

/// Each scenario once per store: in memory and on one server, a test each; on a cluster, one test that runs
/// them all on one cluster (it takes seconds to start), each in a session of its own.
macro_rules! on_every_store {
    ($($scenario:ident($max_finished:expr);)*) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Store::memory($max_finished)).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Store::redis($max_finished).await).await;
                }
            )*
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn every_scenario_on_a_cluster() {
            let cluster = RedisCluster::start("conformance");
            $(
                $scenario(Store::on_cluster(&cluster, stringify!($scenario), $max_finished).await).await;
            )*
        }
    };
}

on_every_store! {
    an_end_and_a_cancel_racing_have_exactly_one_winner(1000);
    a_cascade_reaches_descendants_through_finished_tasks_but_not_detached_ones(1000);
    retention_evicts_the_oldest_finished_and_keeps_pending_children_reachable(2);
    a_queued_task_is_cancelled_claimed_and_ended_by_the_rules(1000);
    a_late_end_never_downgrades_a_cancel(1000);
    deadlines_cancel_a_tree_and_a_past_one_cancels_at_start(1000);
    a_failure_keeps_its_type_and_code_by_handle_and_by_id(1000);
    finished_tasks_are_forgotten_by_age_and_pending_ones_never(1000);
    a_cancel_recorded_before_the_start_cancels_the_next_start_once(1000);
    a_linked_token_reaches_only_the_run_it_was_linked_to(0);
    a_cancel_by_filter_reaches_the_matching_pending_tasks_in_start_order(1000);
    a_task_group_is_cancelled_by_a_failing_child_and_its_end_cancels_its_children(1000);
    the_progress_log_keeps_the_latest_reports_with_their_data(1000);
    a_token_by_id_fires_with_its_task_and_never_for_an_end(1000);
    a_paused_task_is_resumed_with_a_value_or_ended_by_a_cancel(1000);
    a_cancel_that_waits_ends_after_the_runner_and_the_handlers_of_the_subtree(1000);
    events_of_another_runtime_start_report_and_end_tasks_once(1000);
    a_restore_brings_finished_tasks_back_and_fails_pending_ones(1000);
    a_large_restore_refuses_a_retained_id_whole_and_keeps_start_order(1000);
    a_close_racing_a_large_restore_comes_before_it_or_after_it(10_000);
    a_large_batch_refuses_whole_and_opens_parents_of_its_later_tasks(1000);
    a_batch_whose_parent_finishes_as_it_opens_is_refused_whole(1000);
}

async fn a_restore_brings_finished_tasks_back_and_fails_pending_ones(store: Store) {
    let source: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let done = source
        .start(
            TaskStart::new()
                .task_id("done")
                .metadata("{\"user\":\"ana\"}".to_owned()),
        )
        .unwrap();
    assert!(done.progress_with("half way", "{\"n\":1}".to_owned()));
    assert!(done.complete(Some("42".to_owned())));
    let running = source.start(TaskStart::new().task_id("running")).unwrap();
    let exported = source.tasks();
    assert_eq!(store.restore(exported.clone()).await.unwrap(), 2);
    let restored = store.tasks().await;
    assert_eq!(restored.len(), 2);
    let (was_done, was_running) = (&restored[0], &restored[1]);
    assert_eq!(
        (
            was_done.status,
            &was_done.result,
            &was_done.metadata,
            was_done.progress_count
        ),
        (
            SubagentStatus::Completed,
            &exported[0].result,
            &exported[0].metadata,
            1
        )
    );
    assert_eq!(was_done.progress_log[0].data.as_deref(), Some("{\"n\":1}"));
    assert_eq!(
        (was_running.status, was_running.finished),
        (SubagentStatus::Failed, true)
    );
    assert_eq!(
        was_running.error.as_deref(),
        Some(subagent_tracker::RESTORED_WITHOUT_RUNNER_ERROR)
    );
    assert!(matches!(
        store.restore(exported).await,
        Err(TrackerError::DuplicateTask { .. })
    ));
    drop(running);
}

/// More tasks than one server call writes on Redis (`RESTORE_STEP`, 64): the refusals still come before any
/// task is written, and the tasks come back in the list's order.
async fn a_large_restore_refuses_a_retained_id_whole_and_keeps_start_order(store: Store) {
    let source: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    for index in 0..200 {
        let handle = source
            .start(TaskStart::new().task_id(format!("t{index}")))
            .unwrap();
        assert!(handle.complete(Some(index.to_string())));
    }
    let exported = source.tasks();
    let mut taken = store.start(TaskStart::new().task_id("t150")).await.unwrap();
    assert!(matches!(
        store.restore(exported.clone()).await,
        Err(TrackerError::DuplicateTask { task_id, .. }) if &*task_id == "t150"
    ));
    assert_eq!(
        store.tasks().await.len(),
        1,
        "a refused restore writes nothing"
    );
    // The first refusal in the list's order: an id it repeats before the retained one.
    let mut repeated = exported.clone();
    repeated.insert(5, exported[3].clone());
    assert!(matches!(
        store.restore(repeated).await,
        Err(TrackerError::DuplicateInBatch { task_id }) if &*task_id == "t3"
    ));
    assert!(taken.complete("\"done\"").await);
    store.forget_finished(Duration::ZERO).await;
    assert_eq!(store.restore(exported).await.unwrap(), 200);
    let restored: Vec<_> = store
        .tasks()
        .await
        .into_iter()
        .map(|task| (task.task_id.to_string(), task.result))
        .collect();
    let expected: Vec<_> = (0..200)
        .map(|index| (format!("t{index}"), Some(index.to_string())))
        .collect();
    assert_eq!(restored, expected);
}

/// A close that comes while a restore of many calls writes comes after it (the restore writes on to its end),
/// and one that comes before the restore's checks refuses it whole: a restore is never left half written by a
/// close. The closes fall at points spread over one restore's time, so that some land among its writes.
async fn a_close_racing_a_large_restore_comes_before_it_or_after_it(store: Store) {
    let source: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    for index in 0..640 {
        let handle = source
            .start(TaskStart::new().task_id(format!("t{index}")))
            .unwrap();
        assert!(handle.complete(None));
    }
    let exported = source.tasks();
    let began = std::time::Instant::now();
    assert_eq!(store.restore(exported.clone()).await.unwrap(), 640);
    let one_restore = began.elapsed();
    for attempt in 0..8u32 {
        let session = store
            .fresh(&format!("restore-racing-close-{attempt}"))
            .await;
        let (restored, ()) = tokio::join!(session.restore(exported.clone()), async {
            tokio::time::sleep(one_restore * attempt / 8).await;
            session.close().await;
        });
        let retained = session.tasks().await.len();
        match restored {
            Ok(count) => {
                assert_eq!((count, retained), (640, 640), "attempt {attempt}");
            }
            Err(TrackerError::SessionClosed { .. }) => {
                assert_eq!(
                    retained, 0,
                    "attempt {attempt}: a refused restore wrote nothing"
                );
            }
            Err(other) => panic!("attempt {attempt}: {other}"),
        }
    }
}

/// More tasks than one server call opens on Redis (`OPEN_BATCH_STEP`, 32): a refusal anywhere still refuses the
/// batch before any task opens, and a task may name a parent many tasks earlier in the batch.
async fn a_large_batch_refuses_whole_and_opens_parents_of_its_later_tasks(store: Store) {
    let batch = |live: Option<&str>| {
        let mut starts = vec![TaskStart::new().task_id("root")];
        for index in 0..100 {
            starts.push(TaskStart::new().task_id(format!("t{index}")).parent_id(
                if index % 2 == 0 {
                    "root".to_owned()
                } else {
                    format!("t{}", index - 1)
                },
            ));
        }
        if let Some(live) = live {
            starts.push(TaskStart::new().task_id(live));
        }
        starts
    };
    let _live = store.start(TaskStart::new().task_id("live")).await.unwrap();
    assert!(matches!(
        store.start_batch(batch(Some("live"))).await,
        Err(TrackerError::DuplicateTask { task_id, .. }) if &*task_id == "live"
    ));
    let mut orphaned = batch(None);
    orphaned.insert(70, TaskStart::new().task_id("lost").parent_id("nobody"));
    assert!(matches!(
        store.start_batch(orphaned).await,
        Err(TrackerError::UnknownTask { task_id, .. }) if &*task_id == "nobody"
    ));
    assert_eq!(
        store.listed().await,
        [Arc::from("live")],
        "a refused batch opens nothing"
    );
    let runners = store.start_batch(batch(None)).await.unwrap();
    assert_eq!(runners.len(), 101);
    assert_eq!(
        store.get("t99").await.unwrap().parent_id.as_deref(),
        Some("t98")
    );
    assert!(store.cancel("root", None).await);
    assert!(
        store
            .listed()
            .await
            .iter()
            .filter(|task_id| &***task_id != "live")
            .count()
            == 101
    );
    for task_id in ["t0", "t51", "t99"] {
        assert_eq!(
            store.get(task_id).await.unwrap().status,
            SubagentStatus::Cancelled
        );
    }
    drop(runners);
}

/// A reservation that begins cancelled (a cancel recorded before its start) finishes as it opens, so a later
/// task of the batch under it would find its parent finished: the batch is refused before any task opens, on
/// both stores (on Redis, also when the two are in different calls of a batch larger than one call).
async fn a_batch_whose_parent_finishes_as_it_opens_is_refused_whole(store: Store) {
    assert!(!store.cancel_before_start("early", None).await);
    let mut reservations = vec![TaskStart::new().task_id("early")];
    reservations.extend((0..40).map(|index| TaskStart::new().task_id(format!("q{index}"))));
    reservations.push(TaskStart::new().task_id("late").parent_id("early"));
    let refused = store.reserve_batch(reservations).await;
    assert!(
        matches!(refused, Err(TrackerError::ParentFinished { .. })),
        "{refused:?}"
    );
    assert!(
        store.listed().await.is_empty(),
        "a refused batch opens nothing"
    );
}

async fn events_of_another_runtime_start_report_and_end_tasks_once(store: Store) {
    let started = || RecordedEvent::Started(TaskStart::new().task_id("a").agent("coder"));
    let ended = |task_id: &str, outcome| RecordedEvent::Ended {
        task_id: Arc::from(task_id),
        outcome,
    };
    assert!(store.record_event(started()).await);
    assert!(!store.record_event(started()).await, "a repeat");
    let progress = RecordedEvent::Progress {
        task_id: Arc::from("a"),
        message: Arc::from("half way"),
        data: Some("{\"n\":1}".to_owned()),
    };
    assert!(store.record_event(progress).await);
    assert!(
        store
            .record_event(ended("a", Ok(Some("1".to_owned()))))
            .await
    );
    assert!(
        !store.record_event(ended("a", Ok(None))).await,
        "the first end wins"
    );
    assert!(
        !store.record_event(started()).await,
        "a late start never restarts a finished task"
    );
    let task = store.get("a").await.unwrap();
    assert_eq!(
        (task.status, task.progress.as_deref()),
        (SubagentStatus::Completed, Some("half way"))
    );
    assert!(
        store
            .record_event(ended("b", Err(TaskFailure::new("boom"))))
            .await
    );
    let early = store.get("b").await.unwrap();
    assert_eq!(
        (early.status, early.finished),
        (SubagentStatus::Failed, true)
    );
    assert_eq!(early.error.as_deref(), Some("boom"));
}

/// A cancel handler whose work goes on for `work` after it runs, in a thread of its own.
struct SlowCleanup(Duration, Arc<std::sync::atomic::AtomicBool>);

impl subagent_tracker::OnCancel for SlowCleanup {
    fn on_cancel(self: Box<Self>) {
        self.on_cancel_with(subagent_tracker::HandlerDone::untracked());
    }

    fn on_cancel_with(self: Box<Self>, done: subagent_tracker::HandlerDone) {
        std::thread::spawn(move || {
            std::thread::sleep(self.0);
            self.1.store(true, std::sync::atomic::Ordering::SeqCst);
            done.finish();
        });
    }
}

async fn a_cancel_that_waits_ends_after_the_runner_and_the_handlers_of_the_subtree(store: Store) {
    let mut parent = store
        .start(TaskStart::new().task_id("parent"))
        .await
        .unwrap();
    let child = store
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .await
        .unwrap();
    let cleaned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _registration = child
        .token()
        .on_cancel(SlowCleanup(Duration::from_millis(150), cleaned.clone()));
    let token = parent.token();
    let (snapshot, ()) = tokio::join!(store.cancel_and_wait("parent"), async {
        token.cancelled().await;
        assert!(!parent.complete("late").await);
    });
    assert!(
        cleaned.load(std::sync::atomic::Ordering::SeqCst),
        "the child's handler finished first"
    );
    assert_eq!(
        (snapshot.status, snapshot.finished),
        (SubagentStatus::Cancelled, true)
    );
    assert_eq!(snapshot.result.as_deref(), Some("late"));
    drop(child);
}

async fn a_paused_task_is_resumed_with_a_value_or_ended_by_a_cancel(store: Store) {
    let mut approved = store
        .start(TaskStart::new().task_id("approved"))
        .await
        .unwrap();
    assert!(!store.resume("approved", None).await, "not paused");
    assert!(approved.pause(Some("approve the plan")).await);
    assert!(!approved.pause(None).await, "paused already");
    let paused = store.get("approved").await.unwrap();
    assert_eq!(paused.status, SubagentStatus::Paused);
    assert_eq!(paused.pause_reason.as_deref(), Some("approve the plan"));
    assert!(store.resume("approved", Some("\"yes\"")).await);
    assert!(!store.resume("approved", None).await, "resumed once");
    assert_eq!(
        approved.resumed().await,
        Resumption::Resumed(Some("\"yes\"".to_owned()))
    );
    let resumed = store.get("approved").await.unwrap();
    assert_eq!(
        (resumed.status, resumed.pause_reason),
        (SubagentStatus::Running, None)
    );
    // A second pause is not ended by the first one's resume.
    assert!(approved.pause(None).await);
    assert_eq!(store.status("approved").await, Some(SubagentStatus::Paused));
    assert!(approved.complete("done").await);

    let parent = store
        .start(TaskStart::new().task_id("parent"))
        .await
        .unwrap();
    let child = store
        .start(TaskStart::new().task_id("child").parent_id("parent"))
        .await
        .unwrap();
    assert!(child.pause(Some("waiting")).await);
    assert!(store.cancel("parent", Some("stop")).await);
    assert_eq!(child.resumed().await, Resumption::Cancelled);
    assert!(
        !store.resume("child", None).await,
        "a resume never undoes a cancel"
    );
    let cancelled = store.get("child").await.unwrap();
    assert_eq!(cancelled.status, SubagentStatus::Cancelled);
    assert_eq!(cancelled.pause_reason.as_deref(), Some("waiting"));
    drop((parent, child));

    let ended = store
        .start(TaskStart::new().task_id("ended"))
        .await
        .unwrap();
    assert!(ended.pause(None).await);
    assert!(store.end("ended", Err("rejected")).await);
    assert_eq!(ended.resumed().await, Resumption::Ended);
    assert_eq!(store.status("ended").await, Some(SubagentStatus::Failed));
}

async fn an_end_and_a_cancel_racing_have_exactly_one_winner(store: Store) {
    for round in 0..20 {
        let task_id = format!("race-{round}");
        let mut runner = store
            .start(TaskStart::new().task_id(task_id.as_str()))
            .await
            .unwrap();
        let (completed, cancelled) = tokio::join!(
            runner.complete("done"),
            store.cancel(&task_id, Some("stop"))
        );
        assert!(
            completed ^ cancelled,
            "round {round}: exactly one transition wins"
        );
        let task = store.get(&task_id).await.unwrap();
        let expected = if completed {
            SubagentStatus::Completed
        } else {
            SubagentStatus::Cancelled
        };
        assert_eq!(task.status, expected, "round {round}");
        assert!(task.finished, "the runner reported its end");
    }
}

async fn a_cascade_reaches_descendants_through_finished_tasks_but_not_detached_ones(store: Store) {
    let _root = store.start(TaskStart::new().task_id("root")).await.unwrap();
    let mut middle = store
        .start(TaskStart::new().task_id("middle").parent_id("root"))
        .await
        .unwrap();
    let leaf = store
        .start(TaskStart::new().task_id("leaf").parent_id("middle"))
        .await
        .unwrap();
    let detached = store
        .start(
            TaskStart::new()
                .task_id("detached")
                .parent_id("root")
                .detached(true),
        )
        .await
        .unwrap();
    assert!(middle.complete("done").await);
    assert!(matches!(
        store
            .start(TaskStart::new().task_id("late").parent_id("middle"))
            .await,
        Err(TrackerError::ParentFinished { .. })
    ));
    assert!(store.cancel("root", Some("stop all")).await);
    let task = store.get("leaf").await.unwrap();
    assert_eq!(task.status, SubagentStatus::Cancelled);
    assert_eq!(task.cancel_cause, Some(CancelCause::Parent));
    assert_eq!(task.cancel_origin.as_deref(), Some("root"));
    assert_eq!(task.cancel_reason.as_deref(), Some("stop all"));
    assert!(eventually(|| leaf.is_cancelled()).await);
    assert_eq!(
        store.status("middle").await,
        Some(SubagentStatus::Completed)
    );
    assert_eq!(
        store.status("detached").await,
        Some(SubagentStatus::Running)
    );
    assert!(!detached.is_cancelled());
    let child = store
        .start(TaskStart::new().task_id("after").parent_id("root"))
        .await
        .unwrap();
    assert_eq!(store.status("after").await, Some(SubagentStatus::Cancelled));
    assert!(
        eventually(|| child.is_cancelled()).await,
        "a child of a cancelled parent starts cancelled"
    );
}

async fn retention_evicts_the_oldest_finished_and_keeps_pending_children_reachable(store: Store) {
    let _top = store.start(TaskStart::new().task_id("top")).await.unwrap();
    let mut parent = store
        .start(TaskStart::new().task_id("parent").parent_id("top"))
        .await
        .unwrap();
    let orphan = store
        .start(TaskStart::new().task_id("orphan").parent_id("parent"))
        .await
        .unwrap();
    assert!(parent.complete("done").await);
    for index in 0..3 {
        let mut runner = store
            .start(TaskStart::new().task_id(format!("f{index}")))
            .await
            .unwrap();
        assert!(runner.complete("done").await);
    }
    // Two finished runs are kept: the newest.
    assert_eq!(
        store.listed().await,
        ["top", "orphan", "f1", "f2"].map(Arc::from).to_vec()
    );
    assert!(
        store.get("parent").await.is_none(),
        "the parent was evicted"
    );
    assert!(store.cancel("top", None).await);
    assert_eq!(
        store.status("orphan").await,
        Some(SubagentStatus::Cancelled)
    );
    assert!(
        eventually(|| orphan.is_cancelled()).await,
        "adopted, so the cancel reached it"
    );
}

async fn a_queued_task_is_cancelled_claimed_and_ended_by_the_rules(store: Store) {
    let id = store
        .reserve(TaskStart::new().task_id("queued"), None)
        .await
        .unwrap();
    assert_eq!(store.status(&id).await, Some(SubagentStatus::Queued));
    assert!(store.cancel("queued", Some("not needed")).await);
    let cancelled = store.get("queued").await.unwrap();
    assert_eq!(cancelled.status, SubagentStatus::Cancelled);
    assert!(
        cancelled.finished,
        "no runner runs it: a cancel finishes it"
    );
    let late = store.claim("queued").await.unwrap();
    assert!(
        late.is_cancelled(),
        "a claim after a cancel gets a fired token"
    );

    store
        .reserve(TaskStart::new().task_id("work"), None)
        .await
        .unwrap();
    let mut runner = store.claim("work").await.unwrap();
    assert!(matches!(
        store.claim("work").await,
        Err(TrackerError::NotClaimable {
            problem: ClaimProblem::AlreadyClaimed,
            ..
        })
    ));
    assert_eq!(store.status("work").await, Some(SubagentStatus::Running));
    assert!(runner.fail("boom").await);

    store
        .reserve(TaskStart::new().task_id("unclaimed"), None)
        .await
        .unwrap();
    assert!(store.end("unclaimed", Ok(Some("\"made elsewhere\""))).await);
    assert!(matches!(
        store.claim("unclaimed").await,
        Err(TrackerError::NotClaimable {
            problem: ClaimProblem::Ended(SubagentStatus::Completed),
            ..
        })
    ));
    assert!(matches!(
        store.claim("nobody").await,
        Err(TrackerError::NotReserved { .. })
    ));
}

async fn a_late_end_never_downgrades_a_cancel(store: Store) {
    let mut runner = store.start(TaskStart::new().task_id("job")).await.unwrap();
    assert!(store.cancel("job", Some("stop")).await);
    assert!(
        !store.cancel("job", None).await,
        "a second cancel moves nothing"
    );
    let cancelled = store.get("job").await.unwrap();
    assert_eq!(cancelled.status, SubagentStatus::Cancelled);
    assert!(!cancelled.finished, "its runner still runs");
    assert!(!runner.complete("late").await);
    let ended = store.get("job").await.unwrap();
    assert_eq!(ended.status, SubagentStatus::Cancelled);
    assert!(ended.finished);
    assert_eq!(ended.result.as_deref(), Some("late"));
    assert!(!runner.fail("again").await, "a second end changes nothing");
    assert!(!store.end("job", Err("by id")).await);
}

async fn deadlines_cancel_a_tree_and_a_past_one_cancels_at_start(store: Store) {
    let parent = store
        .start(
            TaskStart::new()
                .task_id("bounded")
                .timeout(Duration::from_millis(150)),
        )
        .await
        .unwrap();
    let child = store
        .start(
            TaskStart::new()
                .task_id("child")
                .parent_id("bounded")
                .timeout(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let free = store
        .start(
            TaskStart::new()
                .task_id("free")
                .parent_id("bounded")
                .detached(true),
        )
        .await
        .unwrap();
    let fired = async {
        while !(parent.is_cancelled() && child.is_cancelled()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), fired)
        .await
        .expect("the parent's deadline fired on both");
    let task = store.get("child").await.unwrap();
    assert_eq!(task.status, SubagentStatus::Cancelled);
    // The child's own deadline is bounded by its parent's, so both fire at once, each as a deadline, or the
    // child as the parent's cascade: the contract leaves which reaches it first open.
    assert!(matches!(
        task.cancel_cause,
        Some(CancelCause::Deadline | CancelCause::Parent)
    ));
    assert!(
        !free.is_cancelled(),
        "a detached child keeps its own deadline"
    );

    // A second ago: Redis compares by its own clock, which may trail this one by a little.
    let a_second_ago = std::time::SystemTime::now() - Duration::from_secs(1);
    let past = store
        .start(TaskStart::new().task_id("past").deadline_at(a_second_ago))
        .await
        .unwrap();
    assert!(
        past.is_cancelled(),
        "a deadline already passed cancels at start"
    );
    let task = store.get("past").await.unwrap();
    assert_eq!(task.cancel_cause, Some(CancelCause::Deadline));
}

async fn a_failure_keeps_its_type_and_code_by_handle_and_by_id(store: Store) {
    let rate_limited = TaskFailure::new("too many requests")
        .error_type("RateLimitError")
        .error_code("429");
    let mut runner = store
        .start(TaskStart::new().task_id("by-handle"))
        .await
        .unwrap();
    assert!(runner.fail_with(&rate_limited).await);
    let _by_id = store
        .start(TaskStart::new().task_id("by-id"))
        .await
        .unwrap();
    assert!(store.fail("by-id", &rate_limited).await);
    assert!(
        !store
            .fail("by-id", &TaskFailure::new("later").error_code("other"))
            .await
    );
    let mut plain = store
        .start(TaskStart::new().task_id("plain"))
        .await
        .unwrap();
    assert!(plain.fail("boom").await);
    for task_id in ["by-handle", "by-id"] {
        let task = store.get(task_id).await.unwrap();
        assert_eq!(task.status, SubagentStatus::Failed, "{task_id}");
        assert_eq!(
            task.error.as_deref(),
            Some("too many requests"),
            "{task_id}"
        );
        assert_eq!(
            task.error_type.as_deref(),
            Some("RateLimitError"),
            "{task_id}"
        );
        assert_eq!(task.error_code.as_deref(), Some("429"), "{task_id}");
    }
    let task = store.get("plain").await.unwrap();
    assert_eq!(
        (task.error.as_deref(), task.error_type, task.error_code),
        (Some("boom"), None, None)
    );
}

async fn finished_tasks_are_forgotten_by_age_and_pending_ones_never(store: Store) {
    let mut old = store.start(TaskStart::new().task_id("old")).await.unwrap();
    assert!(old.complete("done").await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut young = store
        .start(TaskStart::new().task_id("young"))
        .await
        .unwrap();
    assert!(young.complete("done").await);
    let _pending = store
        .start(TaskStart::new().task_id("pending"))
        .await
        .unwrap();
    assert_eq!(store.forget_finished(Duration::from_millis(100)).await, 1);
    assert!(store.get("old").await.is_none());
    assert_eq!(
        store.listed().await,
        [Arc::from("young"), Arc::from("pending")]
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(store.forget_finished(Duration::ZERO).await, 1);
    assert_eq!(store.listed().await, [Arc::from("pending")]);
}

async fn a_cancel_recorded_before_the_start_cancels_the_next_start_once(store: Store) {
    assert!(
        !store
            .cancel_before_start("a", Some("user pressed stop"))
            .await
    );
    let runner = store.start(TaskStart::new().task_id("a")).await.unwrap();
    assert!(runner.is_cancelled());
    let task = store.get("a").await.unwrap();
    assert_eq!(task.status, SubagentStatus::Cancelled);
    assert_eq!(task.cancel_reason.as_deref(), Some("user pressed stop"));
    assert_eq!(task.cancel_cause, Some(CancelCause::Requested));
    assert_eq!(task.cancel_origin.as_deref(), Some("a"));
    drop(runner);
    // A pending task is cancelled at once, and nothing is left for the next start.
    let mut pending = store.start(TaskStart::new().task_id("b")).await.unwrap();
    assert!(store.cancel_before_start("b", None).await);
    assert!(eventually(|| pending.is_cancelled()).await);
    assert!(!pending.complete("late").await);
    let again = store.start(TaskStart::new().task_id("b")).await.unwrap();
    assert!(!again.is_cancelled());
    // A reservation begins cancelled and finished.
    assert!(!store.cancel_before_start("q", None).await);
    store
        .reserve(TaskStart::new().task_id("q"), None)
        .await
        .unwrap();
    let queued = store.get("q").await.unwrap();
    assert_eq!(queued.status, SubagentStatus::Cancelled);
    assert!(queued.finished);
}

/// A token's link holds a run, not an id: once the run has ended, a new run of the same id is out of its reach,
/// whether the old run was a reservation (whose link no handle removes) or a start ended by id while its runner
/// still holds its handle.
async fn a_linked_token_reaches_only_the_run_it_was_linked_to(store: Store) {
    let requests: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let first = requests.start(TaskStart::new().task_id("first")).unwrap();
    let second = requests.start(TaskStart::new().task_id("second")).unwrap();
    store
        .reserve(
            TaskStart::new().task_id("queued").linked(first.token()),
            None,
        )
        .await
        .unwrap();
    assert!(store.cancel("queued", None).await);
    store
        .reserve(TaskStart::new().task_id("queued"), None)
        .await
        .unwrap();
    let old_runner = store
        .start(TaskStart::new().task_id("running").linked(second.token()))
        .await
        .unwrap();
    assert!(store.end("running", Ok(None)).await);
    let new_runner = store
        .start(TaskStart::new().task_id("running"))
        .await
        .unwrap();
    assert!(requests.cancel("first", None));
    assert!(requests.cancel("second", None));
    // A cancel on Redis arrives a round trip later: give a wrong one time to land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.status("queued").await, Some(SubagentStatus::Queued));
    assert_eq!(store.status("running").await, Some(SubagentStatus::Running));
    assert!(!new_runner.is_cancelled());
    drop((old_runner, new_runner, first, second));
}

async fn a_cancel_by_filter_reaches_the_matching_pending_tasks_in_start_order(store: Store) {
    let _plan = store
        .start(TaskStart::new().task_id("plan").agent("planner"))
        .await
        .unwrap();
    let _helper = store
        .start(
            TaskStart::new()
                .task_id("helper")
                .parent_id("plan")
                .agent("tool"),
        )
        .await
        .unwrap();
    let _sub_plan = store
        .start(
            TaskStart::new()
                .task_id("sub-plan")
                .parent_id("helper")
                .agent("planner"),
        )
        .await
        .unwrap();
    store
        .reserve(
            TaskStart::new()
                .task_id("queued")
                .agent("tool")
                .metadata(r#"{"user":42}"#.to_owned()),
            None,
        )
        .await
        .unwrap();
    let mut done = store
        .start(TaskStart::new().task_id("done").agent("planner"))
        .await
        .unwrap();
    assert!(done.complete("\"ok\"").await);
    let _other = store
        .start(TaskStart::new().task_id("other").agent("tool"))
        .await
        .unwrap();

    assert!(store
        .cancel_matching(
            Some("tool"),
            Some(SubagentStatus::Queued),
            Some(r#"{"user":7}"#)
        )
        .await
        .is_empty());
    assert_eq!(
        store
            .cancel_matching(
                Some("tool"),
                Some(SubagentStatus::Queued),
                Some(r#"{"user":42}"#)
            )
            .await,
        [Arc::from("queued")]
    );
    assert_eq!(
        store.status("queued").await,
        Some(SubagentStatus::Cancelled)
    );
    assert!(store
        .cancel_matching(None, Some(SubagentStatus::Completed), None)
        .await
        .is_empty());
    assert_eq!(
        store.cancel_matching(Some("planner"), None, None).await,
        [Arc::from("plan"), Arc::from("sub-plan")],
        "the matching pending planners in start order, one moved by the other's cascade"
    );
    let helper = store.get("helper").await.unwrap();
    assert_eq!(helper.status, SubagentStatus::Cancelled);
    assert_eq!(helper.cancel_cause, Some(CancelCause::Parent));
    let plan = store.get("plan").await.unwrap();
    assert_eq!(plan.cancel_cause, Some(CancelCause::Requested));
    assert_eq!(
        plan.cancel_reason.as_deref(),
        Some(subagent_tracker::DEFAULT_CANCEL_REASON)
    );
    assert_eq!(store.status("done").await, Some(SubagentStatus::Completed));
    assert_eq!(store.status("other").await, Some(SubagentStatus::Running));
    assert!(store
        .cancel_matching(Some("planner"), None, None)
        .await
        .is_empty());
}

async fn a_task_group_is_cancelled_by_a_failing_child_and_its_end_cancels_its_children(
    store: Store,
) {
    let structured = |task_id: &str| TaskStart::new().task_id(task_id).structured(true);
    let under =
        |task_id: &str, parent_id: &str| TaskStart::new().task_id(task_id).parent_id(parent_id);
    // A failing child cancels its group, and so its siblings.
    let group = store.start(structured("plan")).await.unwrap();
    let mut failing = store.start(under("search", "plan")).await.unwrap();
    let sibling = store.start(under("fetch", "plan")).await.unwrap();
    let detached = store
        .start(under("audit", "plan").detached(true))
        .await
        .unwrap();
    assert!(failing.fail("rate limited").await);
    let cancelled = store.get("plan").await.unwrap();
    assert_eq!(cancelled.status, SubagentStatus::Cancelled);
    assert_eq!(cancelled.cancel_cause, Some(CancelCause::ChildFailed));
    assert_eq!(cancelled.cancel_origin.as_deref(), Some("search"));
    assert_eq!(
        cancelled.cancel_reason.as_deref(),
        Some(subagent_tracker::CHILD_FAILED_REASON)
    );
    let fetch = store.get("fetch").await.unwrap();
    assert_eq!(fetch.cancel_cause, Some(CancelCause::Parent));
    assert_eq!(fetch.cancel_origin.as_deref(), Some("search"));
    assert_eq!(store.status("audit").await, Some(SubagentStatus::Running));
    assert!(eventually(|| group.is_cancelled() && sibling.is_cancelled()).await);
    assert!(!detached.is_cancelled());
    drop((group, sibling, detached));

    // A group's end cancels its pending children and their descendants; a plain parent's does not.
    let mut ending = store.start(structured("write")).await.unwrap();
    let running = store.start(under("draft", "write")).await.unwrap();
    let grandchild = store.start(under("cite", "draft")).await.unwrap();
    store.reserve(under("queued", "write"), None).await.unwrap();
    let mut plain = store
        .start(TaskStart::new().task_id("plain"))
        .await
        .unwrap();
    let kept = store.start(under("kept", "plain")).await.unwrap();
    assert!(ending.complete("\"done\"").await);
    assert!(plain.complete("\"done\"").await);
    for task_id in ["draft", "cite", "queued"] {
        let task = store.get(task_id).await.unwrap();
        assert_eq!(task.status, SubagentStatus::Cancelled, "{task_id}");
        assert_eq!(task.cancel_cause, Some(CancelCause::Parent), "{task_id}");
        assert_eq!(task.cancel_origin.as_deref(), Some("write"), "{task_id}");
        assert_eq!(
            task.cancel_reason.as_deref(),
            Some(subagent_tracker::GROUP_ENDED_REASON)
        );
    }
    assert_eq!(store.status("write").await, Some(SubagentStatus::Completed));
    assert_eq!(store.status("kept").await, Some(SubagentStatus::Running));
    assert!(eventually(|| running.is_cancelled() && grandchild.is_cancelled()).await);
    assert!(!kept.is_cancelled());
    drop((running, grandchild, kept));
}

async fn the_progress_log_keeps_the_latest_reports_with_their_data(store: Store) {
    let mut runner = store.start(TaskStart::new().task_id("job")).await.unwrap();
    let size = subagent_tracker::DEFAULT_PROGRESS_LOG_SIZE;
    for step in 0..size + 4 {
        let data = format!(r#"{{"step":{step}}}"#);
        let data = (step % 2 == 0).then_some(data.as_str());
        assert!(runner.progress(&format!("step {step}"), data).await);
    }
    let logged = |snapshot: &SubagentTaskSnapshot<String>| -> Vec<(String, Option<String>)> {
        snapshot
            .progress_log
            .iter()
            .map(|entry| (entry.message.to_string(), entry.data.clone()))
            .collect()
    };
    let expected: Vec<(String, Option<String>)> = (4..size + 4)
        .map(|step| {
            (
                format!("step {step}"),
                (step % 2 == 0).then(|| format!(r#"{{"step":{step}}}"#)),
            )
        })
        .collect();
    let running = store.get("job").await.unwrap();
    assert_eq!(logged(&running), expected);
    assert_eq!(running.progress_count, (size + 4) as u64);
    assert!(running
        .progress_log
        .windows(2)
        .all(|pair| pair[0].at <= pair[1].at));
    assert!(runner.complete("\"ok\"").await);
    assert!(!runner.progress("late", None).await);
    assert_eq!(logged(&store.get("job").await.unwrap()), expected);
}

async fn a_token_by_id_fires_with_its_task_and_never_for_an_end(store: Store) {
    assert!(matches!(
        store.token("nobody").await,
        Err(TrackerError::UnknownTask { .. })
    ));
    let _running = store
        .start(TaskStart::new().task_id("running"))
        .await
        .unwrap();
    store
        .reserve(TaskStart::new().task_id("queued"), None)
        .await
        .unwrap();
    let mut done = store.start(TaskStart::new().task_id("done")).await.unwrap();
    let running = store.token("running").await.unwrap();
    let queued = store.token("queued").await.unwrap();
    let ending = store.token("done").await.unwrap();
    assert!(!running.is_cancelled() && !queued.is_cancelled() && !ending.is_cancelled());
    assert_eq!(running.task_id().map(|id| &**id), Some("running"));
    assert!(store.cancel("running", Some("user pressed stop")).await);
    assert!(store.cancel("queued", None).await);
    assert!(done.complete("\"ok\"").await);
    assert!(eventually(|| running.is_cancelled() && queued.is_cancelled()).await);
    assert_eq!(running.reason().as_deref(), Some("user pressed stop"));
    // A token asked for after the end is in the final state at once.
    let cancelled = store.token("queued").await.unwrap();
    assert!(cancelled.is_cancelled());
    let completed = store.token("done").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!ending.is_cancelled() && !completed.is_cancelled());
}
