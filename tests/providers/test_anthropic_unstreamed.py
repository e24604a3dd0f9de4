"""A streaming request answered with a body labelled JSON (bounded_agents/providers/anthropic:
`_unstreamed`), against a loopback server that sends as much as it is let. Found by attack on
the first version: the "bounded" read took the whole body before it checked the size (an 80 MB
body was read whole, so an endless one would have grown the process until it died), and an
event stream a proxy labels `application/json`, which the SDK reads whatever the label, was
parsed as one JSON document and failed as "not a message", a billed answer lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta
from bounded_agents.errors import ProviderBadResponse
from bounded_agents.providers.anthropic import AnthropicProvider
from bounded_agents.providers.anthropic.provider import MAX_WHOLE_MESSAGE_BYTES
from tests.providers.fake_anthropic import stream

REQUEST = ModelRequest(messages=[ChatMessage(role="user", content="hi")])


class Server:
    """A one-shot HTTP/1.1 server: a 200 with `content_type`, then `chunks()` as chunked data,
    counting what it managed to send (a client that hangs up stops it)."""

    def __init__(self, content_type: str, chunks: Callable[[], Iterator[bytes]]) -> None:
        self.content_type = content_type
        self.chunks = chunks
        self.sent = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: "
                + self.content_type.encode()
                + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            for chunk in self.chunks():
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
                self.sent += len(chunk)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _events(server: Server) -> list[TextDelta | ModelResponse]:
    provider = AnthropicProvider(
        api_key="k",
        model="claude-test",
        base_url=f"http://127.0.0.1:{server.port}",
        max_retries=0,
        timeout=30,
    )
    try:
        return [e async for e in provider.stream(REQUEST)]
    finally:
        await provider.aclose()


async def test_a_json_body_past_the_bound_is_refused_without_reading_the_rest() -> None:
    piece = b" " * (1 << 20)

    def endless_message() -> Iterator[bytes]:
        yield b'{"type": "message", "content": [], "pad": "'
        for _ in range(10 * MAX_WHOLE_MESSAGE_BYTES // len(piece)):
            yield piece
        yield b'"}'

    async with Server("application/json", endless_message) as server:
        with pytest.raises(ProviderBadResponse, match="over"):
            await _events(server)
    assert server.sent < 2 * MAX_WHOLE_MESSAGE_BYTES, f"{server.sent:,} bytes were sent"


def _event_stream() -> Iterator[bytes]:
    """A whole event stream, as the fake Anthropic server streams one."""
    streamed = stream(["stre", "amed"], input_tokens=3, output_tokens=2)
    assert streamed.chunks is not None
    return iter(streamed.chunks)


async def test_an_event_stream_labelled_json_is_still_read_as_a_stream() -> None:
    async with Server("application/json", _event_stream) as server:
        events = await _events(server)

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    [final] = [e for e in events if isinstance(e, ModelResponse)]
    assert deltas == ["stre", "amed"]
    assert final.content == "streamed"
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (3, 2)
