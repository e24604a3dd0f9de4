"""A turn as Server-Sent Events, over sse-starlette's `EventSourceResponse`.

Events, each `data` a JSON object:

    delta        {"text"}                                   a piece of the answer (all of a
                                                            step's text at once when the
                                                            provider does not stream)
    tool_call    {"id", "name", "arguments"}                the model called a tool
    tool_result  {"call_id", "name", "is_error", "content_chars"}
    done         {"run_id", "message", "report"}            last event of a finished turn
    error        {"error": {"code", "message"}, "run_id"}   last event of a failed turn

The turn itself runs in a task of its own (`AgentModule.spawn`) and pushes events into a queue
that the response drains. A client that goes away stops only the draining: the run finishes
and its answer is stored. `iter_sse` is the small client-side reader the CLI uses.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Final

from sse_starlette import EventSourceResponse, ServerSentEvent

from bounded_agents.core.loop import LoopEvent, ToolCallEvent, ToolResultEvent
from bounded_agents.core.ports import TextDelta
from bounded_agents.core.report import RunResult
from bounded_agents.errors import AgentError
from bounded_agents.http.errors import INTERNAL_MESSAGE, error_payload
from bounded_agents.http.schemas import TurnOut

log = logging.getLogger("bounded_agents.http")

PING_SECONDS: Final = 15.0
"""Keep-alive comment interval, so proxies keep a slow turn's connection open."""


class TurnEnded:
    """Queue sentinel: the turn's task is done (its outcome is on the task)."""


class TurnStarted:
    """Queue marker: the run has begun (`on_started`), so the response may start: whatever
    happens next is an event of the stream, an answer or an `error`. Sends no frame."""


END: Final = TurnEnded()
STARTED: Final = TurnStarted()

TurnQueue = asyncio.Queue[LoopEvent | TurnStarted | TurnEnded]


def accepts_event_stream(accept: str) -> bool:
    """Whether an `Accept` header takes `text/event-stream`: listed (or `text/*`, `*/*` not
    counted: JSON stays the default) with a q-value above 0. RFC 9110 (12.4.2) makes `q=0`
    "not acceptable"; matching the substring streamed to a client that had said it cannot
    take a stream."""
    for media_range in accept.lower().split(","):
        kind, *params = (p.strip() for p in media_range.split(";"))
        if kind != "text/event-stream":
            continue
        q = next((p.partition("=")[2].strip() for p in params if p.startswith("q=")), "1")
        try:
            return float(q) > 0
        except ValueError:
            return False  # a q-value that is no number: not a clear yes
    return False


def _json(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def event_frame(event: LoopEvent) -> ServerSentEvent:
    if isinstance(event, TextDelta):
        return ServerSentEvent(event="delta", data=_json({"text": event.text}))
    if isinstance(event, ToolCallEvent):
        call = event.call
        return ServerSentEvent(
            event="tool_call",
            data=_json({"id": call.id, "name": call.name, "arguments": call.arguments}),
        )
    if isinstance(event, ToolResultEvent):
        return ServerSentEvent(event="tool_result", data=event.model_dump_json())
    raise TypeError(f"unknown loop event {type(event).__name__}")


def outcome_frame(task: asyncio.Task[RunResult]) -> ServerSentEvent:
    """`done` with the answer, or `error` with the code and, for a run that started, its id."""
    if task.cancelled():
        return ServerSentEvent(
            event="error",
            data=_json({"error": {"code": "internal_error", "message": "the turn was stopped"}}),
        )
    error = task.exception()
    if error is None:
        result = task.result()
        out = TurnOut(run_id=result.run_id, message=result.message, report=result.report)
        return ServerSentEvent(event="done", data=out.model_dump_json())
    if isinstance(error, AgentError):
        _status, code, message, run_id = error_payload(error)
    else:
        log.error("turn failed", exc_info=error)
        code, message, run_id = "internal_error", INTERNAL_MESSAGE, None
    payload: dict[str, Any] = {"error": {"code": code, "message": message}}
    if run_id is not None:
        payload["run_id"] = run_id
    return ServerSentEvent(event="error", data=_json(payload))


async def turn_events(
    first: LoopEvent | TurnStarted | TurnEnded, queue: TurnQueue, task: asyncio.Task[RunResult]
) -> AsyncIterator[ServerSentEvent]:
    item = first
    while not isinstance(item, TurnEnded):
        if not isinstance(item, TurnStarted):
            yield event_frame(item)
        item = await queue.get()
    yield outcome_frame(task)


def turn_response(
    first: LoopEvent | TurnStarted | TurnEnded, queue: TurnQueue, task: asyncio.Task[RunResult]
) -> EventSourceResponse:
    return EventSourceResponse(turn_events(first, queue, task), ping=PING_SECONDS)


def iter_sse(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event, data) of each event in a stream of text lines; comments (pings) are skipped."""
    event, data = "message", list[str]()
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield event, "\n".join(data)
