"""A bad port or provider URL stops `python -m app serve` with one line naming the variable
(exit 2), as docs/settings.md promises. Found by attack: `AGENT_PORT=70000` passed the settings
and stopped `serve` with uvicorn's traceback (`OverflowError: bind(): port must be 0-65535`),
exit 1, after the app had started and migrated its database; a base URL with a placeholder
port, with httpx's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_line_exit_2(env: dict[str, str], *args: str) -> str:
    """`python -m app serve` with `env`: it must stop with exit 2 and one line, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "serve", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr[-600:]
    assert done.returncode == 2, done.stderr[-600:]
    [line] = done.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_port_no_socket_can_bind_stops_serve_with_one_line_naming_agent_port(
    tmp_path: Path, port: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(
        AGENT_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'port.db'}",
        AGENT_API_KEYS="key-a=alice",
        AGENT_PORT=port,
    )
    line = _one_line_exit_2(env)
    assert line.startswith("error: invalid settings: AGENT_PORT"), line


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        (
            {"AGENT_MODEL": "openai", "AGENT_OPENAI_BASE_URL": "http://localhost:PORT/v1"},
            "AGENT_OPENAI_BASE_URL",
        ),
        (
            {
                "AGENT_MODEL": "anthropic",
                "AGENT_ANTHROPIC_API_KEY": "sk-test",
                "AGENT_ANTHROPIC_BASE_URL": "https://gateway.example:PORT",
            },
            "AGENT_ANTHROPIC_BASE_URL",
        ),
    ],
    ids=["openai-base-url", "anthropic-base-url"],
)
def test_a_provider_url_with_a_placeholder_port_stops_serve_with_one_line_naming_it(
    tmp_path: Path, variables: dict[str, str], named: str
) -> None:
    """A port left as a placeholder (`http://localhost:PORT/v1`) passed the settings and
    stopped `serve` with a 53-line traceback ending `httpx.InvalidURL: Invalid port: 'PORT'`
    (raised by `providers/factory.py` `sends_cache_key` -> `httpx.URL(base_url)`), exit 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(
        AGENT_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'url.db'}",
        AGENT_API_KEYS="key-a=alice",
        **variables,
    )
    line = _one_line_exit_2(env, "--port", str(_free_port()))
    assert line.startswith("error: ") and named in line, line


def _idle_connection_closed_after(env: dict[str, str], idle: float) -> bool:
    """Starts `python -m app serve` with `env`, makes one request on a kept-alive connection,
    waits `idle` seconds and says whether the server closed that connection meanwhile."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert server.poll() is None, "serve stopped"
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.1)
        with conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            answer = b""
            while not answer.endswith(b"}"):  # the status line, headers, then a JSON body
                chunk = conn.recv(65536)
                assert chunk, answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            time.sleep(idle)
            conn.settimeout(0.5)
            try:
                return conn.recv(1) == b""
            except TimeoutError:
                return False
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize(("seconds", "closed"), [("1", True), ("30", False)])
def test_agent_keep_alive_seconds_is_how_long_serve_keeps_an_idle_connection(
    tmp_path: Path, seconds: str, closed: bool
) -> None:
    """uvicorn's 5 s default closed connections a load balancer with a 60 s idle timeout still
    meant to reuse (its client then gets a 502); the setting reaches uvicorn: at 1 s the idle
    connection is closed after 2.5 s, at 30 s it is still open."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(
        AGENT_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'keep.db'}",
        AGENT_API_KEYS="key-a=alice",
        AGENT_KEEP_ALIVE_SECONDS=seconds,
    )
    assert _idle_connection_closed_after(env, 2.5) is closed
