//! Lifecycle events across processes: a reader of the session's event stream in Redis.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::streams::{StreamId, StreamRangeReply, StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use subagent_tracker::{SubagentEvent, SubagentEventKind, SubagentStatus, TrackerError};

use crate::connection::{Client, Connection};
use crate::RedisTrackerError;

/// How long one blocking read waits before it reads again (a read never blocks the connection of other calls:
/// each subscription has a connection of its own).
pub(crate) const READ_BLOCK: Duration = Duration::from_secs(1);

/// How many events one read takes at most.
const READ_COUNT: usize = 256;

/// The lifecycle events of one session from the moment of subscribing, in the order they took effect in
/// Redis, whichever process made them. A reader that the stream's trimming overtook gets one `Lagged` event
/// with the exact number it missed, then goes on. A reader some of whose events Redis lost after it read them
/// (a restart from older state, a failover to a lagging replica) gets one `Lagged` event too, whose `missed`
/// is how many of the events it read are lost: what it made of them may no longer be true, and it should read
/// the tasks again. A subscription belongs to the incarnation of the session object that made it: once that
/// incarnation has ended, reading fails with [`TrackerError::SessionClosed`].
///
/// Each event's stream id is `<ms>-<number>` (`next_event_id` in `lua/includes/session.lua`): the numbers run
/// on one by one from the incarnation's own, and the ids never go back, even when the numbers do.
pub struct RedisEventSubscription {
    client: Client,
    timeout: Duration,
    /// `None` after a read failed: the next read connects again and goes on from `last_id`.
    connection: Option<Connection>,
    key: String,
    /// The session's hash, where a reader with nothing to read checks that its incarnation lives on.
    session_key: String,
    session_id: Arc<str>,
    /// The incarnation read.
    incarnation: Arc<str>,
    /// The id of the last entry read (or of the stream's last entry when subscribing).
    last_id: String,
    /// The number of the last event read (or the incarnation's, before its first event).
    last_number: u64,
    /// Events read and not yet handed out, each with the run it is of when the stream says (cancels and ends).
    ready: VecDeque<(SubagentEvent, Option<String>)>,
}

impl RedisEventSubscription {
    pub(crate) async fn open(
        client: Client,
        timeout: Duration,
        [key, session_key]: [String; 2],
        session_id: Arc<str>,
        incarnation: Arc<str>,
    ) -> Result<RedisEventSubscription, RedisTrackerError> {
        let mut connection = connect(&client, timeout).await?;
        let newest: StreamRangeReply = connection.xrevrange_count(&key, "+", "-", 1).await?;
        let first_number = incarnation
            .parse::<u64>()
            .map_err(|_| RedisTrackerError::Protocol(Arc::from("a session's incarnation")))?;
        let mut subscription = RedisEventSubscription {
            client,
            timeout,
            connection: Some(connection),
            key,
            session_key,
            session_id,
            last_id: "0-0".to_owned(),
            incarnation,
            last_number: first_number,
            ready: VecDeque::new(),
        };
        if !subscription.is_current().await? {
            return Err(subscription.ended());
        }
        if let Some(entry) = newest.ids.first() {
            subscription.last_id.clone_from(&entry.id);
            // An entry left from an earlier incarnation (whose keys were not all removed) numbers below this one.
            subscription.last_number = number_of(entry).unwrap_or(0).max(first_number);
        }
        Ok(subscription)
    }

    /// The error of a read whose session incarnation has ended.
    fn ended(&self) -> RedisTrackerError {
        TrackerError::SessionClosed {
            session_id: self.session_id.clone(),
        }
        .into()
    }

