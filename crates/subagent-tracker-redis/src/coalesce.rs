//! Coalescing: the calls of one server function on one session that wait together in this process go to the
//! server as one call, as Redis clients' auto-pipelining sends the commands that wait together as one write.
//!
//! A call that finds no call of its kind in flight is sent at once, by a task of the registry's runtime (so that a
//! caller that stops waiting stops nothing): a lone call waits for no other. While one is in flight, later calls
//! queue; when it returns, every queued call goes in the next one. So a session's starts (or
//! ends) under load reach the server in calls of many tasks each, and the server's cost per call (the function's
//! entry, its reading of the session's hash, its clock) is paid once per batch rather than once per task.
//!
//! Each caller keeps its own outcome: the server function treats each item on its own (`stv2_open`, `stv2_end`),
//! so one caller's refusal never fails another's call. An error of the whole call (the server unreachable, the
//! incarnation gone) is every caller's error.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use subagent_tracker::DEADLINE_REASON;
use tokio::sync::oneshot;

use crate::worker::Worker;
use crate::{store, RedisTrackerError};

/// At most this many items go in one call, so that no call holds the server long (a start or an end costs it a
/// few microseconds); the rest go in the next.
pub(crate) const MAX_ITEMS_PER_CALL: usize = 128;

/// One call of a flight: one outcome per item, in the items' order, or the error of the whole call.
type Flight<Outcome> =
    Pin<Box<dyn Future<Output = Result<Vec<Outcome>, RedisTrackerError>> + Send>>;

/// What a flight sends: the items queued, in the order their callers came.
type Sender<Item, Outcome> = Arc<dyn Fn(Vec<Item>) -> Flight<Outcome> + Send + Sync>;

/// The queue of one kind of call on one session.
pub(crate) struct Coalescer<Item, Outcome> {
    queue: Mutex<Queue<Item, Outcome>>,
    send: Sender<Item, Outcome>,
}

struct Queue<Item, Outcome> {
    /// Whether a flight is under way: it takes whatever is queued when its call returns.
    in_flight: bool,
    waiting: Vec<Waiting<Item, Outcome>>,
}

type Waiting<Item, Outcome> = (Item, oneshot::Sender<Result<Outcome, RedisTrackerError>>);

impl<Item: Send + 'static, Outcome: Send + 'static> Coalescer<Item, Outcome> {
    fn new(send: Sender<Item, Outcome>) -> Coalescer<Item, Outcome> {
        Coalescer {
            queue: Mutex::new(Queue {
                in_flight: false,
                waiting: Vec::new(),
            }),
            send,
        }
    }

