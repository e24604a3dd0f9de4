"""`uvicorn app.main:app`, the README's way to serve your own app, with a bad setting or an
unreachable database: one line saying what is wrong (with host and port for the database),
and a non-zero exit, never a traceback (issue 40: 44 and 145 lines).

Each case runs uvicorn in a subprocess on a user's project laid out as the README says
(`app/main.py` building the module at import), and counts stderr's lines."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

USER_APP = """
from fastapi import FastAPI

from bounded_agents import AgentModule, HistoryConfig, agent


@agent(name="helper", system_prompt="Be brief.", history=HistoryConfig(max_messages=20))
class Helper:
    pass


module = AgentModule.for_root(agents=[Helper])
app = FastAPI(lifespan=module.lifespan)
app.include_router(module.router)
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _uvicorn(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "app").mkdir(exist_ok=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "main.py").write_text(USER_APP)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(_closed_port())],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=90,
    )


def _problem_lines(stderr: str) -> list[str]:
    """stderr without uvicorn's INFO lines (its process id, waiting for start-up)."""
    return [line for line in stderr.splitlines() if line and not line.startswith("INFO:")]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("AGENT_API_KEYS", "key1=alice;key2=bob", "AGENT_API_KEYS: pair 1 holds ';'"),
        ("AGENT_DATABASE_URL", "mysql://db/app", "AGENT_DATABASE_URL: mysql:// is not supported"),
    ],
)
def test_a_bad_setting_under_uvicorn_is_one_line_and_exit_non_zero(
    tmp_path: Path, variable: str, value: str, says: str
) -> None:
    done = _uvicorn(tmp_path, **{variable: value})
    assert done.returncode != 0
    lines = _problem_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: invalid settings: ") and says in lines[0], lines[0]
    assert "Traceback" not in done.stderr


def test_an_unreachable_database_under_uvicorn_is_one_line_with_host_and_port(
    tmp_path: Path,
) -> None:
    port = _closed_port()
    url = f"postgresql+asyncpg://app:s3cr3t@127.0.0.1:{port}/app"
    done = _uvicorn(tmp_path, AGENT_DATABASE_URL=url)
    assert done.returncode != 0
    lines = _problem_lines(done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert lines[-1] == "ERROR:    Application startup failed. Exiting.", done.stderr
    assert len(lines) == 2, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "unreachable" in lines[0], lines[0]
    assert "s3cr3t" not in done.stderr
