//! A real `redis-server`, started for the tests on 127.0.0.1 on a free port, without persistence, and stopped
//! when dropped.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use subagent_tracker_redis::{RedisOptions, RedisRegistry};

pub struct RedisServer {
    process: Child,
    pub port: u16,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let process = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (the README's test command installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        RedisServer { process, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A worker on this server, with its own id, under `prefix` (one per test, so tests share nothing).
    pub async fn worker(&self, prefix: &str, worker_id: &str) -> RedisRegistry {
        let options = RedisOptions::default()
            .with_key_prefix(prefix)
            .with_worker_id(worker_id)
            .with_reconcile_interval(Duration::from_millis(200))
            .with_timeout(Duration::from_secs(2));
        RedisRegistry::connect(&self.url(), options)
            .await
            .expect("the test server answers")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Waits until `condition` holds, for at most two seconds.
pub async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    condition()
}
