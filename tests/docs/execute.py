"""Running one block the way a reader would: a fresh process, a scratch directory, a deadline.

Each block runs as its own process (a python script, or `bash -euo pipefail`) so that a block
is exactly what a reader pastes: nothing from the test process leaks into it, and a block that
only works after another one fails. The scratch directory is the block's cwd, so whatever it
writes (`> turn.json`) lands there and never in the clone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.docs.blocks import Block, pointed_at, shell_script

TIMEOUT_SECONDS = 60.0
OUTPUT_SHOWN = 6000
"""Characters of a failing block's output in the failure message: its end, where errors are."""


@dataclass(frozen=True)
class Outcome:
    returncode: int | None
    """None: killed at the deadline."""
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass(frozen=True)
class Target:
    """The demo server blocks are pointed at."""

    host: str
    port: int
    log: Path | None = None
    """The server's output: a block's failure shows its end (a 500's traceback is there)."""


def command(block: Block, script: Path) -> list[str]:
    if block.kind == "python":
        return [sys.executable, str(script)]
    if block.kind == "shell":
        return ["bash", "-euo", "pipefail", str(script)]
    raise ValueError(f"{block.id}: a ```{block.lang} block is not run")


def run_block(
    block: Block,
    *,
    workdir: Path,
    env: Mapping[str, str],
    target: Target | None = None,
    venv: Path | None = None,
    timeout: float = TIMEOUT_SECONDS,
) -> Outcome:
    """Run `block` with `workdir/cwd` as its cwd. `venv`, when given, is linked there as
    `.venv`, so the docs' `.venv/bin/python -m app ...` finds the tests' own interpreter."""
    cwd = workdir / "cwd"
    scripts = workdir / "script"  # beside the cwd, not in it: a block's `ls` sees only its own
    cwd.mkdir(parents=True)
    scripts.mkdir()
    if venv is not None:
        (cwd / ".venv").symlink_to(venv, target_is_directory=True)
    source = shell_script(block) if block.kind == "shell" else block.source
    if target is not None:
        source = pointed_at(source, target.host, target.port)
    script = scripts / ("block.py" if block.kind == "python" else "block.sh")
    script.write_text(source, encoding="utf-8")
    return run(command(block, script), cwd=cwd, env=env, timeout=timeout)


def run(argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> Outcome:
    """`argv` in a process group of its own: at the deadline, or once it has exited, the whole
    group goes (a block's backgrounded `curl` or server must not outlive it)."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        output, _ = process.communicate()
        returncode = None
    finally:
        _kill_group(process.pid)
    return Outcome(returncode, output.decode("utf-8", "replace"))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def failure(
    block: Block,
    outcome: Outcome,
    timeout: float = TIMEOUT_SECONDS,
    target: Target | None = None,
) -> str:
    """What a failing block's test says: which block, how it ended, the end of its output and,
    when it talked to the demo server, the end of the server's."""
    ended = (
        f"was killed after {timeout:g} s"
        if outcome.returncode is None
        else f"exited {outcome.returncode}"
    )
    message = f"{block.id} (```{block.lang}) {ended}; its output:\n{outcome.output[-OUTPUT_SHOWN:]}"
    if target is not None and target.log is not None and target.log.is_file():
        server = target.log.read_text(encoding="utf-8", errors="replace")
        message += f"\nthe demo server's output, last lines:\n{server[-OUTPUT_SHOWN:]}"
    return message
