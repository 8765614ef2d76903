//! Starting, reserving and claiming a task in Redis: the calls that hand this process a runner's handle.

use std::sync::Arc;
use std::time::Duration;

use subagent_tracker::{validate_task_id, SubagentStatus, TaskStart, TrackerError};

use super::opening::OpenedRun;
use super::RedisSession;
use crate::worker::{RunKey, SessionCall, Worker};
use crate::{RedisTaskHandle, RedisTrackerError};

/// The reason a local mirror run ends with when Redis says its run is over and a new one takes its id.
const SUPERSEDED: &str = "superseded by a new run of the task in Redis";

impl RedisSession {
    /// Starts a task run by this process and returns the runner's handle (section 5 of the contract, across
    /// processes).
    ///
    /// # Errors
    /// The in-memory tracker's refusals as [`RedisTrackerError::Tracker`]; [`RedisTrackerError::Unavailable`].
    pub async fn start(
        &self,
        start: TaskStart<String>,
    ) -> Result<RedisTaskHandle, RedisTrackerError> {
        let (task_id, opened, links, call) = self.open(start, None, true).await?;
        let mut handle = self.hold(task_id, opened).await?;
        handle.keep_links(links);
        call.settle();
        Ok(handle)
    }

    /// Reserves a task for a runner in any process to claim (section 18), and returns its id. A reservation
    /// not claimed within `claim_timeout` fails.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn reserve(
        &self,
        start: TaskStart<String>,
        claim_timeout: Option<Duration>,
    ) -> Result<Arc<str>, RedisTrackerError> {
        // The links of a reservation stay until their token fires or ends: no handle here owns them.
        let (task_id, _, _links, call) = self.open(start, Some(claim_timeout), false).await?;
        call.settle();
        Ok(task_id)
    }

    /// Starts many tasks run by this process, and returns their handles in the batch's order: all of them or
    /// none (contract §22). A task may name as parent one earlier in the batch. Up to [`OPEN_BATCH_STEP`] tasks
    /// are one call; a larger batch is checked whole, then opened a part at a time.
    ///
    /// # Errors
    /// As [`start`](Self::start) for the first task refused, and [`TrackerError::DuplicateInBatch`]: each
    /// refuses the whole batch, and nothing changes in Redis, unless something changed between the check and
    /// the last part: the tasks the batch had opened are then cancelled with [`BATCH_REFUSED_REASON`] and
    /// finished.
    ///
    /// [`OPEN_BATCH_STEP`]: crate::OPEN_BATCH_STEP
    /// [`BATCH_REFUSED_REASON`]: subagent_tracker::BATCH_REFUSED_REASON
    pub async fn start_batch(
        &self,
        starts: Vec<TaskStart<String>>,
    ) -> Result<Vec<RedisTaskHandle>, RedisTrackerError> {
        let batch = starts.into_iter().map(|start| (start, None)).collect();
        let (opened, calls) = self.open_batch(batch).await?;
        let mut handles = Vec::with_capacity(opened.len());
        for (task_id, opened, links) in opened {
            let mut handle = self.hold(task_id, opened).await?;
            handle.keep_links(links);
            handles.push(handle);
        }
        calls.into_iter().for_each(SessionCall::settle);
        Ok(handles)
    }

    /// Reserves many tasks in one round trip, each with its claim timeout, and returns their ids in the
    /// batch's order: all of them or none, as [`start_batch`](Self::start_batch).
    ///
    /// # Errors
    /// As [`start_batch`](Self::start_batch).
    pub async fn reserve_batch(
        &self,
        reservations: Vec<(TaskStart<String>, Option<Duration>)>,
    ) -> Result<Vec<Arc<str>>, RedisTrackerError> {
        let batch = reservations
            .into_iter()
            .map(|(start, claim_timeout)| (start, Some(claim_timeout)))
            .collect();
        let (opened, calls) = self.open_batch(batch).await?;
        calls.into_iter().for_each(SessionCall::settle);
        Ok(opened.into_iter().map(|(task_id, _, _)| task_id).collect())
    }

    /// Claims a reserved task for a runner in this process (section 18).
    ///
    /// # Errors
    /// [`TrackerError::NotReserved`] and [`TrackerError::NotClaimable`] as
    /// [`RedisTrackerError::Tracker`]; [`RedisTrackerError::Unavailable`].
    pub async fn claim(&self, task_id: &str) -> Result<RedisTaskHandle, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        let task_id: Arc<str> = Arc::from(task_id);
        let call = self
            .worker
            .begin_call(&self.session_id, &task_id, false)
            .await?;
        let args = [&*self.incarnation, &*task_id, &self.worker.process];
        let reply: Vec<String> = match self.call("claim", &args).await {
            Ok(reply) => reply,
            Err(error) => {
                let error = self.refusal(error, &task_id, None);
                if matches!(error, RedisTrackerError::Tracker(_)) {
                    call.settle();
                }
                return Err(error);
            }
        };
        let reply: [String; 6] = reply
            .try_into()
            .map_err(|_| RedisTrackerError::Protocol(Arc::from("stv2_claim")))?;
        let handle = self.hold(task_id, OpenedRun::from_reply(reply)).await?;
        call.settle();
        Ok(handle)
    }

    /// Mirrors a run this process now executes, and returns its handle.
    pub(super) async fn hold(
        &self,
        task_id: Arc<str>,
        opened: OpenedRun,
    ) -> Result<RedisTaskHandle, RedisTrackerError> {
        let OpenedRun {
            run,
            status,
            cancel,
        } = opened;
        let mirror = &self.mirror.tracker;
        let local = match mirror.start(TaskStart::new().task_id(task_id.clone())) {
            Err(TrackerError::DuplicateTask { .. }) => {
                // An earlier run of this id ended in Redis while its runner here still runs.
                mirror.end(&task_id, Err(SUPERSEDED));
                mirror.start(TaskStart::new().task_id(task_id.clone()))?
            }
            started => started?,
        };
        let key = RunKey {
            session_id: self.session_id.clone(),
            task_id: task_id.clone(),
            run,
        };
        let announced = self.worker.hold(key.clone());
        // Made before any further wait: should the caller stop waiting, dropping the handle ends the run.
        let handle = RedisTaskHandle::new(self.clone(), key.clone(), local);
        if let Some(cancel) = cancel {
            // Cancelled before this run began here (under a cancelled parent, by its deadline, before its
            // claim): the reply said how, so the token fires before the runner gets it, whatever Redis does next.
            Worker::apply_cancel_from_reply(&self.worker, &key, cancel);
        } else if announced || status == SubagentStatus::Cancelled.as_str() {
            // Cancelled just after its start, with the notification first, or by a link that had fired: the
            // reconcile reads the cancel's reason, origin and cause, and fires the token before the runner gets
            // it. Should Redis fail now, the periodic reconcile fires it instead: the run exists, so its handle
            // must reach the runner.
            let _ = self.worker.reconcile(vec![key]).await;
        }
        Ok(handle)
    }
}
