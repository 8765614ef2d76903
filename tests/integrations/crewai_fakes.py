"""An offline model for CrewAI's agents: :class:`ScriptedLLM` answers each model call with the next step of
its script, in the ReAct text CrewAI parses, so that the CrewAI adapter's tests run without a network.
CrewAI's telemetry and tracing are turned off before CrewAI is imported."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")

# Imported after the environment that turns its telemetry off.
from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM

#: A step of a script: the final answer's text; ``(tool, args)``, a call of that tool; or a callable that
#: returns either (called as the model answers: a user pressing stop meanwhile).
Step = str | tuple[str, dict[str, Any]] | Callable[[], Any]


def react(step: str | tuple[str, dict[str, Any]]) -> str:
    """A step in the ReAct text CrewAI parses."""
    if isinstance(step, tuple):
        name, args = step
        return f"Thought: I should use {name}\nAction: {name}\nAction Input: {json.dumps(args)}"
    return f"Thought: I know the answer\nFinal Answer: {step}"


class ScriptedLLM(BaseLLM):  # type: ignore[misc,unused-ignore]  # typed where CrewAI is installed
    """Answers model call ``n`` with step ``n`` of ``steps`` (the last again once they run out). Asked to
    stream (CrewAI streams a crew made with ``stream=True``), it sends each word of the answer as a chunk,
    ``chunk_delay`` seconds apart."""

    steps: list[Any]
    chunk_delay: float = 0.0
    calls: int = 0

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> str:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if callable(step):
            step = step()
        text = react(step)
        if self.stream:
            for word in text.split(" "):
                time.sleep(self.chunk_delay)
                self._emit_stream_chunk_event(f"{word} ", from_task=from_task, from_agent=from_agent)
        return text

    def supports_function_calling(self) -> bool:
        return False


def crew_of(name: str, *agents_and_tasks: tuple[str, list[Step], list[Any]], stream: bool = False) -> Crew:
    """A crew ``name`` of one agent per ``(role, steps, tools)``, each with one task, run in order."""
    agents = [
        Agent(
            role=role,
            goal=f"{role}'s goal",
            backstory="offline",
            llm=ScriptedLLM(model="scripted", steps=steps),
            tools=tools,
            verbose=False,
        )
        for role, steps, tools in agents_and_tasks
    ]
    tasks = [
        Task(description=f"the task of {agent.role}", expected_output="an answer", agent=agent)
        for agent in agents
    ]
    return Crew(name=name, agents=agents, tasks=tasks, verbose=False, stream=stream)
