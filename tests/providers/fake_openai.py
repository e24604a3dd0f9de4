"""A fake OpenAI-compatible server on a real loopback socket, scripted per request.

The provider is tested over real HTTP (not a MockTransport) because the failures that matter
live in the transport: a chunked stream cut before its end, a read timeout, a connection that
keep-alive reuses after an error. The server is a minimal HTTP/1.1 implementation on
``asyncio.start_server`` in the test's own event loop, so it can misbehave on purpose (close a
chunked body half way) in ways a real framework would refuse to.

Each request pops the next scripted `Reply`; every request is recorded in `requests`.
With nothing scripted it answers 500, which a test's `assert_consumed` then reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    With `chunks` the body is sent with chunked transfer encoding, one HTTP chunk per item;
    `complete=False` then closes the connection before the terminating chunk (a cut stream).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: tuple[bytes, ...] | None = None
    complete: bool = True
    delay: float = 0.0
    """Seconds to wait before sending anything (to trigger a client timeout)."""

    @classmethod
    def json(cls, payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
        return cls.text(json.dumps(payload), status=status, headers=headers)

    @classmethod
    def text(
        cls,
        body: str,
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        return cls(
            status=status,
            headers={"Content-Type": content_type, **(headers or {})},
            body=body.encode(),
        )

    @classmethod
    def error(cls, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        """An error in OpenAI's shape: ``{"error": {"message", "type"}}``."""
        payload = {"error": {"message": message, "type": "fake_error"}}
        return cls.json(payload, status=status, headers=headers)

    @classmethod
    def sse(
        cls, events: Sequence[dict[str, Any] | str], *, done: bool = True, cut: bool = False
    ) -> Reply:
        """A streamed completion: one ``data:`` event per item, then ``data: [DONE]``.

        `done=False` leaves out the [DONE] marker but ends the body cleanly; `cut=True` closes
        the connection mid-body instead (no [DONE], no terminating chunk).
        """
        frames = [
            f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events
        ]
        if done and not cut:
            frames.append(b"data: [DONE]\n\n")
        return cls(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
            chunks=tuple(frames),
            complete=not cut,
        )


def completion(
    content: str | None = "",
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    model: str = "fake-model",
    finish_reason: str | None = "stop",
) -> dict[str, Any]:
    """A non-streamed chat completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def wire_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    model: str = "fake-model",
) -> dict[str, Any]:
    """One streamed chunk with a single choice."""
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish_reason}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [choice],
    }


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The last chunk `stream_options.include_usage` asks for: no choices, only usage."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class FakeOpenAI:
    """The server. Use through the `fake_openai` fixture (tests/providers/conftest.py)."""

    PATH = "/v1/chat/completions"
    """The path served; any other is a 404 (a subclass serves another wire format's)."""
    OTHER_PATHS: frozenset[str] = frozenset()
    """Further paths a subclass serves from the same script (a count endpoint)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.errors: list[BaseException] = []
        """Unexpected failures inside the server; the fixture fails the test on any."""
        self._replies: deque[Reply] = deque()
        self.responder: Callable[[RecordedRequest], Reply] | None = None
        """Answers a request when nothing is scripted (concurrent callers, whose order no
        script can know); None answers 500 as before."""
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    def assert_consumed(self) -> None:
        assert not self._replies, f"{len(self._replies)} scripted replies were never requested"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, host="127.0.0.1", port=0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening, end every open connection, and wait until all of them are closed."""
        if self._server is None:
            return
        self._server.close()
        for task in self._connections:
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._server.wait_closed()
        self._server = None

    # --- HTTP/1.1, just enough --------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._one_exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up (it timed out, or closed its pool): not a server fault
        except asyncio.CancelledError:
            # close() cancels open connections. Ending quietly matters on Python 3.11.7, whose
            # stream callback calls task.exception() on a cancelled task and logs an error.
            pass
        except Exception as exc:
            self.errors.append(exc)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _one_exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Read one request and answer it; False when the connection should end."""
        request_line = await reader.readline()
        if not request_line:
            return False
        method, target, _ = request_line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, value = line.decode("latin-1").split(":", 1)
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        self.requests.append(RecordedRequest(method, target, headers, body))

        if target != self.PATH and target not in self.OTHER_PATHS:
            reply = Reply.error(404, f"fake server: unknown path {target}")
        elif self._replies:
            reply = self._replies.popleft()
        elif self.responder is not None:
            reply = self.responder(self.requests[-1])
        else:
            reply = Reply.error(500, "fake server: no reply scripted for this request")
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return await self._send(reply, writer)

    async def _send(self, reply: Reply, writer: asyncio.StreamWriter) -> bool:
        head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.chunks is None:
            head.append(f"Content-Length: {len(reply.body)}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + reply.body)
            await writer.drain()
            return True
        head.append("Transfer-Encoding: chunked")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        for piece in reply.chunks:
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
        if not reply.complete:
            return False  # close without the terminating chunk: the client sees a cut body
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True
