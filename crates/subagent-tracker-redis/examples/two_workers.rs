//! Two workers on one Redis session: one queues a job, another claims and runs it, and the first stops it.
//!
//! `cargo run -p subagent-tracker-redis --example two_workers [redis://127.0.0.1:6379/0]`: without a URL, it
//! starts a `redis-server` of its own on a free loopback port, and stops it at the end.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use subagent_tracker::{TaskStart, TrackerConfig};
use subagent_tracker_redis::{RedisOptions, RedisRegistry};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, mut server) = match std::env::args().nth(1) {
        Some(url) => (url, None),
        None => {
            let (url, server) = start_server()?;
            (url, Some(server))
        }
    };
    let api = RedisRegistry::connect(&url, RedisOptions::default().with_worker_id("api")).await?;
    let worker =
        RedisRegistry::connect(&url, RedisOptions::default().with_worker_id("worker")).await?;

    // The API server queues a job in the user's session.
    let queue = api
        .session(Some("user-42"), TrackerConfig::default())
        .await?;
    queue
        .reserve(TaskStart::new().task_id("summarise").agent("writer"), None)
        .await?;

    // The worker, another process in real life, claims it and runs it until its token fires.
    let session = worker.get_session("user-42").await?.ok_or("no session")?;
    let mut job = session.claim("summarise").await?;
    let token = job.token();
    let runner = tokio::spawn(async move {
        token.cancelled().await;
    });

    // The user presses stop; the API server holds only the ids.
    let stopped_at = Instant::now();
    assert!(queue.cancel("summarise", Some("user pressed stop")).await?);
    runner.await?;
    println!(
        "the worker's token fired {:?} after the API server's cancel",
        stopped_at.elapsed()
    );
    job.stopped(None).await?;
    let snapshot = queue.get("summarise").await?.ok_or("no task")?;
    println!(
        "summarise: {} (finished: {}), reason: {:?}",
        snapshot.status, snapshot.finished, snapshot.cancel_reason
    );
    if let Some(server) = &mut server {
        server.kill()?;
        server.wait()?;
    }
    Ok(())
}

fn start_server() -> Result<(String, Child), Box<dyn std::error::Error>> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let server = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("redis-server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((format!("redis://127.0.0.1:{port}/0"), server))
}
