"""The cancel latencies of the Redis benchmarks (``redis_bench.py``): a cancel from one process seen by the
runner in another, the same with its notification dropped (the reconcile path), and a bare PUBLISH to a
subscriber beside them, each across real processes on the server the benchmark starts.

Times across processes are read from ``time.monotonic`` (CLOCK_MONOTONIC, one clock for the whole machine).
"""

from __future__ import annotations

import multiprocessing
import subprocess
import time
from multiprocessing.connection import Connection

import redis

from subagent_tracker import RedisRegistry
from subagent_tracker._demo_workers import start_redis


def start_server() -> tuple[subprocess.Popen[bytes], str, int]:
    server, url = start_redis()
    return server, url, int(url.rsplit(":", 1)[1].split("/")[0])


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


# --- cancel in one process, token fired in another


def runner_process(url: str, rounds: int, connection: Connection) -> None:
    """Starts a task per round, says so, and reports when its token fired."""
    session = RedisRegistry(url, worker_id="bench-runner").session("latency")
    for index in range(rounds):
        handle = session.start_subagent_task(f"job-{index}")
        connection.send("started")
        handle.token.wait(10)
        connection.send(time.monotonic())
        handle.complete()


def cancel_latency(url: str, rounds: int, drop_pushes: bool, port: int) -> list[float]:
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=runner_process, args=(url, rounds, child))
    process.start()
    session = RedisRegistry(url, worker_id="bench-canceller").session("latency")
    admin = redis.Redis(port=port)
    samples = []
    for index in range(rounds):
        assert parent.recv() == "started"
        if drop_pushes:
            admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")  # type: ignore[no-untyped-call]
        sent = time.monotonic()
        session.cancel_subagent_task(f"job-{index}")
        fired: float = parent.recv()
        samples.append(fired - sent)
    process.join(30)
    return samples


def subscriber_process(port: int, rounds: int, connection: Connection, channel: str = "bench") -> None:
    pubsub = redis.Redis(port=port).pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(channel)
    pubsub.get_message(timeout=5)
    for _ in range(rounds):
        connection.send("ready")
        if pubsub.get_message(timeout=10) is None and pubsub.get_message(timeout=10) is None:
            # No message within the bound: the parent's recv() below must not wait for ever either.
            connection.send(float("nan"))
            return
        connection.send(time.monotonic())


def publish_latency(port: int, rounds: int) -> list[float]:
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=subscriber_process, args=(port, rounds, child)
    )
    process.start()
    client = redis.Redis(port=port)
    samples = []
    for _ in range(rounds):
        assert parent.recv() == "ready"
        sent = time.monotonic()
        client.publish("bench", "stop")
        received: float = parent.recv()
        if received != received:
            raise RuntimeError("the published message did not arrive within 20 s")
        samples.append(received - sent)
    process.join(30)
    return samples


def server_side_cancel_latency(url: str, port: int, rounds: int) -> list[float]:
    """Our cancel function called by bare redis-py, its message read by a bare redis-py subscriber: the share
    of the latency that is the server's work, without our client on either side."""
    session = RedisRegistry(url, worker_id="bench-ghost").session("server-side")
    handles = [session.start_subagent_task(f"job-{index}") for index in range(rounds)]
    client = redis.Redis(port=port, decode_responses=True)
    # The keys and channel as the store lays them out (crates/subagent-tracker-redis/src/store.rs).
    session_key = "subagent-tracker:v2:{s:server-side}:session"
    incarnation = client.hget(session_key, "inc")
    process_key = client.hget("subagent-tracker:v2:{s:server-side}:t:job-0", "worker")
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=subscriber_process, args=(port, rounds, child, f"subagent-tracker:v2:worker:{process_key}")
    )
    process.start()
    samples = []
    for handle in handles:
        assert parent.recv() == "ready"
        sent = time.monotonic()
        client.execute_command(  # type: ignore[no-untyped-call]
            # Arguments as RedisSession::cancel passes them: no record before start, whichever run; the caller
            # holds no run (the push to the worker is what is timed).
            "FCALL",
            "stv2_cancel",
            1,
            session_key,
            incarnation,
            handle.task_id,
            "stop",
            "requested",
            "",
            "",
            "",
        )
        received: float = parent.recv()
        if received != received:
            raise RuntimeError("the worker's channel carried no cancel message within 20 s")
        samples.append(received - sent)
    process.join(30)
    return samples
