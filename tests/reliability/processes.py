"""The app as a real process: `python -m app serve` in a subprocess, configured through AGENT_*
variables, so a test can kill it with SIGKILL, run two of them on one database, or read its
memory from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.providers.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]


def app_env(database_url: str, **settings: str) -> dict[str, str]:
    """An app process's environment: this one's without any AGENT_ variable (so the caller's
    shell cannot leak settings in), then the database and `settings` (AGENT_* names). Idle
    connections are kept longer than httpx keeps them (5 s), so a test's client never sends
    on one the server is closing (`tests/http/conftest.py` `SERVER_KEEP_ALIVE`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(AGENT_DATABASE_URL=database_url, AGENT_KEEP_ALIVE_SECONDS="60")
    env.update(settings)
    return env


def fake_model_env(database_url: str, model_url: str, key: str, **settings: str) -> dict[str, str]:
    """`app_env` whose model is the fake OpenAI server at `model_url`, and whose one API key,
    `key`, is alice's."""
    return app_env(
        database_url,
        AGENT_MODEL="openai",
        AGENT_OPENAI_BASE_URL=model_url,
        AGENT_OPENAI_MODEL="fake-model",
        AGENT_API_KEYS=f"{key}=alice",
        **settings,
    )


async def turn_in_flight(
    client: httpx.AsyncClient, thread_id: str, content: str, model: FakeOpenAI
) -> asyncio.Task[httpx.Response]:
    """POST a turn and return it (still running) once its model call has reached `model`, when
    the run's `load:thread` checkpoint is written; give up waiting after 10 s (the caller
    asserts on `model.requests`)."""
    turn = asyncio.create_task(
        client.post(f"/agents/assistant/threads/{thread_id}/messages", json={"content": content})
    )
    for _ in range(400):
        if model.requests:
            break
        await asyncio.sleep(0.025)
    return turn


COMMAND_SECONDS = 120


async def run_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`python *args` from the project's root with `env`, to its end (killed after
    `COMMAND_SECONDS`): a one-shot command (`-m app migrate`, `-m alembic upgrade head`) whose
    exit code and output the test reads."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(COMMAND_SECONDS):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return subprocess.CompletedProcess(list(args), proc.returncode, out.decode(), err.decode())


async def post_chunked(
    port: int, head: str, first: bytes, total: int, chunk_bytes: int = 1024 * 1024
) -> tuple[bytes, int]:
    """POST a chunked body of `total` bytes on a raw socket (no client buffers or checks it):
    `head` is the request line and headers, the first chunk starts with `first`, the rest is
    filler. Sends until the server stops reading; returns its response head and the bytes
    sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode())
    sent = 0
    body = first + b"x" * (chunk_bytes - len(first))
    with contextlib.suppress(ConnectionError):
        while sent < total:
            writer.write(f"{chunk_bytes:x}\r\n".encode() + body + b"\r\n")
            await writer.drain()
            sent += chunk_bytes
            body = b"x" * chunk_bytes
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    try:
        async with asyncio.timeout(60):
            response = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return response, sent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class App:
    """One `python -m app serve` process; its output goes to `log`."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> None:
        out = self.log.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app",
            "serve",
            "--port",
            str(self.port),
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=out,
        )
        out.close()
        async with httpx.AsyncClient(trust_env=False) as client:
            for _ in range(400):
                try:
                    if (await client.get(f"{self.url}/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                assert self.proc.returncode is None, self.log.read_text()
                await asyncio.sleep(0.05)
        raise AssertionError(f"the app did not come up:\n{self.log.read_text()}")

    def memory_kib(self, field: str) -> int:
        """A /proc/<pid>/status figure in KiB: `VmRSS` now, `VmHWM` the peak so far."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.pid}/status")

    async def kill_9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
