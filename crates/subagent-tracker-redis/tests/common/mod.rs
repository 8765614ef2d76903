//! A real `redis-server`, started for the tests on 127.0.0.1 on a free port, and stopped when dropped: without
//! persistence, or with an append-only file for the restart tests.
// Shared by several test binaries, each of which uses part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use subagent_tracker_redis::{RedisOptions, RedisRegistry};

pub struct RedisServer {
    process: Child,
    pub port: u16,
    /// Where the append-only file lives, when the server keeps one.
    aof_directory: Option<PathBuf>,
    /// Settings beyond the defaults, kept across a restart.
    settings: Vec<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::spawn(free_port(), None, Vec::new())
    }

    /// A server started with `settings` beyond the defaults (`["--requirepass", "secret"]`).
    pub fn start_with(settings: &[&str]) -> RedisServer {
        let settings = settings
            .iter()
            .map(|setting| (*setting).to_owned())
            .collect();
        Self::spawn(free_port(), None, settings)
    }

    /// A server that writes each change to an append-only file before it answers, so a restart loses nothing.
    pub fn start_with_aof(directory: &Path) -> RedisServer {
        Self::spawn(free_port(), Some(directory.to_owned()), Vec::new())
    }

    /// Kills the server (no shutdown save) and starts it again on the same port, from its append-only file.
    pub fn restart(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let restarted = Self::spawn(self.port, self.aof_directory.clone(), self.settings.clone());
        let killed = std::mem::replace(self, restarted);
        // Already stopped: its `Drop` has nothing left to do.
        std::mem::forget(killed);
    }

    fn spawn(port: u16, aof_directory: Option<PathBuf>, settings: Vec<String>) -> RedisServer {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--protected-mode", "yes"]);
        match &aof_directory {
            Some(directory) => {
                command
                    .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                    .arg(directory);
            }
            None => {
                command.args(["--appendonly", "no"]);
            }
        }
        let process = command
            .args(&settings)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (the README's test command installs it)");
        // Ready once it answers PING: a server loading its append-only file accepts connections before that.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !answers_ping(port) {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        RedisServer {
            process,
            port,
            aof_directory,
            settings,
        }
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

fn answers_ping(port: u16) -> bool {
    let Ok(mut connection) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    // Any answer but LOADING: a server that wants a password refuses the PING, and is ready.
    let mut reply = [0_u8; 64];
    if connection.write_all(b"PING\r\n").is_err() {
        return false;
    }
    matches!(connection.read(&mut reply), Ok(read) if read > 0 && !reply[..read].starts_with(b"-LOADING"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
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
