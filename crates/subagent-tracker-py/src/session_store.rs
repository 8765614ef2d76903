//! The seam between the Python classes and the stores: [`SessionStore`] is every operation a session class asks of
//! its store, and [`HandleStore`] every operation a runner's handle asks, in the shape Python sees them.
//! `session_methods!` and `handle_methods!` declare each method once, for every class, over these traits; the
//! in-memory store (`memory_calls`) and the Redis store (`redis_calls`) implement them, and a third store would
//! implement them without touching the classes or the compositions above them (`waits`).
//!
//! A method reads no Python argument: the classes have read them into core types already. It gives the call's
//! outcome as a Python object, or, where the store must go over the network, as what its family of classes hands
//! back instead (an awaitable, for the asyncio classes).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;
use subagent_tracker::{
    EndTarget, RecordedEvent, SubagentTaskSnapshot, TaskEnd, TaskFailure, TaskStart,
};

use crate::arguments::{Id, TaskIdArgument};
use crate::event_arguments::StoredValue;
use crate::filter_arguments::FilterArguments;
use crate::runner_exit::RunnerExit;
use crate::runtime::MadeIn;
use crate::snapshot::SubagentTask;
use crate::token::CancellationToken;

/// What a call gives Python: its outcome, or (from a family of classes that does not block) an awaitable of it.
pub(crate) type Answer<'py> = PyResult<Bound<'py, PyAny>>;

/// The ends of a batch, each naming its task by a handle or an id.
pub(crate) type BatchEnds<H, V> = Vec<(EndTarget<H>, TaskEnd<V>)>;

/// One session of a store, as the session classes call it.
pub(crate) trait SessionStore: 'static {
    /// How the store keeps metadata, results and resume values: the Python objects themselves in memory, JSON
    /// text in Redis.
    type Value: StoredValue + Send + 'static;
    /// How a batch of ends names a runner's handle.
    type BatchHandle;
    /// What the store's waits fail with, turned into a Python exception by [`error`](Self::error).
    type Error: Send + 'static;
    /// A cancel whose work the composition waits for.
    type CancelWork: CancelWork<Value = Self::Value, Error = Self::Error>;
    /// Whether the store's waits are woken in this process, by the transitions themselves (memory), so that
    /// they are polled on the loop that awaits them; otherwise (Redis) they run on the runtime.
    const WAITS_ON_THE_LOOP: bool;

    fn session_id(&self) -> &str;

    /// True when `other` is this very session (the same incarnation, for Redis).
    fn same_session(&self, other: &Self) -> bool;

    /// How many finished tasks the session keeps; fixed for its life, so never a round trip.
    fn max_finished_tasks(&self) -> usize;

    /// Starts a task; gives the runner's handle, which keeps `session` (the calling Python object) alive.
    fn start<'py>(&self, session: &Bound<'py, PyAny>, start: TaskStart<Self::Value>)
        -> Answer<'py>;

    /// Starts every task or none; gives their handles in order.
    fn start_batch<'py>(
        &self,
        session: &Bound<'py, PyAny>,
        starts: Vec<TaskStart<Self::Value>>,
    ) -> Answer<'py>;

    /// Reserves a task for a runner to claim; gives its id.
    fn reserve<'py>(
        &self,
        py: Python<'py>,
        start: TaskStart<Self::Value>,
        claim_timeout: Option<Duration>,
    ) -> Answer<'py>;

    /// Reserves every task or none; gives their ids in order.
    fn reserve_batch<'py>(
        &self,
        py: Python<'py>,
        reservations: Vec<(TaskStart<Self::Value>, Option<Duration>)>,
    ) -> Answer<'py>;

    /// Claims a reserved task; gives the runner's handle, which keeps `session` alive.
    fn claim<'py>(&self, session: &Bound<'py, PyAny>, task_id: Id<TaskIdArgument>) -> Answer<'py>;

    /// Cancels a pending task and its pending descendants (or records the cancel, `before_start`); gives
    /// whether it moved the task.
    fn cancel_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        reason: Option<String>,
        before_start: bool,
    ) -> Answer<'py>;

    /// Restores exported tasks, all or none; gives how many.
    fn restore<'py>(
        &self,
        py: Python<'py>,
        snapshots: Vec<SubagentTaskSnapshot<Self::Value>>,
    ) -> Answer<'py>;

    /// Records one event of another runtime's stream (`None`: a kind the session ignores); gives whether it
    /// changed the session.
    fn record_event<'py>(
        &self,
        py: Python<'py>,
        event: Option<RecordedEvent<Self::Value>>,
    ) -> Answer<'py>;

    /// Resumes a paused task with `value`; gives whether this call resumed it.
    fn resume_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        value: Option<Self::Value>,
    ) -> Answer<'py>;

    /// Ends a task without its handle; gives whether this call moved it out of running.
    fn end_task<'py>(
        &self,
        py: Python<'py>,
        task_id: Id<TaskIdArgument>,
        ended: Result<Option<Self::Value>, TaskFailure>,
    ) -> Answer<'py>;

    /// Ends the tasks of a batch, in order and each on its own; gives per end whether it moved its task.
    fn end_batch<'py>(
        &self,
        py: Python<'py>,
        ends: BatchEnds<Self::BatchHandle, Self::Value>,
    ) -> Answer<'py>;

    /// Cancels the pending tasks that match the filters; gives the ids it moved, in start order.
    fn cancel_matching<'py>(
        &self,
        py: Python<'py>,
        arguments: &FilterArguments<'py>,
    ) -> Answer<'py>;

    /// Cancels every pending task; gives how many moved.
    fn cancel_all<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py>;

    /// Cancels every pending task and refuses new starts; gives how many moved.
    fn close<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py>;

    fn is_closed<'py>(&self, py: Python<'py>) -> Answer<'py>;

    /// The token of a retained task; `UnknownTaskError` for one not retained.
    fn token<'py>(&self, py: Python<'py>, task_id: Id<TaskIdArgument>) -> Answer<'py>;

    /// A snapshot of one retained task, or None.
    fn task<'py>(&self, py: Python<'py>, task_id: Id<TaskIdArgument>) -> Answer<'py>;

    /// Snapshots of every retained task.
    fn tasks<'py>(&self, py: Python<'py>) -> Answer<'py>;

    /// One page of the retained (or pending) tasks, and the next page's cursor.
    fn tasks_page<'py>(
        &self,
        py: Python<'py>,
        pending: bool,
        cursor: Option<String>,
        limit: usize,
    ) -> Answer<'py>;

    /// Forgets the finished tasks that ended `older_than` ago or more; gives how many.
    fn forget_finished<'py>(&self, py: Python<'py>, older_than: Duration) -> Answer<'py>;

    /// Snapshots of the pending tasks.
    fn pending<'py>(&self, py: Python<'py>) -> Answer<'py>;

    /// Every retained task as a record of JSON's types (`snapshot_record::records`), for `restore_snapshots`.
    fn export<'py>(&self, py: Python<'py>) -> Answer<'py>;

    /// The process whose runtime the store's waits run on.
    fn made_in(&self) -> MadeIn;

    /// The task's end: a future of its final snapshot once its runner has stopped. Called on the thread that
    /// awaits; the future runs on the runtime.
    fn finished(
        &self,
        py: Python<'_>,
        task_id: Arc<str>,
    ) -> PyResult<
        impl Future<Output = Result<SubagentTaskSnapshot<Self::Value>, Self::Error>> + Send + 'static,
    >;

    /// Cancels the task as [`cancel_task`](Self::cancel_task) does (or starts to) and gives the work to wait
    /// for. Called on the thread that awaits, so that the handlers a cancel in memory runs run there.
    fn cancel_work(
        &self,
        py: Python<'_>,
        task_id: Arc<str>,
        reason: Option<String>,
    ) -> PyResult<Self::CancelWork>;

    fn snapshot_object(
        py: Python<'_>,
        snapshot: SubagentTaskSnapshot<Self::Value>,
    ) -> PyResult<SubagentTask>;

    fn error(py: Python<'_>, error: Self::Error) -> PyErr;
}

