"""The demo orchestrator: fans out hundreds of simulated subagents and cancels parts of them as they run.

Every figure it prints is measured in the run: cancel-to-stopped latency is ``ended_at - cancelled_at`` of
each cancelled task, stamped by the tracker at the cancel call and at the runner's reported end.

A run is a function of its seed: each subagent draws its work from a generator of its own, seeded by the
run's seed and its id, and the tasks the scenario cancels are chosen from those plans up front, so the same
seed gives the same tasks and the same cancels (only the measured latencies vary).
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeVar

from subagent_tracker import CancellationToken, Registry, Session, SubagentStatus, TaskCancelledError
from subagent_tracker._ctrl_c import ctrl_c_sets, set_before_done
from subagent_tracker._native import _quoted  # how every message quotes an id: the core's rule

_T = TypeVar("_T")

AGENTS = ("researcher", "coder", "reviewer", "summarizer", "tool-runner")
#: How long ``demo --web`` waits for the page before it starts anyway: long enough to switch to the browser,
#: short enough for a run with no browser (never a key press, which would hang a run with no terminal).
WEB_START_WAIT_SECONDS = 5.0
#: The share of subagents whose plan fails with a simulated model error, to show failures beside cancels.
FAILURE_SHARE = 0.03
#: The reason of the session cancel that Ctrl-C makes: the last lines show it.
CTRL_C_REASON = "stopped by Ctrl-C"
#: How long the scenario runs at speed 1, fan-out aside: its steps' pauses (3 + 2 + 3 * 3 s), and the runners'
#: last chunks after the deadline's cancel.
SCENARIO_SECONDS = 14.5
TOOLS = ("web_search", "read_file", "run_tests", "query_db", "fetch_url")
COLOUR = sys.stdout.isatty()
STATUS_COLOURS = {
    SubagentStatus.QUEUED: "\x1b[2m" if COLOUR else "",
    SubagentStatus.RUNNING: "\x1b[36m" if COLOUR else "",
    SubagentStatus.PAUSED: "\x1b[35m" if COLOUR else "",
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


@dataclass(frozen=True)
class Plan:
    """What one subagent will do, drawn from its own seeded generator."""

    agent: str
    slow: bool
    chunks: int
    tool_chunks: frozenset[int]
    children: int
    fails: bool


def plan_for(seed: int, task_id: str, depth: int) -> tuple[Plan, random.Random]:
    """The plan of subagent ``task_id``, and the generator it keeps drawing its timings from."""
    generator = random.Random(f"{seed}:{task_id}")
    chunks = generator.randint(6, 16)
    plan = Plan(
        agent=generator.choice(AGENTS),
        slow=generator.random() < 0.15,
        chunks=chunks,
        tool_chunks=frozenset(generator.sample(range(chunks), generator.randint(1, 3))),
        children=generator.randint(3, 6) if depth == 0 and generator.random() < 0.25 else 0,
        fails=generator.random() < FAILURE_SHARE,
    )
    return plan, generator


@dataclass
class DemoSummary:
    counts: Counter[SubagentStatus]
    latencies_ms: list[float]
    all_finished: bool
    log: list[str] = field(default_factory=list)
    #: Whether Ctrl-C was pressed: while the scenario ran, it cancelled the session with ``CTRL_C_REASON``.
    interrupted: bool = False


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
    def __init__(self, options: DemoOptions, registry: Registry | None = None) -> None:
        self.options = options
        self.session = (
            registry.session("demo", max_finished_tasks=10_000)
            if registry is not None
            else Session("demo", max_finished_tasks=10_000)
        )
        self.runners: list[asyncio.Task[None]] = []
        self.log: list[str] = []
        self.started = time.perf_counter()
        #: The subagents whose plan failed so far: the log names the first and counts the rest, so that the
        #: cancels stay readable among them.
        self.failures = 0
        #: Set by Ctrl-C: no runner starts a task after the session's cancel.
        self.stopping = False

    def scaled(self, seconds: float) -> float:
        return seconds / self.options.speed

    def note(self, message: str) -> None:
        self.log.append(f"{time.perf_counter() - self.started:5.2f}s  {message}")
        if not self.options.live:
            print(self.log[-1], flush=True)

    async def run_subagent(self, task_id: str, parent_id: str, depth: int) -> None:
        if self.stopping:
            return
        plan, generator = plan_for(self.options.seed, task_id, depth)
        handle = self.session.start_subagent_task(
            task_id,
            parent_id=parent_id,
            agent=plan.agent,
            description=f"{plan.agent} working on part of the request",
        )
        try:
            async with handle:
                token = handle.token
                for child in range(plan.children):
                    self.spawn(f"{task_id}.{child}", task_id, depth + 1)
                for chunk in range(plan.chunks):
                    # A streamed chunk, raced against the token: a cancel stops a silent stream at once.
                    pause = asyncio.ensure_future(asyncio.sleep(self.scaled(generator.uniform(0.1, 0.4))))
                    await interruptible(token, pause)
                    handle.progress(f"streamed chunk {chunk + 1}/{plan.chunks}")
                    if chunk in plan.tool_chunks:
                        tool = generator.choice(TOOLS)
                        handle.progress(f"calling {tool}")
                        duration = generator.uniform(8.0, 14.0) if plan.slow else generator.uniform(0.2, 1.0)
                        # A tool call is interrupted by the token rather than awaited to its end.
                        await interruptible(
                            token, asyncio.ensure_future(asyncio.sleep(self.scaled(duration)))
                        )
                        token.raise_if_cancelled()
                if plan.fails:
                    # A cancel that came with the last chunk wins: the task is cancelled, not failed.
                    token.raise_if_cancelled()
                    raise RuntimeError(f"{plan.agent} hit a simulated model error")
        except TaskCancelledError:
            pass  # The handle already recorded the outcome; a runner just stops.
        except RuntimeError as error:
            # The handle recorded the failure; the log says why, so that a failed task is no mystery.
            self.failures += 1
            if self.failures == 1:
                self.note(
                    f"{task_id} failed on purpose ({FAILURE_SHARE:.0%} of plans do): {error}; "
                    "the status lines count the next ones"
                )

    def spawn(self, task_id: str, parent_id: str, depth: int) -> None:
        if not self.stopping:
            self.runners.append(asyncio.ensure_future(self.run_subagent(task_id, parent_id, depth)))

    async def fan_out(self) -> None:
        for index in range(self.options.subagents):
            self.spawn(f"sub-{index:03d}", "orchestrator", 0)
            if index % 20 == 19:
                await asyncio.sleep(self.scaled(0.03))
        # The plans say how many children the subagents start (one level: children start none).
        seed, subagents = self.options.seed, self.options.subagents
        children = sum(plan_for(seed, f"sub-{index:03d}", 0)[0].children for index in range(subagents))
        self.note(
            f"fanned out {subagents} subagents; {children} more are their children, so the session tracks "
            f"{1 + subagents + children} tasks with the orchestrator"
        )

    def targets(self) -> tuple[str | None, str | None]:
        """The subagents the scenario cancels, chosen from the seeded plans: a slow one with no children (by
        id), and the slow parent with the most slow children (a subtree), so both still run when cancelled."""
        seed = self.options.seed
        ids = [f"sub-{index:03d}" for index in range(self.options.subagents)]
        plans = [(task_id, plan_for(seed, task_id, 0)[0]) for task_id in ids]
        lone = next((task_id for task_id, plan in plans if plan.slow and plan.children == 0), None)
        parents = [
            (sum(plan_for(seed, f"{task_id}.{child}", 1)[0].slow for child in range(plan.children)), task_id)
            for task_id, plan in plans
            if plan.slow and plan.children > 0
        ]
        return lone, max(parents)[1] if parents else None

    async def scenario(self) -> None:
        by_id, subtree = self.targets()
        orchestrator = self.session.start_subagent_task("orchestrator", agent="orchestrator")
        async with orchestrator:
            try:
                await self.fan_out()
                await asyncio.sleep(self.scaled(3.0))
                if by_id is not None:
                    self.session.cancel_subagent_task(by_id, reason="user stopped this subagent")
                    self.note(f"cancelled {by_id} by id")
                await asyncio.sleep(self.scaled(2.0))
                if subtree is not None:
                    before = self.count(SubagentStatus.CANCELLED)
                    self.session.cancel_subagent_task(subtree, reason="its branch is no longer needed")
                    moved = self.count(SubagentStatus.CANCELLED) - before
                    self.note(f"cancelled the subtree under {subtree}: {moved} tasks in one call")
                self.note("letting the rest run: slow subagents' tool calls take 8 to 14 s")
                for _ in range(3):
                    await asyncio.sleep(self.scaled(3.0))
                    self.note(
                        f"{self.finished_count()} tasks finished ({self.failures} failed on purpose), "
                        f"{self.pending_count()} still running"
                    )
                stragglers = len(self.session.pending_subagent_tasks())
                moved = self.session.cancel(reason="deadline for the whole request passed")
                self.note(f"cancelled the session's stragglers: {moved} of {stragglers} still running")
            finally:
                await asyncio.gather(*self.runners, return_exceptions=True)

    def stop_on_ctrl_c(self, scenario: asyncio.Future[None]) -> None:
        """Cancels the whole session, with ``CTRL_C_REASON``, and the scenario's next steps: every runner's
        token fires, so the scenario's wait for its runners ends within a chunk's pause."""
        self.stopping = True
        moved = self.session.cancel(reason=CTRL_C_REASON)
        self.note(f"Ctrl-C: cancelled the session, {moved} tasks, with reason {_quoted(CTRL_C_REASON)}")
        scenario.cancel()

    def finished_count(self) -> int:
        return sum(1 for task in self.session.subagent_tasks() if task.finished)

    def pending_count(self) -> int:
        return len(self.session.pending_subagent_tasks())

    def count(self, status: SubagentStatus) -> int:
        return sum(1 for task in self.session.subagent_tasks() if task.status is status)

    def render(self) -> str:
        tasks = self.session.subagent_tasks()
        counts = Counter(task.status for task in tasks)
        pending = [task for task in tasks if task.status.is_pending]
        stopping = sum(1 for task in tasks if task.status is SubagentStatus.CANCELLED and not task.finished)
        width = 40
        lines = [
            f"{BOLD}subagent-tracker demo{RESET}  session {_quoted(self.session.session_id)}  "
            f"{time.perf_counter() - self.started:5.2f}s  {len(tasks)} tasks",
            "",
        ]
        for status in SubagentStatus:
            bar = "█" * round(width * counts[status] / max(1, len(tasks)))
            lines.append(f"  {STATUS_COLOURS[status]}{status.value:>10} {counts[status]:5d} {bar}{RESET}")
        lines.append(f"  {DIM}{'stopping':>10} {stopping:5d} (cancelled, runner not yet stopped){RESET}")
        log = ["", f"{BOLD}log{RESET}:"] + [f"  {entry}" for entry in self.log[-5:]]
        # The frame must fit the terminal, or redrawing it scrolls its header away.
        room = shutil.get_terminal_size().lines - 1 - len(lines) - len(log) - 3
        shown = max(0, min(8, room))
        lines += ["", f"{BOLD}pending{RESET} ({len(pending)}):"]
        for task in pending[:shown]:
            lines.append(f"  {task.task_id:<14} {task.agent or '':<12} {DIM}{task.progress or ''}{RESET}")
        lines.append(f"  {DIM}… and {len(pending) - shown} more{RESET}" if len(pending) > shown else "")
        return "\n".join(lines + log)

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
    if summary.counts[SubagentStatus.FAILED]:
        print(
            f"  {DIM}(the failed ones hit a simulated model error: {FAILURE_SHARE:.0%} of plans fail){RESET}"
        )
    latencies = summary.latencies_ms
    if latencies:
        print(f"\n  cancel-to-stopped latency, cancel call → runner's end, over {len(latencies)} tasks:")
        print(f"  {'min':>10}{'median':>10}{'max':>10}")
        print(f"  {min(latencies):>8.2f}ms{statistics.median(latencies):>8.2f}ms{max(latencies):>8.2f}ms")
    print(f"\n  every task finished: {'yes' if summary.all_finished else 'NO'}")
    if summary.interrupted:
        print(f"  stopped by Ctrl-C: the session was cancelled with reason {_quoted(CTRL_C_REASON)}")


def announce(options: DemoOptions) -> None:
    """The first line: what the run will do, from its own options."""
    seconds = (SCENARIO_SECONDS + 0.03 * (options.subagents // 20)) / options.speed
    print(
        f"an orchestrator fans out {options.subagents} subagents, some of which start children of their own, "
        f"and cancels parts of them live for about {seconds:.0f} s (Ctrl-C cancels the whole session)",
        flush=True,
    )


async def run_demo_until_interrupted(options: DemoOptions) -> DemoSummary:
    """``run_demo`` on a session of its own, which Ctrl-C cancels."""
    pressed = asyncio.Event()
    with ctrl_c_sets(pressed):
        summary = await run_demo(options, ctrl_c=pressed)
    # A Ctrl-C after the scenario's end, while the summary printed, still ends the command as Ctrl-C does.
    summary.interrupted = summary.interrupted or pressed.is_set()
    return summary


async def run_demo(
    options: DemoOptions, registry: Registry | None = None, ctrl_c: asyncio.Event | None = None
) -> DemoSummary:
    """Runs the scenario on a session of its own, or on session "demo" of ``registry`` (for the dashboard).
    When ``ctrl_c`` is set, the run cancels its session and ends as soon as its runners have stopped."""
    announce(options)
    orchestrator = Orchestrator(options, registry)
    done = asyncio.Event()
    display = asyncio.ensure_future(
        orchestrator.show_live(done) if options.live else orchestrator.show_plain(done)
    )
    scenario = asyncio.ensure_future(orchestrator.scenario())
    interrupted = False
    try:
        if ctrl_c is not None and await set_before_done(ctrl_c, scenario):
            interrupted = True
            orchestrator.stop_on_ctrl_c(scenario)
        await asyncio.wait({scenario})
        if not interrupted:
            scenario.result()
    finally:
        if not scenario.done():
            scenario.cancel()  # this run was cancelled itself
        done.set()
        await display
    elapsed = time.perf_counter() - orchestrator.started
    summary = summarize(orchestrator.session)
    summary.log = orchestrator.log
    summary.interrupted = interrupted
    print_summary(summary, len(orchestrator.session.subagent_tasks()), elapsed)
    return summary
