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

    /// Writes a snapshot (`SAVE`) of a server without an append-only file: [`restart`](Self::restart) then
    /// starts it from that older state, losing every write made since, as a restore from a backup or a failover
    /// to a lagging replica does.
    pub fn save_snapshot(&self) {
        assert!(
            cli(self.port, &["SAVE"]).contains("OK"),
            "the server saved its snapshot"
        );
    }

    /// [`restart`](Self::restart) with `settings` beyond those the server was started with, for this start alone.
    pub fn restart_with(&mut self, settings: &[&str]) {
        let kept = self.settings.clone();
        self.settings
            .extend(settings.iter().map(|setting| (*setting).to_owned()));
        self.restart();
        self.settings = kept;
    }

    fn spawn(port: u16, aof_directory: Option<PathBuf>, settings: Vec<String>) -> RedisServer {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--protected-mode", "yes"]);
        let scratch = scratch_directory(port);
        match &aof_directory {
            Some(directory) => {
                command
                    .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                    .arg(directory);
            }
            None => {
                std::fs::create_dir_all(&scratch).expect("a temporary directory");
                command.args(["--appendonly", "no", "--dir"]).arg(&scratch);
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
        self.worker_reconciling_every(prefix, worker_id, Duration::from_millis(200))
            .await
    }

    /// A worker as [`worker`](Self::worker) makes, whose timer never reconciles within a test: its runs learn
    /// only from notifications and from the replies of its own calls.
    pub async fn worker_without_timed_reconcile(
        &self,
        prefix: &str,
        worker_id: &str,
    ) -> RedisRegistry {
        self.worker_reconciling_every(prefix, worker_id, Duration::from_secs(600))
            .await
    }

    async fn worker_reconciling_every(
        &self,
        prefix: &str,
        worker_id: &str,
        interval: Duration,
    ) -> RedisRegistry {
        let options = RedisOptions::default()
            .with_key_prefix(prefix)
            .with_worker_id(worker_id)
            .with_reconcile_interval(interval)
            .with_timeout(Duration::from_secs(2));
        RedisRegistry::connect(&self.url(), options)
            .await
            .expect("the test server answers")
    }

    /// Drops every subscription on the server: the notifications published until the listeners subscribe again
    /// reach nobody.
    pub async fn drop_subscriptions(&self) {
        let client = redis::Client::open(self.url()).unwrap();
        let mut admin = client.get_multiplexed_async_connection().await.unwrap();
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut admin)
            .await
            .unwrap();
    }

    /// Refuses `SUBSCRIBE` from now on, then drops every subscription: no notification reaches anyone any more,
    /// and the listeners' reconcile after subscribing again never comes (only the one on their timer does).
    pub async fn refuse_subscriptions(&self) {
        let client = redis::Client::open(self.url()).unwrap();
        let mut admin = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("-subscribe")
            .query_async(&mut admin)
            .await
            .unwrap();
        self.drop_subscriptions().await;
    }
}

/// A certificate authority of the tests' own, made with `openssl` in `directory`, and a certificate it signed
/// for a server at 127.0.0.1 (the address only).
pub struct CertificateAuthority {
    pub ca: PathBuf,
    certificate: PathBuf,
    key: PathBuf,
}

impl CertificateAuthority {
    pub fn make(directory: &Path) -> CertificateAuthority {
        let file = |name: &str| directory.join(name);
        let (ca_key, request, names) = (file("ca.key"), file("server.csr"), file("names.cnf"));
        std::fs::write(&names, "subjectAltName=IP:127.0.0.1\n").expect("a writable directory");
        let authority = CertificateAuthority {
            ca: file("ca.crt"),
            certificate: file("server.crt"),
            key: file("server.key"),
        };
        let openssl = |arguments: &[&std::ffi::OsStr]| {
            let made = Command::new("openssl")
                .args(arguments)
                .output()
                .expect("openssl is installed");
            assert!(made.status.success(), "openssl {arguments:?} failed");
        };
        let os = |text: &'static str| std::ffi::OsStr::new(text);
        openssl(&[
            os("req"),
            os("-x509"),
            os("-newkey"),
            os("rsa:2048"),
            os("-nodes"),
            os("-days"),
            os("2"),
            os("-subj"),
            os("/CN=subagent-tracker test authority"),
            os("-keyout"),
            ca_key.as_os_str(),
            os("-out"),
            authority.ca.as_os_str(),
        ]);
        openssl(&[
            os("req"),
            os("-newkey"),
            os("rsa:2048"),
            os("-nodes"),
            os("-subj"),
            os("/CN=127.0.0.1"),
            os("-keyout"),
            authority.key.as_os_str(),
            os("-out"),
            request.as_os_str(),
        ]);
        openssl(&[
            os("x509"),
            os("-req"),
            os("-days"),
            os("2"),
            os("-CAcreateserial"),
            os("-extfile"),
            names.as_os_str(),
            os("-in"),
            request.as_os_str(),
            os("-CA"),
            authority.ca.as_os_str(),
            os("-CAkey"),
            ca_key.as_os_str(),
            os("-out"),
            authority.certificate.as_os_str(),
        ]);
        authority
    }

