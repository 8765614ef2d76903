//! How a registry reaches Redis: one server, or a Redis Cluster through any one of its nodes.
//!
//! In a cluster every call is routed by its first key: each server function declares the key of the slot it works
//! in (a session's hash, or a key of the registry's `{registry}` tag), so it runs on that slot's primary. Loading
//! the functions goes to every primary. Notifications are published with `PUBLISH`, which a cluster passes to
//! every node, so a worker subscribed at any node receives them.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Msg, Pipeline, RedisFuture, RedisResult, Value};

/// The client side of the store: one server, or a cluster.
#[derive(Clone)]
pub(crate) enum Client {
    Node(redis::Client),
    Cluster {
        client: Box<ClusterClient>,
        /// The node the registry was given, and its timeout: a subscription makes a client of its own there.
        url: Arc<str>,
        timeout: Duration,
    },
}

/// A connection that calls go through; it reconnects by itself (a cluster's also follows slots that move).
#[derive(Clone)]
pub(crate) enum Connection {
    Managed(ConnectionManager),
    Multiplexed(MultiplexedConnection),
    /// A cluster connection retries on its own across a failover; `bound` keeps each call within the registry's
    /// timeout all the same.
    Cluster {
        connection: ClusterConnection,
        bound: Duration,
    },
}

/// The messages of a subscription, for as long as it lasts.
pub(crate) type Messages = Pin<Box<dyn Stream<Item = Msg> + Send>>;

impl Client {
    /// A client for the server at `url`, or with `cluster`, for the cluster that the node at `url` belongs to.
    pub(crate) fn open(url: &str, cluster: bool, timeout: Duration) -> RedisResult<Client> {
        if cluster {
            Ok(Client::Cluster {
                client: Box::new(cluster_builder(url, timeout).build()?),
                url: Arc::from(url),
                timeout,
            })
        } else {
            Ok(Client::Node(redis::Client::open(url)?))
        }
    }

    /// Whether the server at `url` is a node of a Redis Cluster (`INFO cluster`); `None` when the user may not
    /// run `INFO`. The probe is a plain connection, so a set-up mistake (a password, a certificate) shows here
    /// with its cause, which a cluster client would hide behind "failed to create initial connections".
    pub(crate) async fn probe(url: &str, timeout: Duration) -> RedisResult<Option<bool>> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let mut connection = redis::Client::open(url)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let info: RedisResult<String> = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut connection)
            .await;
        match info {
            Ok(info) => Ok(Some(info.contains("cluster_enabled:1"))),
            Err(error) if error.code() == Some("NOPERM") => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// A connection for calls, which reconnects by itself: `timeout` bounds connecting and each answer.
    pub(crate) async fn connect(&self, timeout: Duration) -> RedisResult<Connection> {
        match self {
            Client::Node(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1);
                Ok(Connection::Managed(
                    client.get_connection_manager_with_config(config).await?,
                ))
            }
            Client::Cluster { client, .. } => Ok(Connection::Cluster {
                connection: client.get_async_connection().await?,
                bound: timeout,
            }),
        }
    }

    /// A connection of its own, for reads that block on the server for up to `block` beyond `timeout`; it
    /// does not reconnect by itself (its owner connects again).
    pub(crate) async fn connect_blocking_reads(
        &self,
        timeout: Duration,
        block: Duration,
    ) -> RedisResult<Connection> {
        match self {
            Client::Node(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(block + timeout));
                Ok(Connection::Multiplexed(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            Client::Cluster { client, .. } => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(block + timeout);
                Ok(Connection::Cluster {
                    connection: client.get_async_connection_with_config(config).await?,
                    bound: block + timeout,
                })
            }
        }
    }

    /// Subscribes to `channel`; the stream ends when the subscription is lost (for a single server; a cluster's
    /// subscription moves with the cluster's nodes).
    pub(crate) async fn subscribe(&self, channel: &str) -> RedisResult<Messages> {
        match self {
            Client::Node(client) => {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(channel).await?;
                Ok(Box::pin(pubsub.into_on_message()))
            }
            Client::Cluster { url, timeout, .. } => {
                let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
                let client = cluster_builder(url, *timeout)
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(sender)
                    .build()?;
                let mut connection = client.get_async_connection().await?;
                connection.subscribe(channel).await?;
                let messages = futures_util::stream::unfold(
                    (receiver, connection),
                    |(mut receiver, connection)| async move {
                        let push = receiver.recv().await?;
                        Some((push, (receiver, connection)))
                    },
                )
                .filter_map(|push| async move { Msg::from_push_info(push) });
                Ok(Box::pin(messages))
            }
        }
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "Redis did not answer within the registry's timeout",
    ))
}

fn cluster_builder(url: &str, timeout: Duration) -> ClusterClientBuilder {
    ClusterClientBuilder::new(vec![url.to_owned()])
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(3)
}

impl Connection {
    /// Whether calls that span slots must go one by one.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster { .. })
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Managed(connection) => connection.req_packed_command(command),
            Connection::Multiplexed(connection) => connection.req_packed_command(command),
            Connection::Cluster { connection, bound } => {
                let bound = *bound;
                Box::pin(async move {
                    tokio::time::timeout(bound, connection.req_packed_command(command))
                        .await
                        .map_err(|_| timed_out())?
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Managed(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Multiplexed(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster { connection, bound } => {
                let bound = *bound;
                Box::pin(async move {
                    tokio::time::timeout(
                        bound,
                        connection.req_packed_commands(pipeline, offset, count),
                    )
                    .await
                    .map_err(|_| timed_out())?
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Managed(connection) => connection.get_db(),
            Connection::Multiplexed(connection) => connection.get_db(),
            Connection::Cluster { connection, .. } => connection.get_db(),
        }
    }
}
