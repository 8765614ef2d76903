//! A cancel that waits until its work is done (contract §3, cancel and wait): the task's runner has ended, and
//! every cancel handler of the task and of its descendants has finished its work, sync or async.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::token::handlers::Handlers;
use crate::tracker::entry::TaskEntry;
use crate::{SubagentTaskSnapshot, TaskWatch};

/// What [`InMemorySubagentTaskTracker::cancel_and_watch`](crate::InMemorySubagentTaskTracker::cancel_and_watch)
/// made: whether the cancel moved the task, a watch on its run, and the handlers of its subtree to wait for.
pub struct CancelWait<V> {
    moved: bool,
    watch: TaskWatch<V>,
    /// The task and its unfinished descendants when the cancel was made, each with its handlers' count.
    handlers: Vec<(Arc<str>, Arc<Handlers>)>,
}

impl<V: Clone> CancelWait<V> {
    pub(crate) fn new(moved: bool, watch: TaskWatch<V>, subtree: &[Arc<TaskEntry<V>>]) -> Self {
        CancelWait {
            moved,
            watch,
            handlers: subtree
                .iter()
                .map(|entry| (entry.task_id.clone(), entry.signal.handlers()))
                .collect(),
        }
    }

    /// True when the cancel moved the task to `Cancelled` (false when it was cancelled or finished before).
    #[must_use]
    pub fn moved(&self) -> bool {
        self.moved
    }

    /// The watch on the cancelled run: its end, and its final snapshot.
    #[must_use]
    pub fn watch(&self) -> &TaskWatch<V> {
        &self.watch
    }

    /// The ids of the tasks of the subtree whose cancel handlers are still at work, in the order of the walk
    /// (the task first): for the message of a wait that timed out.
    #[must_use]
    pub fn handlers_at_work(&self) -> Vec<Arc<str>> {
        self.handlers
            .iter()
            .filter(|(_, handlers)| handlers.running() > 0)
            .map(|(task_id, _)| task_id.clone())
            .collect()
    }

    /// A future that is ready once no cancel handler of the subtree is at work.
    pub fn wait_for_handlers(&self) -> WaitForHandlers {
        WaitForHandlers::of(self.handlers.iter().map(|(_, handlers)| handlers.clone()))
    }

    /// Waits until the runner has ended and no cancel handler of the subtree is at work, and returns the
    /// task's final snapshot.
    pub async fn finished(&self) -> SubagentTaskSnapshot<V> {
        self.watch.wait_finished().await;
        self.wait_for_handlers().await;
        self.watch.snapshot()
    }
}

/// The future of [`CancelWait::wait_for_handlers`]: ready once no cancel handler of the subtree is at work.
/// Dropping it takes its registrations back.
#[must_use = "futures do nothing unless polled"]
pub struct WaitForHandlers {
    /// Each count, with this waiter's registration on it (`Unpin`: no pinning needed).
    handlers: Vec<(Arc<Handlers>, Option<u64>)>,
}

impl WaitForHandlers {
    pub(crate) fn of(handlers: impl IntoIterator<Item = Arc<Handlers>>) -> WaitForHandlers {
        WaitForHandlers {
            handlers: handlers
                .into_iter()
                .map(|handlers| (handlers, None))
                .collect(),
        }
    }

    /// Polls for the handlers without pinning.
    pub fn poll_handlers(&mut self, context: &mut Context<'_>) -> Poll<()> {
        for (handlers, key) in &mut self.handlers {
            if handlers.poll_idle(context, key).is_pending() {
                return Poll::Pending;
            }
        }
        Poll::Ready(())
    }
}

impl Future for WaitForHandlers {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        self.poll_handlers(context)
    }
}

impl Drop for WaitForHandlers {
    fn drop(&mut self) {
        for (handlers, key) in &mut self.handlers {
            if let Some(key) = key.take() {
                handlers.remove_waiter(key);
            }
        }
    }
}

/// The message of a cancel-and-wait that timed out (contract §3, cancel and wait), naming what still runs: the
/// task's runner, if it has not ended, and the tasks whose cancel handlers are at work. `None` when nothing
/// runs any more (the work ended as the time ran out). The same for every store.
#[must_use]
pub fn cancel_wait_timeout_message(
    task_id: &str,
    timeout: std::time::Duration,
    runner_running: bool,
    handlers_at_work: &[Arc<str>],
) -> Option<String> {
    let mut running = Vec::new();
    if runner_running {
        running.push("its runner".to_owned());
    }
    if !handlers_at_work.is_empty() {
        let quoted: Vec<String> = handlers_at_work
            .iter()
            .map(|id| format!("{id:?}"))
            .collect();
        running.push(format!("the cancel handlers of {}", quoted.join(", ")));
    }
    (!running.is_empty()).then(|| {
        format!(
            "task {task_id:?} was cancelled but did not stop within {} seconds: {} still running",
            timeout.as_secs_f64(),
            running.join(" and ")
        )
    })
}
