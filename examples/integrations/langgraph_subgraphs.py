"""LangGraph subgraphs as tracked subagents, offline (scripted fake models).

An orchestrator graph delegates to two researcher graphs through ``tracked_subgraph_tool``, in one step. The
slow researcher is cancelled by id mid stream while the quick one finishes; the orchestrator's tool call gets
the reason and the partial output, and it finishes its turn. The whole run is streamed with
``tracked_astream``.

    python examples/integrations/langgraph_subgraphs.py
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.language_models.chat_models import agenerate_from_stream
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolCallChunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from subagent_tracker import Session
from subagent_tracker.integrations.langgraph import tracked_astream, tracked_subgraph_tool


class FakeModel(GenericFakeChatModel):
    """Streams each scripted reply a word at a time, then its tool calls; stands in for a real chat model."""

    token_delay: float = 0.01

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeModel:
        return self

    async def _astream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        reply = next(self.messages)
        reply = AIMessage(content=reply) if isinstance(reply, str) else reply
        words = str(reply.content).split(" ")
        for index, word in enumerate(words):
            await asyncio.sleep(self.token_delay)
            yield ChatGenerationChunk(
                message=AIMessageChunk(content=word if index == len(words) - 1 else f"{word} ")
            )
        for index, call in enumerate(reply.tool_calls):
            chunk = ToolCallChunk(
                name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=index
            )
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[chunk]))

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return await agenerate_from_stream(self._astream(messages))


def agent(replies: list[AIMessage | str], tools: Sequence[BaseTool] = (), name: str = "agent") -> Any:
    """A model-and-tools graph, as LangGraph documents it."""
    model = FakeModel(messages=iter(replies)).bind_tools(tools)

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_edge(START, "model")
    if tools:
        builder.add_node("tools", ToolNode(list(tools)))
        builder.add_conditional_edges("model", tools_condition)
        builder.add_edge("tools", "model")
    else:
        builder.add_edge("model", END)
    graph: CompiledStateGraph[MessagesState, None, MessagesState, MessagesState] = builder.compile(name=name)
    return graph


session = Session()
quick = tracked_subgraph_tool(
    agent(["Paris has about two million inhabitants."]),
    session,
    name="quick_researcher",
    description="Answers simple questions.",
    task_id="quick",
)
slow = tracked_subgraph_tool(
    agent(["The history of Paris begins " + "and goes on " * 200]),
    session,
    name="slow_researcher",
    description="Writes long reports.",
    task_id="slow",
)
delegate = AIMessage(
    content="",
    tool_calls=[
        {"id": "c1", "name": "quick_researcher", "args": {"input": "Population of Paris?"}},
        {"id": "c2", "name": "slow_researcher", "args": {"input": "History of Paris?"}},
    ],
)
orchestrator = agent([delegate, "Here is what my researchers found."], [quick, slow], name="orchestrator")


async def main() -> None:
    async def stop_the_slow_one() -> None:
        await asyncio.sleep(0.2)
        session.cancel_subagent_task("slow", reason="the user only wanted the population")

    stopper = asyncio.ensure_future(stop_the_slow_one())
    question = {"messages": [HumanMessage("Tell me about Paris.")]}
    async for update in tracked_astream(session, orchestrator, question, task_id="orchestrator"):
        for node, change in update.items():
            for message in change["messages"]:
                calls = [call["name"] for call in getattr(message, "tool_calls", [])]
                print(
                    f"[{node}] {message.type}: {message.text[:90]!r}" + (f" calls {calls}" if calls else "")
                )
    await stopper
    for task in session.subagent_tasks():
        print(
            f"{task.task_id:>12} {task.status.value:<9} parent={task.parent_id} result={task.result[:40]!r}"
        )


if __name__ == "__main__":
    asyncio.run(main())