    /// False once the session's keys are gone or belong to another incarnation.
    async fn is_current(&mut self) -> Result<bool, RedisTrackerError> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => self
                .connection
                .insert(connect(&self.client, self.timeout).await?),
        };
        let stored: Option<String> = match connection.hget(&self.session_key, "inc").await {
            Ok(stored) => stored,
            Err(error) => {
                self.connection = None;
                return Err(error.into());
            }
        };
        Ok(stored.as_deref() == Some(&*self.incarnation))
    }

    /// The next event; waits for one as long as it takes.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`] when Redis cannot be reached. The subscription may be read again: it
    /// connects anew and goes on where it stopped (with a `Lagged` event if the stream moved past it meanwhile).
    pub async fn next(&mut self) -> Result<SubagentEvent, RedisTrackerError> {
        self.next_with_run().await.map(|(event, _)| event)
    }

    /// [`next`](Self::next), with the run the event is of when the stream says (cancels and ends).
    pub(crate) async fn next_with_run(
        &mut self,
    ) -> Result<(SubagentEvent, Option<String>), RedisTrackerError> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            let connection = match &mut self.connection {
                Some(connection) => connection,
                None => self
                    .connection
                    .insert(connect(&self.client, self.timeout).await?),
            };
            let options = StreamReadOptions::default()
                .block(usize::try_from(READ_BLOCK.as_millis()).unwrap_or(1000))
                .count(READ_COUNT);
            let reply: Option<StreamReadReply> = match connection
                .xread_options(&[&self.key], &[&self.last_id], &options)
                .await
            {
                Ok(reply) => reply,
                Err(error) => {
                    // A multiplexed connection does not reconnect by itself.
                    self.connection = None;
                    return Err(error.into());
                }
            };
            let entries: Vec<StreamId> = reply
                .into_iter()
                .flat_map(|reply| reply.keys)
                .flat_map(|key| key.ids)
                .collect();
            // Nothing within a whole block: a session that is gone sends nothing ever again.
            if entries.is_empty() && !self.is_current().await? {
                return Err(self.ended());
            }
            for entry in &entries {
                let number = number_of(entry).unwrap_or(0);
                // Numbers out of step (trimmed past, lost by Redis, or of a later incarnation, whose numbers are
                // past all of this one's): whether the incarnation lives on says which.
                if number != self.last_number + 1 && !self.is_current().await? {
                    // Everything this subscription could read was read.
                    if self.ready.is_empty() {
                        return Err(self.ended());
                    }
                    break;
                }
                self.take(entry, number);
            }
        }
    }

    fn take(&mut self, entry: &StreamId, number: u64) {
        self.last_id.clone_from(&entry.id);
        let last = self.last_number;
        if number != last + 1 {
            let mut lagged = SubagentEvent::new(
                Arc::from(""),
                SubagentEventKind::Lagged,
                SubagentStatus::Running,
                SystemTime::now(),
            );
            // Past the next: the stream was trimmed past those between. Not past the last: Redis lost the
            // events from this number on, which this reader had read.
            lagged.missed = if number > last {
                number - last - 1
            } else {
                last - number + 1
            };
            self.ready.push_back((lagged, None));
        }
        self.last_number = number;
        if let Some(event) = event(entry) {
            self.ready.push_back((event, text(entry, "run")));
        }
    }

    /// Lets the connection go (a read abandoned half way may have left its answer on it): the next read
    /// connects anew and goes on where the last complete read stopped, so nothing is missed.
    pub(crate) fn drop_connection(&mut self) {
        self.connection = None;
    }
}

/// A connection of the subscription's own; a blocking read holds its answer back for up to `READ_BLOCK`, on top
/// of the usual bound.
async fn connect(client: &Client, timeout: Duration) -> Result<Connection, RedisTrackerError> {
    tokio::time::timeout(timeout, client.connect_blocking_reads(timeout, READ_BLOCK))
        .await
        .map_err(|_| crate::error::timeout_error())?
        .map_err(RedisTrackerError::from)
}

/// The number of an event: its id's second part.
fn number_of(entry: &StreamId) -> Option<u64> {
    entry.id.split_once('-')?.1.parse().ok()
}

fn text(entry: &StreamId, name: &str) -> Option<String> {
    entry.get(name)
}

fn event(entry: &StreamId) -> Option<SubagentEvent> {
    let kind = SubagentEventKind::from_name(&text(entry, "kind")?)?;
    let status = SubagentStatus::from_name(&text(entry, "status")?)?;
    let seconds: f64 = text(entry, "at")?.parse().ok()?;
    let timestamp =
        SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(seconds).ok()?)?;
    let mut event = SubagentEvent::new(Arc::from(text(entry, "task")?), kind, status, timestamp);
    event.reason = text(entry, "reason").map(Arc::from);
    event.message = text(entry, "message").map(Arc::from);
    Some(event)
}
