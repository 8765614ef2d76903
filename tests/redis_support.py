"""A real ``redis-server`` and worker processes for the Redis tests. The server runs on 127.0.0.1 on a free
port (without persistence, or with an append-only file for the restart tests) and is stopped by its owner."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from subagent_tracker import AsyncRedisRegistry, RedisRegistry, RegistryUnavailableError
from subagent_tracker._loopback import free_port

_T = TypeVar("_T")

#: The two APIs of the Redis store: calls that block, and calls that are awaited.
Api = Literal["blocking", "asyncio"]
APIS: tuple[Api, ...] = ("blocking", "asyncio")

WORKER = Path(__file__).with_name("redis_worker.py")
#: Every ``redis-server`` the tests started, so that the end of the run finds any left running
#: (``conftest.no_redis_server_outlives_the_run``).
STARTED_SERVERS: list[subprocess.Popen[bytes]] = []


class CertificateAuthority:
    """A certificate authority of the tests' own, made with ``openssl`` in ``directory``, and a certificate it
    signed for a server at 127.0.0.1 (the address only: a client that names the server otherwise refuses
    it)."""

    def __init__(self, directory: Path) -> None:
        self.ca = directory / "ca.crt"
        self.certificate = directory / "server.crt"
        self.key = directory / "server.key"
        ca_key, request = directory / "ca.key", directory / "server.csr"
        names = directory / "names.cnf"
        names.write_text("subjectAltName=IP:127.0.0.1\n")

        def openssl(*arguments: object) -> None:
            command = ["openssl", *map(str, arguments)]
            subprocess.run(command, check=True, capture_output=True, timeout=60)

        authority = "/CN=subagent-tracker test authority"
        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            2,
            "-subj",
            authority,
            "-keyout",
            ca_key,
            "-out",
            self.ca,
        )
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            self.key,
            "-out",
            request,
        )
        openssl(
            "x509",
            "-req",
            "-days",
            2,
            "-CAcreateserial",
            "-extfile",
            names,
            "-in",
            request,
            "-CA",
            self.ca,
            "-CAkey",
            ca_key,
            "-out",
            self.certificate,
        )

    def server_arguments(self, tls_port: int) -> tuple[str, ...]:
        """``redis-server``'s settings for TLS on ``tls_port`` with this certificate (clients show none)."""
        return (
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            str(self.certificate),
            "--tls-key-file",
            str(self.key),
            "--tls-ca-cert-file",
            str(self.ca),
            "--tls-auth-clients",
            "no",
        )


