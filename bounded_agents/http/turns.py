"""Starting a turn from an HTTP request: shared by the native route and the OpenAI-compatible
one, so both run turns exactly the same way.

The turn runs in a task of its own (`AgentModule.spawn`): a client that disconnects or a request
that is cancelled does not stop it, and its answer is stored. A streaming caller gets the turn's
events through a queue that ends with `END`; the first item is awaited here, so a turn refused
before it began (busy thread, spent quota) still answers as a plain HTTP error, not a stream.
That first item is `STARTED` once the run has begun (`on_started`, before any fold or model
call), so the stream's headers and its pings go out then: a model slow to its first token (a
reasoning model, a fold before it) does not leave a proxy with an idle connection to cut.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bounded_agents.core.loop import LoopEvent, ToolCallEvent, ToolResultEvent
from bounded_agents.core.ports import Idempotency, TextDelta, Thread
from bounded_agents.core.report import RunResult
from bounded_agents.errors import AgentError, ContentTooLarge, InvalidContent, RunFailed
from bounded_agents.http.sse import END, STARTED, TurnEnded, TurnQueue, TurnStarted

if TYPE_CHECKING:
    from bounded_agents.module import AgentModule

log = logging.getLogger("bounded_agents.http")


@dataclass(frozen=True)
class StartedTurn:
    task: asyncio.Task[RunResult]
    """The running turn; await it through `asyncio.shield` so a cancelled request leaves it be."""
    run_id: str
    """The run that answers: this turn's, or (streaming callers only; others read the result)
    the earlier turn's that this request's Idempotency-Key named. A repeated turn's events are
    its stored answer's tool calls, each with its result, then its text as one delta, then the
    end, as a provider that cannot stream would send it (or only the end, for a turn that
    failed)."""
    queue: TurnQueue | None = None
    """Its events, ending with `END` (streaming callers only)."""
    first: LoopEvent | TurnStarted | TurnEnded | None = None
    """The first item, already taken from `queue` (streaming callers only): `STARTED` for a
    run that began, else the end of a turn that never did (refused, or a key's earlier one)."""


async def start_turn(
    module: AgentModule,
    *,
    agent: str,
    thread: Thread,
    actor_id: str,
    content: str,
    stream: bool,
    run_id: str | None = None,
    idempotency: Idempotency | None = None,
    follows_run: str | None = None,
) -> StartedTurn:
    """Check `content`, then start the turn. With `stream`, wait for its first queue item
    (`STARTED` once the run has begun, or the end of a turn that never did); a turn
    refused before it began raises its error here (`ThreadBusy`, `QuotaExceeded`, and for an
    Idempotency-Key `TurnInProgress` and `IdempotencyKeyReused`)."""
    check_content(content, module.settings.max_content_bytes)
    run_id = run_id or str(uuid.uuid4())
    queue: TurnQueue | None = asyncio.Queue() if stream else None
    task: asyncio.Task[RunResult] = module.spawn(
        module.run_turn(
            agent=agent,
            thread_id=thread.id,
            actor_id=actor_id,
            content=content,
            on_event=queue.put if queue is not None else None,
            thread=thread,
            run_id=run_id,
            idempotency=idempotency,
            follows_run=follows_run,
            on_started=functools.partial(queue.put, STARTED) if queue is not None else None,
        )
    )
    task.add_done_callback(_observe)
    if queue is None:
        return StartedTurn(task, run_id)
    task.add_done_callback(lambda _t: queue.put_nowait(END))
    first = await queue.get()
    if first is END and not task.cancelled():
        error = task.exception()
        if isinstance(error, AgentError) and not isinstance(error, RunFailed):
            raise error  # refused before the run began (busy, quota): a plain HTTP error
        if isinstance(error, RunFailed) and error.run_id != run_id:
            return StartedTurn(task, error.run_id, queue, first)  # the key's failed turn
        if error is None and task.result().run_id != run_id:
            return _repeated(task, queue, task.result())
    return StartedTurn(task, run_id, queue, first)


def _repeated(task: asyncio.Task[RunResult], queue: TurnQueue, result: RunResult) -> StartedTurn:
    """The key's earlier turn's answer as a stream: its tool calls, each with its result (the
    native stream's pairs), its text in one delta, then the end, so a streamed retry ends with
    the same output as the first Response (found by attack: built from the text alone, it
    dropped the `function_call` items)."""
    answer = result.message
    results = {r.call_id: r for r in answer.tool_results}
    events: list[LoopEvent] = []
    for call in answer.tool_calls:
        events.append(ToolCallEvent(call=call))
        done = results.get(call.id)
        if done is not None:
            events.append(
                ToolResultEvent(
                    call_id=call.id,
                    name=call.name,
                    is_error=done.is_error,
                    content_chars=len(done.content),
                )
            )
    if answer.content:
        events.append(TextDelta(text=answer.content))
    for event in events[1:]:
        queue.put_nowait(event)
    queue.put_nowait(END)
    first: LoopEvent | TurnStarted | TurnEnded = events[0] if events else END
    return StartedTurn(task, result.run_id, queue, first)


def check_content(content: str, limit: int) -> None:
    """Refuse, before any work, what cannot be stored: too many UTF-8 bytes, a lone surrogate
    (JSON can spell one, "\\ud800"; UTF-8 cannot hold it), a NUL (PostgreSQL text cannot)."""
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidContent("content is not valid Unicode (it holds a lone surrogate)") from None
    if size > limit:
        raise ContentTooLarge(size, limit)
    if "\x00" in content:
        raise InvalidContent("content may not contain NUL (U+0000) characters")


def _observe(task: asyncio.Task[Any]) -> None:
    """Mark the outcome as seen: whoever awaited the task may have gone away."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("turn task ended with %r", task.exception())
