//! The Redis store's newer tests, in one test binary (each file its own module, each with one job): the
//! conformance suite that runs one set of scenarios on every store, the Redis Cluster, TLS, replica
//! confirmation, and what a session shows of itself.

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod conformance;
mod replicas;
mod session_shape;
mod tls;
