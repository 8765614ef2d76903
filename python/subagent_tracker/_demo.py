"""The demo orchestrator: fans out hundreds of simulated subagents and cancels parts of them as they run.

Every figure it prints is measured in the run: cancel-to-stopped latency is ``ended_at - cancelled_at`` of
each cancelled task, stamped by the tracker at the cancel call and at the runner's reported end.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeVar

from subagent_tracker import CancellationToken, Session, SubagentStatus, SubagentTask, TaskCancelledError

_T = TypeVar("_T")

AGENTS = ("researcher", "coder", "reviewer", "summarizer", "tool-runner")
TOOLS = ("web_search", "read_file", "run_tests", "query_db", "fetch_url")
COLOUR = sys.stdout.isatty()
STATUS_COLOURS = {
    SubagentStatus.RUNNING: "\x1b[36m" if COLOUR else "",
    SubagentStatus.COMPLETED: "\x1b[32m" if COLOUR else "",
    SubagentStatus.FAILED: "\x1b[31m" if COLOUR else "",
    SubagentStatus.CANCELLED: "\x1b[33m" if COLOUR else "",
}
RESET, BOLD, DIM = ("\x1b[0m", "\x1b[1m", "\x1b[2m") if COLOUR else ("", "", "")


@dataclass(frozen=True)
class DemoOptions:
    subagents: int = 300
    seed: int = 7
    speed: float = 1.0
    live: bool = True


@dataclass
class DemoSummary:
    counts: Counter[SubagentStatus]
    latencies_ms: list[float]
    all_finished: bool
    log: list[str] = field(default_factory=list)


async def interruptible(token: CancellationToken, work: asyncio.Future[_T]) -> _T:
    """Awaits ``work`` unless the token fires first; then cancels it and raises ``TaskCancelledError``."""
    cancelled = asyncio.ensure_future(token.cancelled())
    try:
        racers: set[asyncio.Future[Any]] = {work, cancelled}
        await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancelled.cancel()
    if not work.done():
        work.cancel()
        token.raise_if_cancelled()
    return work.result()


class Orchestrator:
    def __init__(self, options: DemoOptions) -> None:
        self.options = options
        self.random = random.Random(options.seed)
        self.session = Session("demo", max_finished_tasks=10_000)
        self.runners: list[asyncio.Task[None]] = []
        self.log: list[str] = []
        self.started = time.perf_counter()

    def scaled(self, seconds: float) -> float:
        return seconds / self.options.speed

    def note(self, message: str) -> None:
        self.log.append(f"{time.perf_counter() - self.started:5.2f}s  {message}")
        if not self.options.live:
            print(self.log[-1], flush=True)

    async def run_subagent(self, task_id: str, parent_id: str, depth: int) -> None:
        agent = self.random.choice(AGENTS)
        slow = self.random.random() < 0.12
        chunks = self.random.randint(4, 12)
        tool_chunks = set(self.random.sample(range(chunks), self.random.randint(1, 3)))
        handle = self.session.start_subagent_task(
            task_id, parent_id=parent_id, agent=agent, description=f"{agent} working on part of the request"
        )
        try:
            async with handle:
                token = handle.token
                if depth == 0 and self.random.random() < 0.25:
                    for child in range(self.random.randint(3, 6)):
                        self.spawn(f"{task_id}.{child}", task_id, depth + 1)
                for chunk in range(chunks):
                    # A streamed chunk: the token is checked at every one.
                    await asyncio.sleep(self.scaled(self.random.uniform(0.02, 0.08)))
                    token.raise_if_cancelled()
                    handle.progress(f"streamed chunk {chunk + 1}/{chunks}")
                    if chunk in tool_chunks:
                        tool = self.random.choice(TOOLS)
                        handle.progress(f"calling {tool}")
                        duration = self.random.uniform(2.5, 5.0) if slow else self.random.uniform(0.1, 0.5)
                        # A tool call is interrupted by the token rather than awaited to its end.
                        await interruptible(
                            token, asyncio.ensure_future(asyncio.sleep(self.scaled(duration)))
                        )
                        token.raise_if_cancelled()
                if self.random.random() < 0.03:
                    raise RuntimeError(f"{agent} hit a simulated model error")
        except (TaskCancelledError, RuntimeError):
            pass  # The handle already recorded the outcome; a runner just stops.

    def spawn(self, task_id: str, parent_id: str, depth: int) -> None:
        self.runners.append(asyncio.ensure_future(self.run_subagent(task_id, parent_id, depth)))

    async def fan_out(self) -> None:
        for index in range(self.options.subagents):
            self.spawn(f"sub-{index:03d}", "orchestrator", 0)
            if index % 20 == 19:
                await asyncio.sleep(self.scaled(0.03))
        self.note(f"fanned out {self.options.subagents} subagents (some with children of their own)")

    def pick_running(self, with_children: bool) -> SubagentTask | None:
        """A running subagent of the orchestrator: the one with most running children, or one with none."""
        pending = self.session.pending_subagent_tasks()
        children = Counter(task.parent_id for task in pending)
        candidates = [task for task in pending if task.parent_id == "orchestrator"]
        if with_children:
            candidates = [task for task in candidates if children[task.task_id] > 0]
            return max(candidates, key=lambda task: children[task.task_id], default=None)
        return next((task for task in candidates if children[task.task_id] == 0), None)

    async def scenario(self) -> None:
        orchestrator = self.session.start_subagent_task("orchestrator", agent="orchestrator")
        async with orchestrator:
            try:
                await self.fan_out()
                await asyncio.sleep(self.scaled(0.8))
                target = self.pick_running(with_children=False)
                if target is not None:
                    self.session.cancel_subagent_task(target.task_id, reason="user stopped this subagent")
                    self.note(f"cancelled {target.task_id} ({target.agent}) by id")
                await asyncio.sleep(self.scaled(0.3))
                subtree = self.pick_running(with_children=True)
                if subtree is not None:
                    before = self.count(SubagentStatus.CANCELLED)
                    self.session.cancel_subagent_task(
                        subtree.task_id, reason="its branch is no longer needed"
                    )
                    moved = self.count(SubagentStatus.CANCELLED) - before
                    self.note(f"cancelled the subtree under {subtree.task_id}: {moved} tasks in one call")
                await asyncio.sleep(self.scaled(2.0))
                stragglers = len(self.session.pending_subagent_tasks())
                moved = self.session.cancel(reason="deadline for the whole request passed")
                self.note(f"cancelled the session's stragglers: {moved} of {stragglers} still running")
            finally:
                await asyncio.gather(*self.runners, return_exceptions=True)

    def count(self, status: SubagentStatus) -> int:
        return sum(1 for task in self.session.subagent_tasks() if task.status is status)

    def render(self) -> str:
        tasks = self.session.subagent_tasks()
        counts = Counter(task.status for task in tasks)
        pending = [task for task in tasks if task.status is SubagentStatus.RUNNING]
        stopping = sum(1 for task in tasks if task.status is SubagentStatus.CANCELLED and not task.finished)
        width = 40
        lines = [
            f"{BOLD}subagent-tracker demo{RESET}  session {self.session.session_id!r}  "
            f"{time.perf_counter() - self.started:5.2f}s  {len(tasks)} tasks",
            "",
        ]
        for status in SubagentStatus:
            bar = "█" * round(width * counts[status] / max(1, len(tasks)))
            lines.append(f"  {STATUS_COLOURS[status]}{status.value:>10} {counts[status]:5d} {bar}{RESET}")
        lines.append(f"  {DIM}{'stopping':>10} {stopping:5d} (cancelled, runner not yet stopped){RESET}")
        lines += ["", f"{BOLD}pending{RESET} ({len(pending)}):"]
        for task in pending[:8]:
            lines.append(f"  {task.task_id:<14} {task.agent or '':<12} {DIM}{task.progress or ''}{RESET}")
        lines.append(f"  {DIM}… and {len(pending) - 8} more{RESET}" if len(pending) > 8 else "")
        lines += ["", f"{BOLD}log{RESET}:"] + [f"  {entry}" for entry in self.log[-5:]]
        return "\n".join(lines)

    async def show_live(self, done: asyncio.Event) -> None:
        previous_height = 0
        while True:
            frame = self.render()
            sys.stdout.write(("\x1b[F" * previous_height) + "\x1b[J" + frame + "\n")
            sys.stdout.flush()
            previous_height = frame.count("\n") + 1
            if done.is_set():
                return
            await asyncio.sleep(0.1)

    async def show_plain(self, done: asyncio.Event) -> None:
        while not done.is_set():
            counts = Counter(task.status for task in self.session.subagent_tasks())
            line = "  ".join(f"{status.value}={counts[status]}" for status in SubagentStatus)
            print(f"{time.perf_counter() - self.started:5.2f}s  {line}", flush=True)
            try:
                await asyncio.wait_for(done.wait(), self.scaled(0.5))
            except asyncio.TimeoutError:
                pass


def summarize(session: Session) -> DemoSummary:
    tasks = session.subagent_tasks()
    counts = Counter(task.status for task in tasks)
    latencies = [
        (task.ended_at - task.cancelled_at) * 1000
        for task in tasks
        if task.status is SubagentStatus.CANCELLED
        and task.ended_at is not None
        and task.cancelled_at is not None
    ]
    return DemoSummary(
        counts=counts, latencies_ms=latencies, all_finished=all(task.finished for task in tasks)
    )


def print_summary(summary: DemoSummary, total: int, elapsed: float) -> None:
    print(f"\n{BOLD}summary{RESET}: {total} tasks in {elapsed:.2f}s")
    print(f"  {'status':<12}{'tasks':>7}")
    for status in SubagentStatus:
        print(f"  {STATUS_COLOURS[status]}{status.value:<12}{summary.counts[status]:>7}{RESET}")
    latencies = summary.latencies_ms
    if latencies:
        print(f"\n  cancel-to-stopped latency, cancel call → runner's end, over {len(latencies)} tasks:")
        print(f"  {'min':>10}{'median':>10}{'max':>10}")
        print(f"  {min(latencies):>8.2f}ms{statistics.median(latencies):>8.2f}ms{max(latencies):>8.2f}ms")
    print(f"\n  every task finished: {'yes' if summary.all_finished else 'NO'}")


async def run_demo(options: DemoOptions) -> DemoSummary:
    orchestrator = Orchestrator(options)
    done = asyncio.Event()
    display = asyncio.ensure_future(
        orchestrator.show_live(done) if options.live else orchestrator.show_plain(done)
    )
    try:
        await orchestrator.scenario()
    finally:
        done.set()
        await display
    elapsed = time.perf_counter() - orchestrator.started
    summary = summarize(orchestrator.session)
    summary.log = orchestrator.log
    print_summary(summary, len(orchestrator.session.subagent_tasks()), elapsed)
    return summary
