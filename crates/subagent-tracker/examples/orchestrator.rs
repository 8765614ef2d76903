//! A Rust orchestrator: fans out subagents on tokio, then cancels one by id, a subtree, and the rest.
//!
//! Run with `cargo run --example orchestrator -p subagent-tracker`.

use std::time::Duration;

use subagent_tracker::{
    InMemorySubagentTaskTracker, SubagentStatus, SubagentTaskHandle, TaskStart,
};

/// A subagent that streams chunks until it is done or its token fires.
async fn run_subagent(handle: SubagentTaskHandle, chunks: u32) {
    let token = handle.token().cancellation_token();
    for chunk in 0..chunks {
        tokio::select! {
            _ = token.cancelled() => {
                handle.stop_cancelled(None);
                return;
            }
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                handle.progress(&format!("chunk {chunk}"));
            }
        }
    }
    handle.complete(Some(format!("{chunks} chunks")));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), subagent_tracker::TrackerError> {
    let tracker: InMemorySubagentTaskTracker = InMemorySubagentTaskTracker::new();
    let orchestrator = tracker.start(TaskStart::new().task_id("orchestrator"))?;
    let mut runners = Vec::new();
    for index in 0..50 {
        let task_id = format!("sub-{index}");
        let start = TaskStart::new()
            .task_id(task_id.clone())
            .parent_id("orchestrator")
            .agent("researcher");
        runners.push(tokio::spawn(run_subagent(
            tracker.start(start)?,
            5 + index % 40,
        )));
        if index % 10 == 0 {
            for child in 0..3 {
                let start = TaskStart::new()
                    .task_id(format!("{task_id}.{child}"))
                    .parent_id(task_id.clone());
                runners.push(tokio::spawn(run_subagent(tracker.start(start)?, 100)));
            }
        }
    }

    tokio::time::sleep(Duration::from_millis(30)).await;
    println!(
        "cancel sub-45 by id: {}",
        tracker.cancel("sub-45", Some("user pressed stop"))
    );
    println!(
        "cancel the subtree under sub-10: {}",
        tracker.cancel("sub-10", Some("branch not needed"))
    );
    println!(
        "pending before the session cancel: {}",
        tracker.pending().len()
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    println!(
        "session cancel moved {} tasks",
        tracker.cancel_all(Some("deadline passed"))
    );
    for runner in runners {
        runner.await.expect("a runner panicked");
    }
    orchestrator.stop_cancelled(None);

    let tasks = tracker.tasks();
    for status in SubagentStatus::ALL {
        let count = tasks.iter().filter(|task| task.status == status).count();
        println!("{status:>10}: {count}");
    }
    let child = tracker.get("sub-10.1").expect("retained");
    println!(
        "sub-10.1 was {} by {:?}",
        child.status,
        child.cancel_origin.as_deref()
    );
    assert!(tasks.iter().all(|task| task.finished));
    Ok(())
}
