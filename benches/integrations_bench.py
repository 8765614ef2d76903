"""What tracking costs a framework run: one subagent run of each framework's fake-model agent, untracked and
tracked through its adapter, measured in the same run.

    python benches/integrations_bench.py            # full sizes (about a minute)
    python benches/integrations_bench.py --smoke    # tiny sizes, to check that it still runs

Each agent is built once and runs again and again, each run a new conversation (building an agent is not part
of a run, and leaving it out makes the tracker's share larger, not smaller). The model of each is the
framework's own fake, offline: pydantic-ai's ``TestModel``, the OpenAI Agents SDK's ``ScriptedModel``, and,
for LangGraph, Strands, Agno, Google ADK and CrewAI, the scripted models of the tests. CrewAI is installed
in ``.venv-crewai`` only (its pins conflict with the main environment's): measure it with that environment's
Python (``.venv-crewai/bin/python benches/integrations_bench.py --only CrewAI``). The tracked runs use an
in-memory ``Session``, and a Redis session on a local ``redis-server`` when one is installed. The agents take
turns run by run, and each figure is the median run: a shared 2-core machine drifts, and the ratio is what to
read. (The median leaves out the rare runs that a garbage collection lands in, whichever side made the
garbage.)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integrations"))

from subagent_tracker import AsyncRedisRegistry, AsyncRedisSession, RedisRegistry, Session, SubagentStatus
from subagent_tracker._demo_workers import start_redis
from subagent_tracker.integrations import TrackedSession
from subagent_tracker.integrations._support import BlockingSession

#: One run of an agent, built for a given number of runs (a scripted model is given a reply per run).
RunOnce = Callable[[], Awaitable[None]]
#: Builds a framework's agent, tracked in the session given or untracked without one.
Build = Callable[[TrackedSession | None, int], RunOnce]

REPLY = " ".join(f"word{index}" for index in range(20))


def pydantic_ai_agent(session: TrackedSession | None, runs: int) -> RunOnce:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from subagent_tracker.integrations.pydantic_ai import SubagentTracking

    capabilities = [] if session is None else [SubagentTracking(session)]
    agent = Agent(TestModel(custom_output_text=REPLY), name="researcher", capabilities=capabilities)

    async def run_once() -> None:
        await agent.run("research this")

    return run_once


def openai_agents_agent(session: TrackedSession | None, runs: int) -> RunOnce:
    from agents import Agent, Runner
    from agents.testing import ScriptedModel
    from openai_agents_fakes import text_step

    from subagent_tracker.integrations.openai_agents import tracked_run_streamed

    agent = Agent[Any](name="researcher", model=ScriptedModel([text_step(REPLY) for _ in range(runs)]))

    async def run_once() -> None:
        if session is None:
            result = Runner.run_streamed(agent, "research this")
        else:
            result = tracked_run_streamed(session, agent, "research this")
        async for _event in result.stream_events():
            pass

    return run_once


def langgraph_agent(session: TrackedSession | None, runs: int) -> RunOnce:
    from langchain_core.messages import HumanMessage
    from langgraph.graph import MessagesState
    from langgraph_fakes import agent_graph, scripted_model

    from subagent_tracker.integrations.langgraph import tracked_astream

    graph = agent_graph(scripted_model([REPLY] * runs), name="researcher")

    async def run_once() -> None:
        request: MessagesState = {"messages": [HumanMessage("research this")]}
        stream = graph.astream(request) if session is None else tracked_astream(session, graph, request)
        async for _chunk in stream:
            pass

    return run_once


def strands_agent(session: TrackedSession | None, runs: int) -> RunOnce:
    from strands import Agent
    from strands.hooks import HookCallback, HookProvider
    from strands_fakes import ScriptedModel

    from subagent_tracker.integrations.strands import SubagentHooks

    hooks: list[HookProvider | HookCallback[Any]] = [] if session is None else [SubagentHooks(session)]
    agent = Agent(model=ScriptedModel([REPLY] * runs), name="researcher", hooks=hooks, callback_handler=None)

    async def run_once() -> None:
        agent.messages.clear()  # each run a new conversation: a growing one costs more every run
        await agent.invoke_async("research this")

    return run_once


def agno_agent(session: TrackedSession | None, runs: int) -> RunOnce:
    from agno.agent import Agent
    from agno.run.cancel import set_cancellation_manager
    from agno.run.cancellation_management.in_memory_cancellation_manager import InMemoryRunCancellationManager
    from agno_fakes import ScriptedModel

    from subagent_tracker.integrations.agno import SubagentCancellationManager

    logging.disable(logging.INFO)  # Agno logs each manager installed, at INFO, whatever its level
    # Agno's manager is the process's: each run installs its own side's (untracked: Agno's default).
    manager = InMemoryRunCancellationManager() if session is None else SubagentCancellationManager(session)
    agent = Agent(name="researcher", model=ScriptedModel(steps=[REPLY] * runs), telemetry=False)

    async def run_once() -> None:
        set_cancellation_manager(manager)
        await agent.arun("research this")

    return run_once


def adk_agent(session: TrackedSession | None, runs: int) -> RunOnce:
    from adk_fakes import ScriptedLlm
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from subagent_tracker.integrations.adk import SubagentTrackerPlugin

    logging.getLogger("google_adk").setLevel(logging.ERROR)  # a warning per run of a fake model's usage
    plugins: list[BasePlugin] = [] if session is None else [SubagentTrackerPlugin(session)]
    agent = LlmAgent(name="researcher", model=ScriptedLlm(steps=[REPLY]))
    app = App(name="bench", root_agent=agent, plugins=plugins)
    service = InMemorySessionService()
    runner = Runner(app=app, session_service=service)
    message = types.Content(role="user", parts=[types.Part.from_text(text="research this")])

    async def run_once() -> None:
        chat = await service.create_session(app_name="bench", user_id="user")
        async for _event in runner.run_async(user_id="user", session_id=chat.id, new_message=message):
            pass

    return run_once


def crewai_agent(session: TrackedSession | None, runs: int) -> RunOnce:
    from crewai_fakes import crew_of

    from subagent_tracker.integrations.crewai import tracked_kickoff_async

    logging.getLogger("crewai").setLevel(logging.ERROR)  # a warning per run of a fake model's token count
    crew = crew_of("researcher", ("researcher", [REPLY], []))

    async def run_once() -> None:
        if session is None:
            await crew.kickoff_async()
        else:
            await tracked_kickoff_async(session, crew)

    return run_once


#: Each framework's agent, and the module that says whether the framework is installed here (CrewAI is in
#: .venv-crewai only, google-adk in the main environment only: run the script with each one's Python).
FRAMEWORKS: dict[str, tuple[Build, str]] = {
    "pydantic-ai": (pydantic_ai_agent, "pydantic_ai"),
    "OpenAI Agents": (openai_agents_agent, "agents"),
    "LangGraph": (langgraph_agent, "langgraph"),
    "Strands": (strands_agent, "strands"),
    "Agno": (agno_agent, "agno"),
    "Google ADK": (adk_agent, "google.adk"),
    "CrewAI": (crewai_agent, "crewai"),
}


@dataclass
class Row:
    framework: str
    untracked: float
    in_memory: float
    redis: float | None
    redis_asyncio: float | None
    #: A bare round trip: a ``PING`` through redis-py's asyncio client, taking its turn among the runs.
    ping: float | None


async def timed(run_once: RunOnce) -> float:
    started = time.perf_counter()
    await run_once()
    return time.perf_counter() - started


def bare_round_trip(url: str) -> RunOnce:
    """A ``PING`` through redis-py's asyncio client: the yardstick of what a tracked run may pay beyond
    memory. Its client is made on the loop that measures, as the registry's own calls are awaited there."""
    import redis.asyncio

    client: redis.asyncio.Redis | None = None

    async def ping() -> None:
        nonlocal client
        if client is None:
            client = redis.asyncio.Redis.from_url(url)
        await cast(Awaitable[bool], client.ping())

    return ping


