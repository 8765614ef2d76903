//! The Redis store's integration tests, in one test binary (each file its own module, each with one job): one
//! binary links and instantiates the crates once, where one per file did it for each. Among them the
//! conformance suite that runs one set of scenarios on every store, the Redis Cluster, TLS, replica
//! confirmation, and what a session shows of itself.

#[path = "../common/mod.rs"]
mod common;

mod across_workers;
mod batch_ends_and_coalescing;
mod batch_fan_out;
mod cascades_in_steps;
mod cluster;
mod conformance;
mod edge_cases;
mod eviction;
mod hostile_conditions;
mod listings_in_pages;
mod lost_writes;
mod replicas;
mod session_shape;
mod sessions_removed_in_steps;
mod tls;
