"""The demo app the shell blocks talk to, and the databases every block gets.

The server is the repository's own `app.main:create_app` under uvicorn, as `make run` serves
it, so `curl localhost:8000/...` in the docs is checked against the real routes and agent.
Migrating once and copying the file per block keeps a block's database fresh without paying
for Alembic on every block.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.docs.execute import Target

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
"""The environment running the tests: the blocks' `python` and `.venv/bin/...`."""
START_SECONDS = 30.0


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def reader_path(path: str) -> str:
    """PATH as a reader's fresh shell has it: no virtual environment on it (neither the tests'
    nor any other), so `python` is whatever python the system has. A block must say
    `.venv/bin/python` or `.venv/bin/bounded-agents`, as a reader must type it: with the venv
    first on PATH, `python -m app inspect` passed here and failed for readers (issue 40)."""
    kept = [
        entry
        for entry in path.split(os.pathsep)
        if entry and not (Path(entry).parent / "pyvenv.cfg").exists()
    ]
    return os.pathsep.join(kept)


def block_env(database: Path, target: Target | None) -> dict[str, str]:
    """The environment a reader of the docs has in a fresh shell of this repository: no venv
    on PATH (`reader_path`; `.venv` in the cwd is the tests' venv), the repository importable,
    the offline model (no AGENT_* of the test run leaks in), the database given, and the CLI's
    default server the one the tests started."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENT_") and k not in ("VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = reader_path(env.get("PATH", ""))
    env["PYTHONPATH"] = str(REPO)
    env["AGENT_DATABASE_URL"] = sqlite_url(database)
    if target is not None:
        env["AGENT_HOST"] = target.host
        env["AGENT_PORT"] = str(target.port)
    return env


def migrated_template(directory: Path) -> Path:
    """A SQLite file at the newest schema, made by the command the docs tell users to run."""
    database = directory / "template.db"
    result = subprocess.run(
        [sys.executable, "-m", "bounded_agents", "migrate"],
        env=block_env(database, None),
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"migrate failed:\n{result.stdout}{result.stderr}"
    return database


def copy_database(template: Path, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    database = directory / "agent.db"
    shutil.copyfile(template, database)
    return database


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def demo_server(database: Path, log: Path) -> Iterator[Target]:
    """uvicorn serving `app.main:create_app` on a free port until the block tests are done."""
    target = Target("127.0.0.1", free_port(), log)
    env = block_env(database, target)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app.main:create_app",
                "--factory",
                "--host",
                target.host,
                "--port",
                str(target.port),
            ],
            cwd=database.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_healthy(target, process, log)
        yield target
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_healthy(target: Target, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    url = f"http://{target.host}:{target.port}/healthz"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the demo server exited {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url, timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the demo server did not answer {url} in {START_SECONDS:g} s")