    /// A server that also takes TLS, on a port of its own, with this certificate; and that port.
    pub fn serve(&self) -> (RedisServer, u16) {
        let tls_port = free_port();
        let path = |path: &Path| path.to_str().expect("a UTF-8 path").to_owned();
        let settings = [
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&self.certificate),
            "--tls-key-file".to_owned(),
            path(&self.key),
            "--tls-ca-cert-file".to_owned(),
            path(&self.ca),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        (
            RedisServer::spawn(free_port(), None, settings.to_vec()),
            tls_port,
        )
    }
}

/// A Redis Cluster on 127.0.0.1 (three primaries, each with one replica), every node a `redis-server
/// --cluster-enabled yes` on free ports, joined by `redis-cli --cluster create`; stopped when dropped.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    directory: PathBuf,
}

impl RedisCluster {
    pub fn start(name: &str) -> RedisCluster {
        let directory = std::env::temp_dir().join(format!(
            "subagent-tracker-cluster-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&directory).expect("a temporary directory");
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| {
                let port = free_port();
                let settings = [
                    "--cluster-enabled".to_owned(),
                    "yes".to_owned(),
                    "--cluster-config-file".to_owned(),
                    directory
                        .join(format!("nodes-{port}.conf"))
                        .to_str()
                        .expect("a UTF-8 path")
                        .to_owned(),
                    "--cluster-node-timeout".to_owned(),
                    "1000".to_owned(),
                    // The bus port defaults to the port plus 10,000, past 65,535 for most free ports.
                    "--cluster-port".to_owned(),
                    free_port().to_string(),
                ];
                RedisServer::spawn(port, None, settings.to_vec())
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli is installed with redis-server");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed"
        );
        let cluster = RedisCluster { nodes, directory };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.is_healthy() {
            assert!(
                Instant::now() < deadline,
                "the cluster did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// Every node sees every slot served, and every primary has its replica in sync.
    fn is_healthy(&self) -> bool {
        self.nodes.iter().all(|node| {
            let info = cli(node.port, &["CLUSTER", "INFO"]);
            let replication = cli(node.port, &["INFO", "replication"]);
            info.contains("cluster_state:ok")
                && (!replication.contains("role:master")
                    || (replication.contains("connected_slaves:1")
                        && replication.contains("state=online")))
        })
    }

    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// The number of keys each primary holds (`INFO keyspace`).
    pub fn keys_per_primary(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|node| cli(node.port, &["INFO", "replication"]).contains("role:master"))
            .map(|node| {
                let keyspace = cli(node.port, &["INFO", "keyspace"]);
                keyspace
                    .split("keys=")
                    .nth(1)
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|count| count.parse().ok())
                    .unwrap_or(0)
            })
            .collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

/// One command through `redis-cli`, its answer as text.
pub fn cli(port: u16, command: &[&str]) -> String {
    let answer = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(command)
        .output()
        .expect("redis-cli is installed with redis-server");
    String::from_utf8_lossy(&answer.stdout).into_owned()
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

/// The directory of a server without persistence: one of its own, since a replica writes the snapshot it syncs
/// from there, and any server loads a snapshot it finds there when it starts.
fn scratch_directory(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!(
        "subagent-tracker-redis-{}-{port}",
        std::process::id()
    ))
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
        if self.aof_directory.is_none() {
            let _ = std::fs::remove_dir_all(scratch_directory(self.port));
        }
    }
}

/// How many server function calls (`FCALL`) `server` has run so far.
#[allow(dead_code)]
pub fn function_calls(server: &RedisServer) -> u64 {
    cli(server.port, &["INFO", "commandstats"])
        .lines()
        .filter(|line| line.starts_with("cmdstat_fcall:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Starts logging every call `server` runs, for `calls_of` (its slow log, with no threshold).
#[allow(dead_code)]
pub fn log_every_call(server: &RedisServer) {
    cli(
        server.port,
        &["CONFIG", "SET", "slowlog-log-slower-than", "0"],
    );
    cli(server.port, &["CONFIG", "SET", "slowlog-max-len", "100000"]);
    cli(server.port, &["SLOWLOG", "RESET"]);
}

/// How many calls of the server function `stv2_<name>` `server` has logged since `log_every_call` (the
/// registry's own background calls are other functions).
#[allow(dead_code)]
pub fn calls_of(server: &RedisServer, name: &str) -> usize {
    cli(server.port, &["SLOWLOG", "GET", "100000"])
        .lines()
        .filter(|line| line.trim() == format!("stv2_{name}"))
        .count()
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
