"""What a start + complete costs the Redis server, in instructions (callgrind), beside two bare ``HSET``s.

The server's CPU time on a shared VM moves by a third from one minute to the next; the instructions it runs do
not. This runs ``redis-server`` under valgrind's callgrind, and counts the instructions of the whole server
process (network handling in user space included, the kernel's share not) for:

- a start + complete through ``RedisRegistry``, at steady state with the retention bound full, beside two bare
  ``HSET`` round trips and a job of a minimal Lua queue (``QUEUE_ADD``, ``QUEUE_END``: issue 32's yardstick)
  in the same run, each call after the last (no pipelining on either side);
- the same at a concurrency of 64: 64 asyncio runners on one ``AsyncRedisSession`` (whose starts and ends the
  registry coalesces), beside the queue's jobs pipelined 64 deep (64 adds in one round trip, then 64 ends);
- what a lifecycle is made of: a function call that returns at once, and each kind of command called from Lua.

Needs valgrind (Debian: ``apt-get install valgrind``); without it, it says so and exits. ``--smoke`` for tiny
sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import redis

from subagent_tracker import AsyncRedisRegistry, AsyncRedisSession, RedisRegistry
from subagent_tracker._loopback import free_port

PREFIX = "subagent-tracker:v2:{s:profile}:"

#: Commands as the server functions call them, each on the keys a lifecycle touches.
PROBES = {
    "TIME": "redis.call('TIME')",
    "HGET, one field of the session": f"redis.call('HGET', '{PREFIX}session', 'inc')",
    "HMGET, five fields of the session": (
        f"redis.call('HMGET', '{PREFIX}session', 'inc', 'closed', 'max', 'seq', 'retained')"
    ),
    "HSET, two fields of the session": f"redis.call('HSET', '{PREFIX}session', 'touched', 1, 'retained', 2)",
    "HSET, a new task's five fields": (
        f"redis.call('HSET', '{PREFIX}t:probe' .. i, 'id', 'x', 'run', '1795494714491001', "
        "'status', 'running', 'started_at', '1795494714.491001', 'worker', 'p/x')"
    ),
    "ZADD, the live index": f"redis.call('ZADD', '{PREFIX}probe-live', i, 'task' .. i)",
    "XADD, an event, trimmed": (
        f"redis.call('XADD', '{PREFIX}events', 'MAXLEN', '~', 10000, '*', 'task', 'x', 'kind', 'started', "
        "'status', 'running', 'at', '1795494714.491001')"
    ),
    "XADD, an event, untrimmed": (
        f"redis.call('XADD', '{PREFIX}events', '*', 'task', 'x', 'kind', 'started', 'status', 'running', "
        "'at', '1795494714.491001')"
    ),
}
REPEATS_PER_CALL = 20

#: The yardstick of issue 32: a minimal Lua job queue, two ``EVALSHA`` calls per job. The first adds the job
#: (a new key per job, never reused) with as many fields as a started task's hash has, indexes it and appends
#: an event; the second ends it as an end does (three fields more, out of the index, an event).
QUEUE_ADD = """
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'run', ARGV[2], 'status', 'running', 'started_at', ARGV[3],
  'worker', ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 10000, '*', 'task', ARGV[1], 'kind', 'started',
  'status', 'running', 'at', ARGV[3])
return 1
"""
QUEUE_END = """
redis.call('HSET', KEYS[1], 'status', 'completed', 'fin', '1', 'ended_at', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 10000, '*', 'task', ARGV[1], 'kind', 'ended',
  'status', 'completed', 'at', ARGV[2])