class RedisServer:
    """A ``redis-server`` on 127.0.0.1, on a free port: with no persistence, or with an append-only file in
    ``aof_directory`` written before each answer. With ``tls``, it also takes TLS on a port of its own, which
    ``url`` names (``rediss://``); the plain port stays for the tests' own commands."""

    def __init__(
        self,
        aof_directory: Path | None = None,
        port: int | None = None,
        extra_arguments: tuple[str, ...] = (),
        tls: CertificateAuthority | None = None,
        snapshot: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.tls_port = free_port() if tls is not None else None
        if tls is not None and self.tls_port is not None:
            extra_arguments = (*extra_arguments, *tls.server_arguments(self.tls_port))
        self.extra_arguments = extra_arguments
        self.aof_directory = aof_directory
        # A directory of its own even without persistence: a replica writes the snapshot it syncs from there,
        # and any server loads a snapshot it finds there when it starts.
        self.scratch = tempfile.TemporaryDirectory(prefix="redis-server-") if aof_directory is None else None
        if snapshot is not None and self.scratch is not None:
            shutil.copy(snapshot, Path(self.scratch.name) / "dump.rdb")
        persistence = (
            ["--appendonly", "no"]
            if aof_directory is None
            else ["--appendonly", "yes", "--appendfsync", "always"]
        )
        persistence += ["--dir", str(aof_directory) if self.scratch is None else self.scratch.name]
        command = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            *persistence,
            *extra_arguments,
        ]
        try:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        except FileNotFoundError:
            pytest.fail(
                "redis-server is missing: ./scripts/check.sh installs it (Debian's redis-server package)"
            )
        STARTED_SERVERS.append(self.process)
        # Ready once it answers PING (a server that wants a password refuses it, so any answer but LOADING):
        # a server loading its append-only file accepts connections before that.
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as connection:
                    connection.sendall(b"PING\r\n")
                    reply = connection.recv(64)
                    if reply and not reply.startswith(b"-LOADING"):
                        break
            except OSError:
                pass
            if time.monotonic() >= deadline:
                self.stop()
                pytest.fail(f"redis-server did not answer on port {self.port} within 10 s")
            time.sleep(0.01)
        self.url = (
            f"redis://127.0.0.1:{self.port}/0"
            if self.tls_port is None
            else f"rediss://127.0.0.1:{self.tls_port}/0"
        )

    def admin(self, *command: str) -> bytes:
        """Sends one command in the inline protocol, on a connection of its own, and returns the first line of
        the answer (``+OK``, ``:3``)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
            connection.sendall((" ".join(command) + "\r\n").encode())
            return connection.recv(4096).split(b"\r\n")[0]

    def cli(self, *command: str) -> list[str]:
        """Runs one command through ``redis-cli`` and returns its answer's lines (``--raw``: a list of keys is
        one per line)."""
        answer = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "--raw", *command],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return answer.stdout.splitlines()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        if self.scratch is not None:
            self.scratch.cleanup()

    def restart(self) -> RedisServer:
        """Kills the server (no shutdown save) and starts it again on its port, from its append-only file."""
        self.stop()
        return RedisServer(self.aof_directory, self.port, self.extra_arguments)

    def signal(self, number: int) -> None:
        os.kill(self.process.pid, number)

    def save_snapshot(self) -> Path:
        """Writes a snapshot (``SAVE``) for ``restart_from_snapshot``, and returns a copy of it."""
        assert self.scratch is not None, "a server without an append-only file"
        assert self.admin("SAVE") == b"+OK"
        kept = Path(tempfile.mkdtemp(prefix="redis-snapshot-")) / "dump.rdb"
        shutil.copy(Path(self.scratch.name) / "dump.rdb", kept)
        return kept

    def restart_from_snapshot(self, snapshot: Path) -> RedisServer:
        """Kills the server and starts it again on its port from ``snapshot``: every write made since is lost,
        as after a restore from a backup or a failover to a lagging replica."""
        self.stop()
        restarted = RedisServer(None, self.port, self.extra_arguments, snapshot=snapshot)
        shutil.rmtree(snapshot.parent, ignore_errors=True)
        return restarted


class FunctionCalls:
    """Counts the server calls of each of the library's functions made inside a ``with`` block.

    Every command is logged meanwhile (``slowlog-log-slower-than 0``, and a log long enough for the commands
    a function runs, which are logged too); an entry of the log names the function it called."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.logged: list[str] = []

    def __enter__(self) -> FunctionCalls:
        self.server.cli("CONFIG", "SET", "slowlog-log-slower-than", "0", "slowlog-max-len", "100000")
        self.server.cli("SLOWLOG", "RESET")
        return self

    def __exit__(self, *_: object) -> None:
        self.logged = self.server.cli("SLOWLOG", "GET", "100000")
        self.server.cli("CONFIG", "SET", "slowlog-log-slower-than", "10000", "slowlog-max-len", "128")

    def of(self, function: str) -> int:
        """How many calls of ``stv2_<function>`` the block made."""
        return sum(line.strip() == f"stv2_{function}" for line in self.logged)