async def measure(
    build: Build, sessions: dict[str, TrackedSession], runs: int, url: str | None
) -> list[float]:
    """The median seconds of one run, untracked first, then tracked in each session, then a bare round trip
    (with a Redis ``url``).

    The agents (and the round trip) take turns run by run, in an order that rotates: whatever drifts on a
    shared machine (another tenant, the CPU's clock, a warmer cache) weighs on each side alike, and the round
    trip is measured between framework runs, as a tracked run's calls are."""
    warm_up = max(runs // 10, 1)
    agents = [build(None, runs + warm_up)] + [build(session, runs + warm_up) for session in sessions.values()]
    if url is not None:
        agents.append(bare_round_trip(url))
    for run_once in agents:
        for _ in range(warm_up):
            await run_once()
    samples: list[list[float]] = [[] for _ in agents]
    for turn in range(runs):
        for offset in range(len(agents)):
            index = (turn + offset) % len(agents)
            samples[index].append(await timed(agents[index]))
    return [statistics.median(figures) for figures in samples]


def check_every_run_completed(framework: str, sessions: dict[str, BlockingSession]) -> None:
    """A broken adapter would be measured as a fast one: every tracked run must have completed."""
    for kind, session in sessions.items():
        if session.pending_subagent_tasks() or any(
            task.status != SubagentStatus.COMPLETED for task in session.subagent_tasks()
        ):
            raise SystemExit(f"{framework}: a tracked run in the {kind} session did not complete")


def print_table(rows: list[Row]) -> None:
    print(
        "| framework | untracked run | tracked, in memory | overhead "
        "| tracked, Redis (blocking API) | overhead | tracked, Redis (asyncio API) | overhead |"
    )
    print("|---|---|---|---|---|---|---|---|")

    def cells(figure: float | None, untracked: float) -> str:
        if figure is None:
            return "n/a | "
        return f"{figure * 1e6:,.0f} µs | {(figure / untracked - 1) * 100:+.1f}%"

    for row in rows:
        print(
            f"| {row.framework} | {row.untracked * 1e6:,.0f} µs | {cells(row.in_memory, row.untracked)} "
            f"| {cells(row.redis, row.untracked)} | {cells(row.redis_asyncio, row.untracked)} |"
        )
    measured = [row for row in rows if row.redis is not None and row.redis_asyncio is not None and row.ping]
    if not measured:
        return
    print(
        "\nBeyond the same run tracked in memory, in bare round trips (a `PING` through redis-py's asyncio "
        "client, measured in the same rotation; issue 32 asks for at most 3):\n"
    )
    print("| framework | bare round trip | blocking API | in round trips | asyncio API | in round trips |")
    print("|---|---|---|---|---|---|")
    for row in measured:
        assert row.redis is not None and row.redis_asyncio is not None and row.ping is not None
        blocking, asyncio_api = row.redis - row.in_memory, row.redis_asyncio - row.in_memory
        print(
            f"| {row.framework} | {row.ping * 1e6:,.0f} µs | {blocking * 1e6:,.0f} µs "
            f"| {blocking / row.ping:.2f} | {asyncio_api * 1e6:,.0f} µs | {asyncio_api / row.ping:.2f} |"
        )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package missing (``google``)
        return False


async def asyncio_session(url: str, session_id: str) -> AsyncRedisSession:
    registry = await AsyncRedisRegistry.connect(url)
    return await registry.session(session_id)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that everything runs")
    parser.add_argument("--only", action="append", choices=list(FRAMEWORKS), help="measure these frameworks")
    arguments = parser.parse_args()
    smoke = arguments.smoke
    runs = 3 if smoke else 2_000
    server = None
    url: str | None = None
    memory = Session(max_finished_tasks=10_000)
    sessions: dict[str, TrackedSession] = {"memory": memory}
    # What each session is read through once the runs are over, to check that every run completed.
    checked: dict[str, BlockingSession] = {"memory": memory}
    if shutil.which("redis-server") is not None:
        server, url = start_redis()
        sessions["redis"] = checked["redis"] = RedisRegistry(url).session("integrations-bench")
        sessions["redis-asyncio"] = asyncio.run(asyncio_session(url, "integrations-bench-asyncio"))
        checked["redis-asyncio"] = RedisRegistry(url).session("integrations-bench-asyncio")
    print(f"python {sys.version.split()[0]}; the median of {runs} runs of each agent, taking turns\n")
    rows = []
    try:
        for framework, (build, module) in FRAMEWORKS.items():
            if arguments.only and framework not in arguments.only:
                continue
            if framework in ("pydantic-ai", "Google ADK") and sys.version_info < (3, 11):
                print(f"{framework}: skipped, it needs Python 3.11 or later")
                continue
            if not _installed(module):
                print(f"{framework}: skipped, not installed in this environment")
                continue
            figures = asyncio.run(measure(build, sessions, runs, url))
            check_every_run_completed(framework, checked)
            redis, redis_asyncio, ping = (figures[2], figures[3], figures[4]) if url else (None, None, None)
            rows.append(Row(framework, figures[0], figures[1], redis, redis_asyncio, ping))
    finally:
        if server is not None:
            server.kill()
            server.wait()
    print_table(rows)


if __name__ == "__main__":
    main()
