//! The core's integration tests, in one test binary (each file its own module, each with one job): one binary
//! links and instantiates the crate once, where one per file did it thirty times. The tests that must be alone
//! in their process (the timer's process-wide count of deadlines, the count of the process's threads) and the
//! loom model checks keep binaries of their own.

#[path = "../common/mod.rs"]
mod common;

mod agent_loops;
mod batch_fan_out;
mod cancel_and_wait;
mod cancel_by_filter;
mod cascade;
mod early_cancels;
mod events;
mod export_and_restore;
mod finished_age;
mod finished_records;
mod hostile_conditions;
mod inherited_metadata;
mod pause_and_resume;
mod progress_log;
mod queries_and_retention;
mod queued_tasks;
mod recorded_events;
mod registry;
mod status_and_races;
mod structured_failures;
mod task_groups;
mod tokens;
