"""A fake server that can stream without end: a body of `frame`s every `every` seconds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tests.providers.fake_openai import FakeOpenAI, Reply


@dataclass(frozen=True)
class Endless(Reply):
    frame: bytes = b""
    every: float = 0.05


class EndlessOpenAI(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self.sent_frames = 0

    async def _send(self, reply: Reply, writer: asyncio.StreamWriter) -> bool:
        if not isinstance(reply, Endless):
            return await super()._send(reply, writer)
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        writer.write(head.encode())
        while True:
            writer.write(f"{len(reply.frame):x}\r\n".encode() + reply.frame + b"\r\n")
            await writer.drain()
            self.sent_frames += 1
            await asyncio.sleep(reply.every)
