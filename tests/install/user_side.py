"""What a user's machine has after `pip install bounded-agents`: a virtualenv of its own, a
project with its own `app/`, the commands they type there, and a server they start.

Everything here runs as a subprocess of the user's virtualenv with the project as its working
directory and no AGENT_ variable, PYTHONPATH or VIRTUAL_ENV of this test run: whatever the
checkout would have lent it (its `app/`, its `migrations/`, its alembic.ini) must be out of
reach, or the test proves nothing about the wheel.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx

COMMAND_SECONDS = 300
"""One command (a build, an install, a migration) at most; a hang fails with its output."""
SERVER_START_SECONDS = 60
"""How long a server may take to answer /healthz: a cold import of the installed library on a
shared 2-core machine takes a few seconds, not a minute."""
SERVER_STOP_SECONDS = 15

WIRING_MARKER = (
    "<!-- the wiring example: tests/install/ runs this very block in a project of its own -->"
)
_WIRING_BLOCK = re.compile(re.escape(WIRING_MARKER) + r"\s*```python\n(.*?)\n```", re.DOTALL)

_COPY_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", ".venv-*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*.db*"
)


def wiring_block(readme: str) -> str:
    """The README's wiring example: the python block right after its marker comment."""
    found = _WIRING_BLOCK.search(readme)
    if found is None:
        raise AssertionError(f"README.md has no ```python block after {WIRING_MARKER!r}")
    return found.group(1) + "\n"


@dataclass(frozen=True)
class Built:
    wheel: Path
    output: str
    """pip's output, verbose so that it holds the build backend's own (setuptools' warnings)."""


def build_wheel(root: Path, work: Path) -> Built:
    """`pip wheel --no-deps` of a copy of `root`, as `pip install .` of a fresh clone builds it.

    The copy leaves out what a build or an editable install leaves behind in a checkout
    (build/, *.egg-info, virtualenvs): setuptools packs whatever sits in build/lib, so a stale
    module there would ship in the wheel, and a build in the checkout would write into it."""
    source = work / "source"
    shutil.copytree(root, source, ignore=_COPY_IGNORED)
    out = work / "wheel"
    done = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(source)], work
    )
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {out}, found {wheels}"
    return Built(wheels[0], done.stdout + done.stderr)


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def user_env(venv: Path, **settings: str) -> dict[str, str]:
    """The environment of a shell with `venv` activated: this run's own AGENT_ settings,
    PYTHONPATH and virtualenv removed, `settings` (AGENT_* names) added."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_") and k not in dropped}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env.update(settings)
    return env


def run(
    command: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`command` to its end (killed after `COMMAND_SECONDS`); a non-zero exit fails with its
    output."""
    done = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )
    assert done.returncode == 0, (
        f"{command} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`uvicorn app.main:app` started in the user's project, its output in `log`."""

    def __init__(self, venv: Path, project: Path, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(venv / "bin" / "uvicorn"), "app.main:app", "--port", str(self.port)],
                cwd=project,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + SERVER_START_SECONDS
        with httpx.Client(trust_env=False, timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"uvicorn exited {self.proc.returncode} before answering:\n" + self.output()
                    )
                try:
                    if client.get(f"{self.url}/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        raise AssertionError(
            f"uvicorn did not answer in {SERVER_START_SECONDS} s:\n{self.output()}"
        )

    def stop(self) -> None:
        """SIGTERM, as a user's Ctrl-C or a process manager would; SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(SERVER_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(SERVER_STOP_SECONDS)
