"""Follows every session of a registry: feeds the metrics and the chart, and tells each live page which of
its session's tasks changed.

One follower per session reads the session's event stream (in memory, or from Redis across processes) for as
long as the session exists; the session list is read again every second. A page's stream learns only *which*
tasks changed and reads their snapshots itself, so it shows the registry's state, not a state rebuilt from
events. When a follower falls behind its stream (`lagged`), it counts what it missed from a listing instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.concurrency import run_in_threadpool

from subagent_tracker.dashboard._views import RegistryLike

#: How often the list of sessions is read again.
SESSION_REFRESH_SECONDS = 1.0
#: How many seconds the chart keeps.
CHART_SECONDS = 300
#: How far a follower's `known` may outgrow its last listing before it lists the session again.
_KNOWN_SLACK = 10_000
#: How many cancels awaiting their task's end are remembered, per dashboard (older ones are forgotten).
_CANCELS_REMEMBERED = 100_000

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(eq=False)
class PageFeed:
    """What one live page of one session is owed: the ids of tasks that changed, or a full resync."""

    session_id: str
    changed: set[str] = field(default_factory=set)
    resync: bool = False
    gone: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    subscribed_at: float = field(default_factory=time.monotonic)

    def mark(self, task_id: str) -> None:
        self.changed.add(task_id)
        self.wake.set()


@dataclass
class _Second:
    starts: int = 0
    ends: int = 0
    latencies: list[float] = field(default_factory=list)


class Metrics:
    """The counters and the histogram, in a Prometheus registry of this dashboard's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.starts = Counter(
            "subagent_tracker_task_starts",
            "Tasks started (or reserved), since the dashboard started following their session.",
            registry=self.registry,
        )
        self.lifecycles = Counter(
            "subagent_tracker_task_lifecycles",
            "Tasks that finished, by final status.",
            ["status"],
            registry=self.registry,
        )
        self.cancels = Counter(
            "subagent_tracker_task_cancels",
            "Tasks cancelled (each task of a cascade counts).",
            registry=self.registry,
        )
        self.cancel_latency = Histogram(
            "subagent_tracker_cancel_to_stopped_seconds",
            "From a task's cancel until its runner stopped (the task finished).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )


@dataclass
class _Follower:
    session: Any
    task: asyncio.Task[None] | None = None
    #: Each task's (status, finished) as last counted. A transition is counted only against it, so a task seen
    #: both in a listing and in the stream is counted once.
    known: dict[str, tuple[str, bool]] = field(default_factory=dict)
    #: How many tasks the last listing held: `known` is rebuilt from a new listing once it outgrows it.
    listed: int = 0


class Watch:
    """The followers of a registry's sessions. They start on the dashboard's first request or with the app's
    lifespan; a mounted app gets no lifespan of its own, so there they run as long as the event loop."""

    def __init__(self, registry: RegistryLike) -> None:
        self.registry = registry
        self.metrics = Metrics()
        self._followers: dict[str, _Follower] = {}
        self._feeds: dict[str, set[PageFeed]] = {}
        self._cancelled_at: dict[tuple[str, str], float] = {}
        self._seconds: dict[int, _Second] = {}
        self._refresher: asyncio.Task[None] | None = None

    def ensure_started(self) -> None:
        refresher = self._refresher
        loop = asyncio.get_running_loop()
        if refresher is None or refresher.done() or refresher.get_loop() is not loop:
            self._followers.clear()
            self._refresher = loop.create_task(self._refresh_sessions())

    async def stop(self) -> None:
        tasks = [task for task in (self._refresher, *(f.task for f in self._followers.values())) if task]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._followers.clear()
        self._refresher = None

    # --- pages

    def subscribe(self, session_id: str) -> PageFeed:
        feed = PageFeed(session_id)
        self._feeds.setdefault(session_id, set()).add(feed)
        return feed

    def unsubscribe(self, feed: PageFeed) -> None:
        feeds = self._feeds.get(feed.session_id)
        if feeds is not None:
            feeds.discard(feed)
            if not feeds:
                del self._feeds[feed.session_id]

    def chart(self) -> list[dict[str, Any]]:
        newest = int(time.time())
        points = []
        for second in range(newest - CHART_SECONDS + 1, newest + 1):
            bucket = self._seconds.get(second)
            latencies = bucket.latencies if bucket else []
            points.append(
                {
                    "t": second,
                    "starts": bucket.starts if bucket else 0,
                    "ends": bucket.ends if bucket else 0,
                    "cancel_latency_p50": statistics.median(latencies) if latencies else None,
                    "cancel_latency_max": max(latencies) if latencies else None,
                }
            )
        return points

    # --- following

    async def _refresh_sessions(self) -> None:
        while True:
            read_at = time.monotonic()
            with contextlib.suppress(Exception):
                # A registry that cannot be reached (Redis down) is read again on the next round.
                current = await run_in_threadpool(self._current_sessions)
                for session_id, session in current.items():
                    follower = self._followers.get(session_id)
                    # A session closed and opened again under its id is a new session: follow the new one.
                    if (
                        follower is None
                        or not follower.task
                        or follower.task.done()
                        or follower.session != session
                    ):
                        if follower is not None and follower.task:
                            follower.task.cancel()
                        self._follow(session_id, session)
                for session_id in self._followers.keys() - current.keys():
                    gone = self._followers.pop(session_id).task
                    if gone:
                        gone.cancel()
                for session_id, feeds in self._feeds.items():
                    if session_id not in current:
                        for feed in feeds:
                            # A page that subscribed after the list was read may be newer than it.
                            if feed.subscribed_at < read_at:
                                feed.gone = True
                                feed.wake.set()
            await asyncio.sleep(SESSION_REFRESH_SECONDS)

    def _current_sessions(self) -> dict[str, Any]:
        sessions = {}
        for session_id in self.registry.sessions():
            session = self.registry.get_session(session_id)
            if session is not None:
                sessions[session_id] = session
        return sessions

    def _follow(self, session_id: str, session: Any) -> None:
        follower = _Follower(session)
        follower.task = asyncio.get_running_loop().create_task(self._read_events(session_id, follower))
        self._followers[session_id] = follower

    async def _read_events(self, session_id: str, follower: _Follower) -> None:
        while True:
            try:
                stream = await run_in_threadpool(follower.session.events)
                try:
                    # What happened before this subscription is not in the stream: count from a listing, and
                    # have pages resync.
                    await self._catch_up(session_id, follower, counting=bool(follower.known))
                    async for event in stream:
                        if event.kind == "lagged":
                            await self._catch_up(session_id, follower, counting=True)
                            continue
                        self._record(session_id, follower, event)
                        if len(follower.known) > 2 * follower.listed + _KNOWN_SLACK:
                            await self._catch_up(session_id, follower, counting=True, resync=False)
                finally:
                    stream.close()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                # Redis unreachable for a while: subscribe again.
                await asyncio.sleep(SESSION_REFRESH_SECONDS)

    async def _catch_up(
        self, session_id: str, follower: _Follower, *, counting: bool, resync: bool = True
    ) -> None:
        """Counts the transitions that the stream did not show, from the session's listing (snapshots carry
        their own times), and rebuilds `known` from it; the first listing of a session only sets the baseline.
        Then has pages resync."""
        tasks = await run_in_threadpool(follower.session.subagent_tasks)
        known: dict[str, tuple[str, bool]] = {}
        for task in tasks:
            now = known[task.task_id] = (task.status.value, task.finished)
            before = follower.known.get(task.task_id)
            if not counting or before == now:
                continue
            self._cancelled_at.pop((session_id, task.task_id), None)
            latency = None
            if task.cancelled_at is not None and task.ended_at is not None:
                latency = task.ended_at - task.cancelled_at
            self._count(before, now, task.started_at, task.ended_at, latency)
        follower.known, follower.listed = known, len(known)
        if resync:
            for feed in self._feeds.get(session_id, ()):
                feed.resync = True
                feed.wake.set()

    def _record(self, session_id: str, follower: _Follower, event: Any) -> None:
        kind, task_id, at = event.kind, event.task_id, event.timestamp
        before = follower.known.get(task_id)
        now = before or (event.status.value, False)
        if kind == "started":
            # A start of an id whose last run finished is a new run.
            before = None if before is None or before[1] else before
            now = (event.status.value, False)
            self._count(before, now, at, None, None)
        elif kind == "cancelled":
            now = ("cancelled", False)
            self._count(before, now, at, None, None)
            if len(self._cancelled_at) >= _CANCELS_REMEMBERED:
                self._cancelled_at.pop(next(iter(self._cancelled_at)))
            self._cancelled_at[(session_id, task_id)] = at
        elif kind == "ended":
            now = (event.status.value, True)
            cancelled_at = self._cancelled_at.pop((session_id, task_id), None)
            self._count(before, now, at, at, None if cancelled_at is None else at - cancelled_at)
        follower.known[task_id] = now
        for feed in self._feeds.get(session_id, ()):
            feed.mark(task_id)

    def _count(
        self,
        before: tuple[str, bool] | None,
        now: tuple[str, bool],
        started_at: float,
        ended_at: float | None,
        cancel_latency: float | None,
    ) -> None:
        """Counts one task's move from `before` (None: not seen) to `now`, each a (status, finished) pair."""
        if before is None:
            self.metrics.starts.inc()
            self._second(started_at).starts += 1
        if now[0] == "cancelled" and (before is None or before[0] != "cancelled"):
            self.metrics.cancels.inc()
        if now[1] and (before is None or not before[1]):
            self.metrics.lifecycles.labels(status=now[0]).inc()
            second = self._second(ended_at if ended_at is not None else time.time())
            second.ends += 1
            if cancel_latency is not None:
                latency = max(0.0, cancel_latency)
                self.metrics.cancel_latency.observe(latency)
                second.latencies.append(latency)

    def _second(self, timestamp: float) -> _Second:
        second = int(timestamp)
        bucket = self._seconds.get(second)
        if bucket is None:
            bucket = self._seconds[second] = _Second()
            oldest = int(time.time()) - CHART_SECONDS
            for stale in [old for old in self._seconds if old < oldest]:
                del self._seconds[stale]
        return bucket