    /// Sends `item` with whatever else of its kind waits, and returns its own outcome. The flight runs on
    /// `runtime`, so a caller that stops waiting neither loses the others' outcomes nor stops the queue.
    pub(crate) async fn call(
        self: &Arc<Self>,
        item: Item,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Outcome, RedisTrackerError> {
        let (answer, outcome) = oneshot::channel();
        let leads = {
            let mut queue = self.lock();
            queue.waiting.push((item, answer));
            !std::mem::replace(&mut queue.in_flight, true)
        };
        if leads {
            runtime.spawn(Arc::clone(self).fly());
        }
        outcome.await.unwrap_or_else(|_| {
            // The flight's task ended without an answer: its runtime is shutting down.
            Err(RedisTrackerError::Protocol(Arc::from(
                "the registry's runtime stopped before the call returned",
            )))
        })
    }

    /// Sends what is queued, one call at a time, until the queue is empty.
    async fn fly(self: Arc<Self>) {
        loop {
            let batch = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    queue.in_flight = false;
                    return;
                }
                let taken = queue.waiting.len().min(MAX_ITEMS_PER_CALL);
                queue.waiting.drain(..taken).collect::<Vec<_>>()
            };
            let (items, answers): (Vec<Item>, Vec<_>) = batch.into_iter().unzip();
            let count = items.len();
            match (self.send)(items).await {
                Ok(outcomes) if outcomes.len() == count => {
                    for (answer, outcome) in answers.into_iter().zip(outcomes) {
                        // A caller that stopped waiting drops its outcome.
                        let _ = answer.send(Ok(outcome));
                    }
                }
                Ok(_) => {
                    let error = RedisTrackerError::Protocol(Arc::from("a coalesced call's reply"));
                    answers.into_iter().for_each(|answer| {
                        let _ = answer.send(Err(error.clone()));
                    });
                }
                Err(error) => answers.into_iter().for_each(|answer| {
                    let _ = answer.send(Err(error.clone()));
                }),
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<Item, Outcome>> {
        // Each change is a push or a take: the queue stays consistent across a panic.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The arguments of one task to open, as `stv2_open` takes them (`Opening::arguments`).
pub(crate) type OpenArgs = Vec<String>;
/// One task's reply from `stv2_open`: its run, status, reason, next timer due, origin, cause and handling flag
/// (the server leaves out the empty ones at the end), or an empty run and the refusal's code.
pub(crate) type OpenReply = [String; 7];
/// The arguments of one end, as `stv2_end` takes them (`RedisSession::end_run`).
pub(crate) type EndArgs = Vec<String>;
/// One end's reply from `stv2_end`: 1 when it moved the task, else 0.
pub(crate) type EndReply = i64;

/// The coalesced calls of one incarnation of a session in this process: its starts and reservations, and its
/// ends.
pub(crate) struct CoalescedCalls {
    pub(crate) opens: Arc<Coalescer<OpenArgs, OpenReply>>,
    pub(crate) ends: Arc<Coalescer<EndArgs, EndReply>>,
}

impl CoalescedCalls {
    /// The calls of the incarnation `incarnation` of the session whose hash is `key`, sent on `worker`'s
    /// connection. The ends hold the worker weakly (it holds them, through its mirrors) to fire the tokens of its
    /// runs that their cascades cancelled.
    pub(crate) fn new(
        worker: &Arc<Worker>,
        key: &Arc<str>,
        incarnation: &Arc<str>,
    ) -> CoalescedCalls {
        let connection = &worker.connection;
        let opens = {
            let (connection, key, incarnation) =
                (connection.clone(), key.clone(), incarnation.clone());
            Coalescer::new(Arc::new(move |items: Vec<OpenArgs>| {
                let (mut connection, key, incarnation) =
                    (connection.clone(), key.clone(), incarnation.clone());
                Box::pin(async move {
                    let mut args: Vec<&str> =
                        Vec::with_capacity(2 + items.iter().map(Vec::len).sum::<usize>());
                    args.extend([&*incarnation, DEADLINE_REASON]);
                    for item in &items {
                        args.extend(item.iter().map(String::as_str));
                    }
                    let replies: Vec<Vec<String>> =
                        store::call(&mut connection, "open", &[&key], &args).await?;
                    Ok(replies
                        .into_iter()
                        .map(|reply| {
                            let mut values = reply.into_iter();
                            std::array::from_fn(|_| values.next().unwrap_or_default())
                        })
                        .collect())
                }) as Flight<OpenReply>
            }))
        };
        let ends = {
            let (connection, key, incarnation) =
                (connection.clone(), key.clone(), incarnation.clone());
            let (worker, process): (Weak<Worker>, Arc<str>) =
                (Arc::downgrade(worker), worker.process.clone());
            Coalescer::new(Arc::new(move |items: Vec<EndArgs>| {
                let (mut connection, key, incarnation, worker, process) = (
                    connection.clone(),
                    key.clone(),
                    incarnation.clone(),
                    worker.clone(),
                    process.clone(),
                );
                Box::pin(async move {
                    let mut args: Vec<&str> =
                        Vec::with_capacity(2 + items.iter().map(Vec::len).sum::<usize>());
                    args.extend([&*incarnation, &*process]);
                    for item in &items {
                        args.extend(item.iter().map(String::as_str));
                    }
                    let reply: Vec<redis::Value> =
                        store::call(&mut connection, "end", &[&key], &args).await?;
                    let replies = store::end_replies(reply)?;
                    let told = |message: &[u8]| {
                        // Most ends tell nothing: the worker is looked up only for a message.
                        if let Some(worker) =
                            (!message.is_empty()).then(|| worker.upgrade()).flatten()
                        {
                            worker.apply_told(message);
                        }
                    };
                    told(&replies.told);
                    if replies.walks_left {
                        store::finish_walks(&mut connection, &key, &incarnation, &process, told)
                            .await?;
                    }
                    Ok(replies.moved)
                }) as Flight<EndReply>
            }))
        };
        CoalescedCalls {
            opens: Arc::new(opens),
            ends: Arc::new(ends),
        }
    }
}
