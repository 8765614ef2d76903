"""An SSE server that streams a subagent's output and cancels its task when the client disconnects.

    pip install starlette uvicorn        # or the server extra: from a clone, pip install '.[server]'
    python examples/sse_server.py        # then: curl -N http://127.0.0.1:8000/agents/demo/stream

Press Ctrl-C in curl mid-stream: the task ends CANCELLED ("client disconnected"), finished, with the text
streamed so far kept as its result. GET /agents/{task_id} shows the snapshot.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from subagent_tracker import Session, SubagentTaskHandle, TaskCancelledError

session = Session("sse-example")
WORDS = "Subagents stream their answers word by word while the orchestrator waits for them to finish".split()


async def fake_model(words: int, delay: float) -> AsyncIterator[str]:
    """A model that streams words, then falls silent for a long time (as real ones sometimes do)."""
    for index in range(words):
        await asyncio.sleep(delay)
        yield WORDS[index % len(WORDS)] + " "
    await asyncio.sleep(3600)


async def cancel_on_disconnect(request: Request, task_id: str) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    session.cancel_subagent_task(task_id, reason="client disconnected")


async def sse_events(
    request: Request, handle: SubagentTaskHandle, words: int, delay: float
) -> AsyncIterator[str]:
    watcher = asyncio.ensure_future(cancel_on_disconnect(request, handle.task_id))
    sent: list[str] = []
    try:
        async for chunk in handle.token.guard(fake_model(words, delay)):
            sent.append(chunk)
            handle.progress(f"{len(sent)} chunks streamed")
            yield f"data: {json.dumps(chunk)}\n\n"
        handle.complete("".join(sent))
    except TaskCancelledError as cancelled:
        # A late end never downgrades CANCELLED; it keeps what was produced, for diagnosis or resumption.
        handle.complete("".join(cancelled.partial or sent))
    except BaseException:
        # The server tore the response down (the client went away before the watcher saw it).
        session.cancel_subagent_task(handle.task_id, reason="client disconnected")
        handle.complete("".join(sent))
        raise
    finally:
        watcher.cancel()


async def stream(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    words = int(request.query_params.get("words", "200"))
    delay = float(request.query_params.get("delay", "0.05"))
    handle = session.start_subagent_task(task_id, agent="writer", description="streams an answer over SSE")
    return StreamingResponse(sse_events(request, handle, words, delay), media_type="text/event-stream")


async def snapshot(request: Request) -> Response:
    task = session.subagent_task(request.path_params["task_id"])
    if task is None:
        return JSONResponse({"error": "unknown task"}, status_code=404)
    fields = ("task_id", "finished", "cancel_reason", "cancel_cause", "progress", "result")
    return JSONResponse({"status": task.status.value} | {name: getattr(task, name) for name in fields})


app = Starlette(
    routes=[
        Route("/agents/{task_id}/stream", stream),
        Route("/agents/{task_id}", snapshot),
    ]
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=8000)