class RedisCluster:
    """A Redis Cluster on 127.0.0.1: ``primaries`` primaries, each with ``replicas`` replicas, every node a
    ``redis-server --cluster-enabled yes`` on a free port, joined by ``redis-cli --cluster create``. A node
    that stops answering for ``node_timeout`` milliseconds fails over to one of its replicas. ``url`` names
    one primary: a registry reaches the whole cluster through it."""

    def __init__(
        self, directory: Path, primaries: int = 3, replicas: int = 1, node_timeout: int = 1000
    ) -> None:
        self.nodes: list[RedisServer] = []
        try:
            for _ in range(primaries * (1 + replicas)):
                port = free_port()
                self.nodes.append(
                    RedisServer(
                        port=port,
                        extra_arguments=(
                            "--cluster-enabled",
                            "yes",
                            "--cluster-config-file",
                            str(directory / f"nodes-{port}.conf"),
                            "--cluster-node-timeout",
                            str(node_timeout),
                            # The bus port defaults to the port plus 10,000, past 65,535 for most free ports.
                            "--cluster-port",
                            str(free_port()),
                        ),
                    )
                )
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            create = ["redis-cli", "--cluster", "create", *addresses, "--cluster-yes"]
            subprocess.run(
                [*create, "--cluster-replicas", str(replicas)],
                check=True,
                capture_output=True,
                timeout=60,
            )
            self.wait_until_healthy()
        except BaseException:
            self.stop()
            raise
        self.url = f"redis://127.0.0.1:{self.primaries()[0].port}/0"

    def wait_until_healthy(self, seconds: float = 30) -> None:
        """Waits until every live node sees every slot served and every primary has its replicas in sync."""
        deadline = time.monotonic() + seconds
        while True:
            live = [node for node in self.nodes if node.process.poll() is None]
            try:
                states = [node.cli("CLUSTER", "INFO") for node in live]
                healthy = all("cluster_state:ok" in state for state in states) and all(
                    self._replicas_in_sync(node) for node in self.primaries()
                )
            except subprocess.SubprocessError:
                healthy = False
            if healthy:
                return
            assert time.monotonic() < deadline, "the cluster did not become healthy"
            time.sleep(0.1)

    def _replicas_in_sync(self, primary: RedisServer) -> bool:
        replication = primary.cli("INFO", "replication")
        lines = [line for line in replication if line.startswith("slave") and "state=online" in line]
        wanted = next(int(line.split(":")[1]) for line in replication if line.startswith("connected_slaves:"))
        return len(lines) == wanted

    def has_failed_over(self, dead: RedisServer) -> bool:
        """Whether the live nodes agree that every slot is served, ``dead`` is marked failed (not merely
        suspected, ``fail?``) and serves no slot, and three primaries are live."""
        live = [node for node in self.nodes if node.process.poll() is None and node is not dead]
        try:
            nodes = [line.split() for line in live[0].cli("CLUSTER", "NODES")]
            dead_line = next(fields for fields in nodes if f":{dead.port}@" in fields[1])
            return (
                "fail" in dead_line[2].split(",")
                and len(dead_line) <= 8
                and all("cluster_state:ok" in node.cli("CLUSTER", "INFO") for node in live)
                and len(self.primaries()) == 3
            )
        except (subprocess.SubprocessError, StopIteration):
            return False

    def restart(self, node: RedisServer) -> None:
        """Starts a stopped node again on its port, with its cluster configuration: it rejoins the cluster (a
        primary that was replaced comes back as its successor's replica)."""
        self.nodes[self.nodes.index(node)] = node.restart()

    def primaries(self) -> list[RedisServer]:
        """The live nodes that serve slots now."""
        return [
            node
            for node in self.nodes
            if node.process.poll() is None and "role:master" in node.cli("INFO", "replication")
        ]

    def admin(self, *command: str) -> bytes:
        """Sends one command to every live node (a pause, a kill of clients, a setting), as
        ``RedisServer.admin`` does to its server, and returns the first node's answer."""
        answers = [node.admin(*command) for node in self.nodes if node.process.poll() is None]
        return answers[0]

    def cli(self, *command: str) -> list[str]:
        """Runs one command on every live node and returns their answers' lines together (``KEYS`` lists the
        keys of the whole cluster)."""
        return [line for node in self.nodes if node.process.poll() is None for line in node.cli(*command)]

    def signal(self, number: int) -> None:
        """Sends a signal to every live node: the whole cluster stops or continues at once."""
        for node in self.nodes:
            if node.process.poll() is None:
                node.signal(number)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process.poll() is None:
                node.stop()


#: Set to "cluster" to run the fault and stress tests against a Redis Cluster instead of one server
#: (``scripts/cluster_reruns.sh``).
TARGET_VARIABLE = "SUBAGENT_TRACKER_TEST_REDIS"


