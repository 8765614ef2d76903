//! A runner's handle shared by several callers, each call taking its lock, and a batch of ends over such handles.

use std::future::Future;
use std::sync::Arc;

use subagent_tracker::{check_batch_ends, EndTarget, TaskEnd, TrackerError};
use tokio::sync::{Mutex, MutexGuard, TryLockError};

use crate::{RedisSession, RedisTaskHandle, RedisTrackerError};

/// A [`RedisTaskHandle`] that several callers share (a binding's handle object, or tasks of one program): each
/// call locks it, so that one end at a time is reported through it. Its task's id is read without the lock.
#[derive(Clone)]
pub struct SharedTaskHandle {
    task_id: Arc<str>,
    handle: Arc<Mutex<RedisTaskHandle>>,
}

impl SharedTaskHandle {
    /// Shares `handle`.
    pub fn new(handle: RedisTaskHandle) -> SharedTaskHandle {
        SharedTaskHandle {
            task_id: Arc::from(handle.task_id()),
            handle: Arc::new(Mutex::new(handle)),
        }
    }

    /// The id of the handle's task.
    pub fn task_id(&self) -> &Arc<str> {
        &self.task_id
    }

    /// Waits for the handle's lock.
    pub async fn lock(&self) -> MutexGuard<'_, RedisTaskHandle> {
        self.handle.lock().await
    }

    /// The handle's lock, unless a call holds it.
    ///
    /// # Errors
    /// [`TryLockError`] while a call holds it.
    pub fn try_lock(&self) -> Result<MutexGuard<'_, RedisTaskHandle>, TryLockError> {
        self.handle.try_lock()
    }
}

impl RedisSession {
    /// [`end_batch`](Self::end_batch) over shared handles. The batch is checked at once, with no handle locked
    /// (each handle's session is checked by `end_batch`, once locked): a handle named twice would wait for
    /// itself. The future locks each handle in the order of its address, the same for every batch, so that
    /// batches sharing handles never wait for each other in a circle, then ends the batch.
    ///
    /// # Errors
    /// [`TrackerError::InvalidId`] and [`TrackerError::DuplicateInBatch`] at once; the future's, as
    /// [`end_batch`](Self::end_batch)'s.
    pub fn end_batch_shared(
        &self,
        ends: Vec<(EndTarget<SharedTaskHandle>, TaskEnd<String>)>,
    ) -> Result<
        impl Future<Output = Result<Vec<bool>, RedisTrackerError>> + Send + 'static,
        TrackerError,
    > {
        check_batch_ends(
            self.session_id(),
            &ends,
            |_| true,
            |handle| handle.task_id.clone(),
        )?;
        let session = self.clone();
        Ok(async move {
            let (targets, ends): (Vec<_>, Vec<_>) = ends.into_iter().unzip();
            let mut order: Vec<usize> = (0..targets.len()).collect();
            order.sort_by_key(|&index| match &targets[index] {
                EndTarget::Handle(handle) => Arc::as_ptr(&handle.handle).addr(),
                EndTarget::TaskId(_) => 0,
            });
            let mut guards: Vec<Option<MutexGuard<'_, RedisTaskHandle>>> =
                targets.iter().map(|_| None).collect();
            for index in order {
                if let EndTarget::Handle(handle) = &targets[index] {
                    guards[index] = Some(handle.lock().await);
                }
            }
            let batch = targets
                .iter()
                .zip(guards.iter_mut())
                .zip(ends)
                .map(|((target, guard), end)| {
                    let target = match target {
                        EndTarget::TaskId(task_id) => EndTarget::TaskId(task_id.clone()),
                        EndTarget::Handle(_) => EndTarget::Handle(
                            &mut **guard.as_mut().expect("every handle of the batch is locked"),
                        ),
                    };
                    (target, end)
                })
                .collect();
            session.end_batch(batch).await
        })
    }
}