return 1
"""


def queue_job(client: redis.Redis, shas: tuple[str, str], index: int) -> None:
    """One job of the minimal queue: added, then ended, each one ``EVALSHA``."""
    keys = (f"queue:job:{index}", "queue:live", "queue:events")
    at = f"{time.time():.6f}"
    client.evalsha(shas[0], 3, *keys, f"job-{index}", str(1_795_000_000_000_000 + index), at, "p/queue")
    client.evalsha(shas[1], 3, *keys, f"job-{index}", at)


#: Runners in flight at once, and the queue's pipeline depth.
CONCURRENCY = 64


def queue_jobs_pipelined(client: redis.Redis, shas: tuple[str, str], first: int) -> None:
    """``CONCURRENCY`` jobs of the minimal queue: their adds in one pipeline, then their ends in another."""
    at = f"{time.time():.6f}"
    indexes = range(first, first + CONCURRENCY)
    adds = client.pipeline(transaction=False)
    for index in indexes:
        keys = (f"queue:job:{index}", "queue:live", "queue:events")
        adds.evalsha(shas[0], 3, *keys, f"job-{index}", str(1_795_000_000_000_000 + index), at, "p/queue")
    adds.execute()
    ends = client.pipeline(transaction=False)
    for index in indexes:
        keys = (f"queue:job:{index}", "queue:live", "queue:events")
        ends.evalsha(shas[1], 3, *keys, f"job-{index}", at)
    ends.execute()


def lifecycles_concurrently(url: str, bound: int, warm_up: int) -> Callable[[int], object]:
    """An event loop with one ``AsyncRedisSession``, warmed up with ``warm_up`` lifecycles; the action it
    returns runs ``CONCURRENCY`` runners of one lifecycle each, all at once."""
    loop = asyncio.new_event_loop()

    async def open_session() -> AsyncRedisSession:
        registry = await AsyncRedisRegistry.connect(url, worker_id="profile-async", timeout=30)
        return await registry.session("profile-async", max_finished_tasks=bound)

    session = loop.run_until_complete(open_session())

    async def lifecycle() -> None:
        handle = await session.start_subagent_task()
        await handle.complete()

    async def wave() -> None:
        await asyncio.gather(*(lifecycle() for _ in range(CONCURRENCY)))

    for _ in range(max(1, warm_up // CONCURRENCY)):
        loop.run_until_complete(wave())
    return lambda _: loop.run_until_complete(wave())


class ProfiledServer:
    """``redis-server`` on loopback under callgrind; its counters are zeroed and read around each count."""

    def __init__(self, executable: str = "redis-server") -> None:
        self.port = free_port()
        self.output = f"/tmp/subagent-tracker-callgrind.{self.port}"
        self.process = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={self.output}.%p",
                executable,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit("redis-server did not start under valgrind") from None
                time.sleep(0.2)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dumps = 0
        self.last_dump = ""
        self.background_per_second = 0.0

    def instructions(self, action: Callable[[int], object], count: int) -> float:
        """The server's instructions per call of ``action(index)``, over ``count`` calls, less what the server
        runs meanwhile for the registry's own timers (which run by the clock, and under valgrind a measurement
        takes seconds)."""
        total, elapsed = self.count(action, count)
        return (total - self.background_per_second * elapsed) / count

    def measure_background(self, seconds: float) -> None:
        """What the server runs per second with no call made: the registry's polls."""
        self.background_per_second = 0.0
        total, elapsed = self.count(lambda _: time.sleep(seconds), 1)
        self.background_per_second = total / elapsed

    def count(self, action: Callable[[int], object], count: int) -> tuple[int, float]:
        subprocess.run(["callgrind_control", "-z", str(self.process.pid)], check=True, capture_output=True)
        began = time.monotonic()
        for index in range(count):
            action(index)
        elapsed = time.monotonic() - began
        self.dumps += 1
        subprocess.run(
            ["callgrind_control", "-d", f"measure-{self.dumps}", str(self.process.pid)],
            check=True,
            capture_output=True,
        )
        dumps = sorted(glob.glob(f"{self.output}.{self.process.pid}.*"), key=os.path.getmtime)
        self.last_dump = dumps[-1]
        with open(dumps[-1]) as dump:
            found = re.search(r"^(?:summary|totals): (\d+)", dump.read(), re.MULTILINE)
        assert found is not None, "callgrind wrote no total"
        return int(found.group(1)), elapsed

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()
        for path in glob.glob(f"{self.output}.*"):
            os.remove(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that everything runs")
    parser.add_argument(
        "--redis-server",
        default="redis-server",
        help="the server to profile: Debian's has no symbols, so a build of the same version from its source "
        "(`make`) names the functions where the instructions go (callgrind_annotate on the dump kept with "
        "--keep-dump)",
    )
    parser.add_argument(
        "--keep-dump", help="copy the callgrind dump of the concurrent lifecycles' count to this path"
    )
    arguments = parser.parse_args()
    smoke = arguments.smoke
    if shutil.which("valgrind") is None or shutil.which(arguments.redis_server) is None:
        print("skipped: needs valgrind and redis-server (Debian: apt-get install valgrind redis-server)")
        return
    lifecycles, bound, calls = (20, 20, 5) if smoke else (300, 200, 100)
    server = ProfiledServer(arguments.redis_server)
    try:
        client = redis.Redis(port=server.port, socket_timeout=60)
        session = RedisRegistry(server.url, worker_id="profile", timeout=30).session(
            "profile", max_finished_tasks=bound
        )
        for _ in range(
            bound + bound // 2
        ):  # the retention bound full: every completion now evicts the oldest
            session.start_subagent_task().complete()
        server.measure_background(1.0 if smoke else 3.0)
        ours = server.instructions(lambda _: session.start_subagent_task().complete(), lifecycles)
        bare = server.instructions(
            lambda index: (
                client.hset(f"bare:{index % 100}", mapping={"status": "running"}),
                client.hset(f"bare:{index % 100}", mapping={"status": "completed"}),
            ),
            lifecycles,
        )
        shas = (str(client.script_load(QUEUE_ADD)), str(client.script_load(QUEUE_END)))
        jobs = iter(range(10**9))  # a new key per job, across the warm-up and the count
        for _ in range(bound):
            queue_job(client, shas, next(jobs))
        queue = server.instructions(lambda _: queue_job(client, shas, next(jobs)), lifecycles)
        waves = max(2, lifecycles // CONCURRENCY)
        waved = lifecycles_concurrently(server.url, bound, 2 * bound)
        concurrent = server.instructions(waved, waves) / CONCURRENCY
        if arguments.keep_dump:
            shutil.copyfile(server.last_dump, arguments.keep_dump)
        batches = iter(range(10**6, 10**9, CONCURRENCY))  # the pipelined jobs' keys: new ones too
        for _ in range(max(1, bound // CONCURRENCY)):
            queue_jobs_pipelined(client, shas, next(batches))

        def jobs_pipelined(_: int) -> None:
            queue_jobs_pipelined(client, shas, next(batches))

        pipelined = server.instructions(jobs_pipelined, waves) / CONCURRENCY
        print("| what the server runs | instructions | beside two bare HSETs | beside a queue's job |")
        print("|---|---|---|---|")
        lifecycle = "a start + complete (two function calls), retention bound full"
        print(f"| {lifecycle} | {ours:,.0f} | {ours / bare:.1f}x | {ours / queue:.2f}x |")
        minimal = "a job of the minimal Lua queue (two EVALSHA calls: HSET, ZADD, XADD; HSET, ZREM, XADD)"
        print(f"| {minimal} | {queue:,.0f} | {queue / bare:.1f}x | 1.00x |")
        print(f"| two bare HSET round trips | {bare:,.0f} | 1.0x | {bare / queue:.2f}x |")
        print()
        print(f"At a concurrency of {CONCURRENCY}:")
        print()
        print("| what the server runs, per lifecycle or job | instructions | beside a queue's job |")
        print("|---|---|---|")
        runners = f"a start + complete of {CONCURRENCY} asyncio runners (coalesced), retention bound full"
        print(f"| {runners} | {concurrent:,.0f} | {concurrent / pipelined:.2f}x |")
        queued = f"a job of the minimal Lua queue, pipelined {CONCURRENCY} deep"
        print(f"| {queued} | {pipelined:,.0f} | 1.00x |")
        print()
        library = "#!lua name=profile_probes\n" + "".join(
            f"redis.register_function('probe_{index}', function(keys, args) "
            f"for i = 1, {REPEATS_PER_CALL} do {body} end return 1 end)\n"
            for index, body in enumerate(["", *PROBES.values()])
        )
        client.function_load(library, replace=True)
        nothing = server.instructions(lambda _: client.fcall("probe_0", 1, f"{PREFIX}session"), calls)
        returns_at_once = "a function call that returns at once (FCALL, one key)"
        print(f"| {returns_at_once} | {nothing:,.0f} | {nothing / bare:.1f}x |")
        for index, name in enumerate(PROBES, start=1):

            def probe(_: int, function: str = f"probe_{index}") -> object:
                return client.fcall(function, 1, PREFIX)

            total = server.instructions(probe, calls)
            per_call = (total - nothing) / REPEATS_PER_CALL
            print(f"| {name}, called from Lua | {per_call:,.0f} | {per_call / bare:.2f}x |")
    finally:
        server.stop()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