class SlotMigration:
    """The slot of ``key`` moved from its primary to another, as ``redis-cli --cluster reshard`` moves it:
    marked ``IMPORTING`` on the target and ``MIGRATING`` on the source, its keys moved with ``MIGRATE`` a
    few at a time, then given to the target on every node."""

    def __init__(self, cluster: RedisCluster, key: str) -> None:
        self.cluster = cluster
        primaries = cluster.primaries()
        self.slot = primaries[0].cli("CLUSTER", "KEYSLOT", key)[0]
        self.source = next(
            node for node in primaries if node.cli("CLUSTER", "COUNTKEYSINSLOT", self.slot) != ["0"]
        )
        self.target = next(node for node in primaries if node is not self.source)
        self.target_id = self.target.cli("CLUSTER", "MYID")[0]
        self.target.cli("CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.source.cli("CLUSTER", "MYID")[0])
        self.source.cli("CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.target_id)

    def move(self, *keys: str) -> None:
        """Moves ``keys`` to the target, in one ``MIGRATE``."""
        answer = self.source.cli(
            "MIGRATE", "127.0.0.1", str(self.target.port), "", "0", "5000", "KEYS", *keys
        )
        assert answer == ["OK"], answer

    def finish(self, batch: int = 20, pause: float = 0.0) -> None:
        """Moves every key left, ``batch`` at a time with ``pause`` seconds between, and gives the slot to the
        target on every node."""
        while keys := [
            key for key in self.source.cli("CLUSTER", "GETKEYSINSLOT", self.slot, str(batch)) if key
        ]:
            self.move(*keys)
            time.sleep(pause)
        for node in self.cluster.nodes:
            if node.process.poll() is None:
                node.cli("CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)


def start_target(directory: Path) -> RedisServer | RedisCluster:
    """One server, or a cluster when ``SUBAGENT_TRACKER_TEST_REDIS=cluster``."""
    if os.environ.get(TARGET_VARIABLE) == "cluster":
        return RedisCluster(directory)
    return RedisServer()


def only_on_one_server(target: RedisServer | RedisCluster, why: str) -> RedisServer:
    """Skips a test that needs what only one server has (a proxy in front of it, its own replication)."""
    if isinstance(target, RedisCluster):
        pytest.skip(f"one server only: {why}")
    return target


#: What a Redis test runs against: one server, or a cluster (reached through one node's URL).
RedisTarget = RedisServer | RedisCluster


class ThroughAsyncio:
    """An object of the asyncio API driven by blocking test code: each call is awaited, on an event loop of
    its own, and what it gives is wrapped in turn. It lets one test body check both APIs alike."""

    def __init__(self, target: object) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._target, name)
        if not callable(member):
            return member

        def call(*args: Any, **kwargs: Any) -> Any:
            async def awaited() -> Any:
                value = member(*args, **kwargs)
                return await value if inspect.isawaitable(value) else value

            return _wrapped(asyncio.run(awaited()))

        return call


def _wrapped(value: Any) -> Any:
    if type(value).__name__.startswith("AsyncRedis"):
        return ThroughAsyncio(value)
    if isinstance(value, list):
        return [_wrapped(item) for item in value]
    return value


def connect(api: str, url: str, **options: Any) -> Any:
    """A registry on ``url`` through ``api``; through the asyncio API, driven as :class:`ThroughAsyncio`."""
    if api == "blocking":
        return RedisRegistry(url, **options)
    return ThroughAsyncio(asyncio.run(_connect(url, options)))


async def _connect(url: str, options: dict[str, Any]) -> AsyncRedisRegistry:
    return await AsyncRedisRegistry.connect(url, **options)


class Worker:
    """Another OS process, a worker of the registry, driven by JSON commands; it uses the ``api`` given."""

    def __init__(self, url: str, worker_id: str, lease: float | None = None, api: Api = "blocking") -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), url, worker_id, api, *([] if lease is None else [str(lease)])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._read() == {"ready": worker_id}

    def _read(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the worker process died"
        return json.loads(line)

    def send(self, **command: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def answer(self) -> Any:
        return self._read()["answer"]

    def ask(self, **command: object) -> Any:
        self.send(**command)
        return self.answer()

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)

    def signal(self, number: int) -> None:
        os.kill(self.process.pid, number)


class Proxy:
    """A TCP proxy on loopback in front of a server, that can pass traffic, swallow it (blackhole: connections
    stay open and nothing arrives), or reset every connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.blackholed = threading.Event()
        self.cut_marker: bytes | None = None
        self.swallow_marker: bytes | None = None
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                sink.close()
                return
            if self.blackholed.is_set():
                continue
            swallowed = self.swallow_marker
            if swallowed is not None and swallowed in data:
                # The request never reaches the server; the connections drop a moment later.
                self.swallow_marker = None
                self.blackholed.set()
                threading.Timer(0.2, self._cut).start()
                continue
            marker = self.cut_marker
            cutting = marker is not None and marker in data
            if cutting:
                # The request reaches the server; its reply is swallowed, then the connections drop.
                # Swallowing starts before the request is sent, or a quick reply could pass first.
                self.cut_marker = None
                self.blackholed.set()
            try:
                sink.sendall(data)
            except OSError:
                return
            if cutting:
                threading.Timer(0.2, self._cut).start()

    def cut_after(self, marker: bytes) -> None:
        """The next request that contains ``marker`` reaches the server, but its reply never comes back: every
        connection is reset 0.2 s later, and traffic passes again."""
        self.cut_marker = marker

    def swallow(self, marker: bytes) -> None:
        """The next request that contains ``marker`` never reaches the server: traffic stops, every connection
        is reset 0.2 s later, and traffic passes again."""
        self.swallow_marker = marker

    def _cut(self) -> None:
        self.reset()
        self.blackholed.clear()

    def reset(self) -> None:
        """Closes every connection through the proxy at once (new ones are accepted)."""
        with self.lock:
            connections, self.connections = self.connections, []
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def close(self) -> None:
        self.listener.close()
        self.reset()


def until_answered(call: Callable[[], _T], seconds: float = 60) -> _T:
    """``call()``, again while it says Redis is unavailable (a restart, a slot on the move), for at most
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except RegistryUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def wait_finished(session: Any, task_id: str, timeout: float) -> Any:
    """``session.wait_subagent_task`` from blocking test code, for either API: the final snapshot."""
    if isinstance(session, ThroughAsyncio):
        return session.wait_subagent_task(task_id, timeout=timeout)

    async def finished() -> Any:
        return await session.wait_subagent_task(task_id, timeout=timeout)

    return asyncio.run(finished())
