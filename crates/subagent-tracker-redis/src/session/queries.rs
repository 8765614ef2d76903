//! Reading a session kept in Redis: one task, every task, pages of them, and the event stream.

use std::sync::Arc;

use subagent_tracker::{validate_task_id, SubagentTaskSnapshot, TrackerError};

use super::RedisSession;
use crate::store::TaskFields;
use crate::{RedisEventSubscription, RedisTrackerError};

/// The most tasks one page of a listing reads (`stv2_list`): a page's call stays short.
pub const MAX_PAGE: usize = 100;

impl RedisSession {
    /// A snapshot of the retained task `task_id`, or `None`. One round trip.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn get(
        &self,
        task_id: &str,
    ) -> Result<Option<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.read(task_id, None, false).await
    }

    /// A snapshot of run `run` of task `task_id`, or `None` once that run is not retained: evicted, or
    /// replaced by a later run of the id. A handle reads its own run this way, never a successor's.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn get_run(
        &self,
        task_id: &str,
        run: &str,
    ) -> Result<Option<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.read(task_id, Some(run), true).await
    }

    /// The retained task `task_id` (only if its current run is `run`, when given). A task older than the
    /// session's `max_finished_age` is shown only to a reader that follows that task (its handle, a wait): no
    /// query shows one, as in memory, where those readers hold the run itself.
    pub(super) async fn read(
        &self,
        task_id: &str,
        run: Option<&str>,
        include_aged: bool,
    ) -> Result<Option<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        validate_task_id("task_id", task_id)?;
        let include_aged = if include_aged { "1" } else { "" };
        let fields: Vec<String> = self
            .transition("get", &[&self.incarnation, task_id, include_aged])
            .await?;
        TaskFields::from_flat(fields)
            .filter(|fields| run.is_none_or(|run| fields.is_run(run)))
            .map(|fields| fields.snapshot(&self.session_id))
            .transpose()
    }

    /// Snapshots of every retained task, in start order, read page by page (contract §6: no call holds the
    /// server long, whatever the size of the session): each task as it was at some moment while the listing
    /// paged; a task started or finished meanwhile may or may not be listed.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn tasks(&self) -> Result<Vec<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.list(false).await
    }

    /// Snapshots of the pending tasks, in start order, read page by page as [`tasks`](Self::tasks) is.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn pending(&self) -> Result<Vec<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        self.list(true).await
    }

    /// One page of the session's retained tasks (or, with `pending`, of its pending tasks), from `cursor` (`None`
    /// for the first page), at most `limit` of them read, and at most [`MAX_PAGE`]: the tasks, and the cursor of
    /// the next page (`None` once the listing is done). Unfinished tasks come in start order, then (for a listing
    /// of every retained task) the finished ones in the order they finished. A task that finishes while the
    /// listing pages may come twice (keep its last), and one started meanwhile may or may not come.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`]; [`TrackerError::SessionClosed`] once the incarnation has ended.
    pub async fn tasks_page(
        &self,
        pending: bool,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<SubagentTaskSnapshot<String>>, Option<String>), RedisTrackerError> {
        let cursor = cursor.unwrap_or("");
        // A cursor as `stv2_list` gives them: "<run>" for pending tasks, "l<run>" or "f<position>" for every one.
        let digits =
            |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
        let valid = cursor.is_empty()
            || if pending {
                digits(cursor)
            } else {
                cursor
                    .strip_prefix('l')
                    .or_else(|| cursor.strip_prefix('f'))
                    .is_some_and(digits)
            };
        if !valid {
            return Err(TrackerError::InvalidCursor {
                cursor: Arc::from(cursor),
            }
            .into());
        }
        let (page, next) = self.page(pending, cursor, limit).await?;
        let tasks = page
            .into_iter()
            .map(|fields| fields.snapshot(&self.session_id))
            .collect::<Result<_, _>>()?;
        Ok((tasks, next))
    }

    pub(super) async fn page(
        &self,
        pending: bool,
        cursor: &str,
        limit: usize,
    ) -> Result<(Vec<TaskFields>, Option<String>), RedisTrackerError> {
        let limit = limit.clamp(1, MAX_PAGE).to_string();
        let which = if pending { "pending" } else { "all" };
        let mut listed: Vec<redis::Value> = self
            .transition("list", &[&self.incarnation, which, cursor, &limit])
            .await?;
        if listed.is_empty() {
            return Err(RedisTrackerError::Protocol(Arc::from("stv2_list")));
        }
        let protocol = |_| RedisTrackerError::Protocol(Arc::from("stv2_list"));
        let tasks = listed.split_off(1);
        let next: String = redis::from_redis_value(listed.swap_remove(0)).map_err(protocol)?;
        let tasks = tasks
            .into_iter()
            .map(redis::from_redis_value::<Vec<String>>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(protocol)?
            .into_iter()
            .filter_map(TaskFields::from_flat)
            .collect();
        Ok((tasks, (!next.is_empty()).then_some(next)))
    }

    /// Every page of a listing, each task's last snapshot, in start order.
    pub(super) async fn list(
        &self,
        pending: bool,
    ) -> Result<Vec<SubagentTaskSnapshot<String>>, RedisTrackerError> {
        let mut by_id: std::collections::HashMap<String, (u64, TaskFields)> =
            std::collections::HashMap::new();
        let mut cursor = String::new();
        loop {
            let (page, next) = self.page(pending, &cursor, MAX_PAGE).await?;
            for fields in page {
                let (Some(task_id), Some(run)) = (fields.task_id(), fields.run()) else {
                    continue;
                };
                by_id.insert(task_id, (run.parse().unwrap_or(u64::MAX), fields));
            }
            match next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        let mut listed: Vec<(u64, TaskFields)> = by_id.into_values().collect();
        listed.sort_by_key(|(run, _)| *run);
        listed
            .into_iter()
            .filter(|(_, fields)| !pending || fields.is_pending())
            .map(|(_, fields)| fields.snapshot(&self.session_id))
            .collect()
    }

    /// Subscribes to the session's lifecycle events from this moment on, whichever process makes them.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn subscribe(&self) -> Result<RedisEventSubscription, RedisTrackerError> {
        RedisEventSubscription::open(
            self.worker.client.clone(),
            self.worker.options.timeout,
            [
                self.worker.keys.events(&self.session_id),
                self.key.to_string(),
            ],
            self.session_id.clone(),
            self.incarnation.clone(),
        )
        .await
    }
}
