"""A turn as the Responses API's Server-Sent Events, the stream `responses.create(stream=True)`
parses (and `responses.stream(...)` accumulates).

    response.created, response.in_progress          the Response, `in_progress`, no output yet
    response.output_item.added / .done              a tool call the agent made (`function_call`)
    response.output_item.added                      the answer's message item, then
      response.content_part.added                   its one `output_text` part,
      response.output_text.delta ...                the answer as the model streams it,
      response.output_text.done, content_part.done, output_item.done
    response.completed                              the Response, output and usage filled

A turn that fails once it began ends with `error` (code and message) and `response.failed` (the
Response with `error` set); one refused before it began is a plain HTTP error, never a stream.
Text the model streams before it calls a tool becomes a message item of its own in this stream
(`msg_<seq>`, then `msg_<seq>_<n>` for text after a tool call). The answer is stored as one
message holding every step's text, `msg_<seq>`, after its function calls: `response.completed`
carries that output, as `responses.retrieve` and the conversation's items show it (found by
attack: it carried the streamed items, which named no stored item and other text). A streamed
`msg_<seq>_<n>` id is the stream's own; its text is in the stored `msg_<seq>`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sse_starlette import EventSourceResponse, ServerSentEvent

from bounded_agents.core.loop import AgentDefinition, LoopEvent, ToolCallEvent
from bounded_agents.core.ports import TextDelta
from bounded_agents.core.report import RunResult
from bounded_agents.errors import AgentError
from bounded_agents.http.errors import INTERNAL_MESSAGE, error_payload
from bounded_agents.http.openai.items import (
    function_call_item,
    message_item_id,
    output_items,
    response_error,
    response_out,
)
from bounded_agents.http.openai.schemas import Item, MessageItem, ResponseOut, TextPart
from bounded_agents.http.sse import PING_SECONDS, TurnEnded, TurnQueue, TurnStarted

if TYPE_CHECKING:
    from bounded_agents.module import AgentModule

log = logging.getLogger("bounded_agents.http")


@dataclass
class _OpenText:
    index: int
    item_id: str
    parts: list[str] = field(default_factory=list)


@dataclass
class ResponseStream:
    """One streamed Response: its frames numbered in order, its output as it grows."""

    module: AgentModule
    start: ResponseOut
    """The `in_progress` Response the stream opens with."""
    definition: AgentDefinition
    queue: TurnQueue
    task: asyncio.Task[RunResult]
    first: LoopEvent | TurnStarted | TurnEnded
    items: list[Item] = field(default_factory=list)
    _sequence: int = 0
    _open: _OpenText | None = None
    _calls: int = 0
    _texts: int = 0
    _answer_seq: int | None = None

    def response(self) -> EventSourceResponse:
        return EventSourceResponse(self.frames(), ping=PING_SECONDS)

    async def frames(self) -> AsyncIterator[ServerSentEvent]:
        yield self._frame("response.created", response=self._dump(self.start))
        yield self._frame("response.in_progress", response=self._dump(self.start))
        item = self.first
        while not isinstance(item, TurnEnded):
            if isinstance(item, TextDelta):
                if self._open is None:
                    for frame in await self._open_text():
                        yield frame
                assert self._open is not None
                self._open.parts.append(item.text)
                yield self._text_frame("response.output_text.delta", delta=item.text)
            elif isinstance(item, ToolCallEvent):
                for frame in self._close_text():
                    yield frame
                seq = await self._seq()
                call = function_call_item(
                    seq, self._calls, item.call.id, item.call.name, item.call.arguments
                )
                self._calls += 1
                index = len(self.items)
                self.items.append(call)
                added = call.model_copy(update={"status": "in_progress"})
                yield self._frame("response.output_item.added", output_index=index, item=added)
                yield self._frame("response.output_item.done", output_index=index, item=call)
            item = await self.queue.get()
        for frame in await self._outcome():
            yield frame

    # --- the answer's message item ---------------------------------------------------------

    async def _open_text(self) -> list[ServerSentEvent]:
        seq = await self._seq()
        item_id = (
            message_item_id(seq) if self._texts == 0 else f"{message_item_id(seq)}_{self._texts}"
        )
        self._texts += 1
        self._open = _OpenText(index=len(self.items), item_id=item_id)
        item = MessageItem(id=item_id, role="assistant", status="in_progress", content=[])
        self.items.append(item)
        return [
            self._frame("response.output_item.added", output_index=self._open.index, item=item),
            self._text_frame(
                "response.content_part.added",
                part=TextPart(type="output_text", text="", annotations=[]),
            ),
        ]

    def _close_text(self, status: str = "completed") -> list[ServerSentEvent]:
        if self._open is None:
            return []
        opened, self._open = self._open, None
        text = "".join(opened.parts)
        part = TextPart(type="output_text", text=text, annotations=[])
        item = MessageItem(
            id=opened.item_id,
            role="assistant",
            status="completed" if status == "completed" else "incomplete",
            content=[part],
        )
        self.items[opened.index] = item
        frames = [
            self._frame(
                "response.output_text.done",
                item_id=opened.item_id,
                output_index=opened.index,
                content_index=0,
                text=text,
                logprobs=[],
            ),
            self._frame(
                "response.content_part.done",
                item_id=opened.item_id,
                output_index=opened.index,
                content_index=0,
                part=part,
            ),
            self._frame("response.output_item.done", output_index=opened.index, item=item),
        ]
        return frames

    # --- the end ---------------------------------------------------------------------------

    async def _outcome(self) -> list[ServerSentEvent]:
        task = self.task
        error: BaseException | None = asyncio.CancelledError() if task.cancelled() else None
        if error is None:
            error = task.exception()
        if error is None:
            result = task.result()
            frames = []
            if self._open is None and self._texts == 0:
                # the model streamed nothing (a provider without streaming): the answer, whole
                frames += await self._open_text()
                assert self._open is not None
                self._open.parts.append(result.message.content)
                frames.append(
                    self._text_frame("response.output_text.delta", delta=result.message.content)
                )
            frames += self._close_text()
            done = self.start.model_copy(
                update={
                    "status": "completed",
                    "output": output_items(result.message),
                    "usage": response_out(
                        run_id=result.run_id,
                        agent=self.start.model,
                        thread_id=self.start.conversation.id,
                        created_at=self.start.created_at,
                        status="completed",
                        report=result.report,
                    ).usage,
                }
            )
            frames.append(self._frame("response.completed", response=self._dump(done)))
            return frames
        if isinstance(error, AgentError):
            _status, code, message, _run_id = error_payload(error)
        else:
            if not isinstance(error, asyncio.CancelledError):
                log.error("turn failed", exc_info=error)
            code, message = "internal_error", INTERNAL_MESSAGE
        frames = self._close_text(status="incomplete")
        frames.append(self._frame("error", code=code, message=message, param=None))
        failed = self.start.model_copy(
            update={
                "status": "failed",
                "output": list(self.items),
                "error": response_error(code, message),
            }
        )
        frames.append(self._frame("response.failed", response=self._dump(failed)))
        return frames

    # --- framing ---------------------------------------------------------------------------

    async def _seq(self) -> int | None:
        """The answer's `seq` (the run's user message + 1: the run holds the thread, so nothing
        else is written in between), for item ids that match the stored transcript's."""
        if self._answer_seq is None:
            store = self.module.store
            mine = await store.run_messages(self.start.conversation.id, self.start.id)
            users = [m.seq for m in mine if m.role == "user" and m.seq is not None]
            self._answer_seq = users[0] + 1 if users else None
        return self._answer_seq

    def _text_frame(self, kind: str, **payload: Any) -> ServerSentEvent:
        assert self._open is not None
        return self._frame(
            kind,
            item_id=self._open.item_id,
            output_index=self._open.index,
            content_index=0,
            **({"logprobs": []} if kind == "response.output_text.delta" else {}),
            **payload,
        )

    def _frame(self, kind: str, **payload: Any) -> ServerSentEvent:
        data = {"type": kind, "sequence_number": self._sequence}
        for key, value in payload.items():
            data[key] = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
        self._sequence += 1
        return ServerSentEvent(
            event=kind, data=json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        )

    @staticmethod
    def _dump(response: ResponseOut) -> dict[str, Any]:
        return response.model_dump(mode="json")