/// A cancel's work (contract §3, cancel and wait): the runner's end, and the cancel handlers of the task and of
/// its descendants.
pub(crate) trait CancelWork: Send + Sync + 'static {
    type Value;
    type Error;

    /// Ready once the work is done, with the task's final snapshot.
    fn done(
        &self,
    ) -> impl Future<Output = Result<SubagentTaskSnapshot<Self::Value>, Self::Error>> + Send + '_;

    /// What still runs: whether the runner does, and the tasks whose cancel handlers are at work.
    fn still_running(
        &self,
    ) -> impl Future<Output = Result<(bool, Vec<Arc<str>>), Self::Error>> + Send + '_;
}

/// One runner's handle of a store, as the handle classes call it (`handle_methods!`).
pub(crate) trait HandleStore {
    /// How the store keeps results and progress data.
    type Value: StoredValue;

    fn task_id(&self) -> &str;

    fn session_id(&self) -> &str;

    /// The task's token: the same object every time.
    fn token(&self, py: Python<'_>) -> PyResult<Py<CancellationToken>>;

    /// Records a progress milestone; gives whether it was recorded (not once the task has finished).
    fn progress<'py>(
        &self,
        py: Python<'py>,
        message: &str,
        data: Option<Self::Value>,
    ) -> Answer<'py>;

    /// Reports the runner's end (`result` for a completion); gives whether this call ended the task.
    fn end<'py>(
        &self,
        py: Python<'py>,
        ending: RunnerExit,
        result: Option<Self::Value>,
    ) -> Answer<'py>;

    /// Reports the end of an `async with` block; gives an awaitable of `False`, so that its exception
    /// propagates.
    fn end_async_block<'py>(&self, py: Python<'py>, ending: RunnerExit) -> Answer<'py>;

    /// Pauses the running task; gives whether it did.
    fn pause<'py>(&self, py: Python<'py>, reason: Option<String>) -> Answer<'py>;

    /// A future of the running loop that completes once the task is no longer paused; `None` if it is not.
    fn resume_future(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>>;

    /// Blocks until the task is no longer paused; false if `timeout` passed first.
    fn wait_for_resume(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<bool>;

    /// Once the pause is over, the value the task was resumed with (None for a task ended meanwhile: the
    /// runner's own end will change nothing); `TaskCancelledError` for a task cancelled while paused.
    fn resumed_value(&self, py: Python<'_>) -> PyResult<Py<PyAny>>;

    /// Records that the runner was stopped by force after its grace period.
    fn record_escalation<'py>(&self, py: Python<'py>) -> Answer<'py>;

    /// A snapshot of the task's run now.
    fn snapshot<'py>(&self, py: Python<'py>) -> Answer<'py>;

    /// Shows the garbage collector the Python objects the handle holds.
    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError>;
}
