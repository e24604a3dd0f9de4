"""The framework extras as a user gets them: the plain install has none of the frameworks, and
`pip install "bounded-agents[pydantic-ai]"` into a fresh virtualenv runs its example from
docs/integrations.md (taken from the doc as it stands)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.install.conftest import INSTALL_ROOT
from tests.install.user_side import run, user_env

FRAMEWORKS = ("agents", "pydantic_ai", "langchain", "langchain_core")


def doc_example(heading: str) -> str:
    """The python block under `## {heading}` in docs/integrations.md."""
    doc = (INSTALL_ROOT / "docs" / "integrations.md").read_text()
    section = doc.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)\n```", section, re.DOTALL)
    assert found is not None, f"no python block under {heading!r}"
    return found.group(1)


def test_the_plain_install_has_none_of_the_frameworks(user_venv: Path, tmp_path: Path) -> None:
    script = (
        "import importlib.util\n"
        f"print([m for m in {FRAMEWORKS!r} if importlib.util.find_spec(m)])\n"
        "import bounded_agents.integrations\n"
    )
    shown = run([str(user_venv / "bin" / "python"), "-c", script], tmp_path, user_env(user_venv))
    assert shown.stdout.strip() == "[]"


@pytest.fixture(scope="session")
def pydantic_ai_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    venv = tmp_path_factory.mktemp("user-pydantic-ai") / "venv"
    run([sys.executable, "-m", "venv", str(venv)], venv.parent)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    run([*pip, f"{wheel}[pydantic-ai]"], venv.parent, user_env(venv))
    return venv


def test_the_pydantic_ai_extra_installs_alone_and_runs_its_example(
    pydantic_ai_venv: Path, tmp_path: Path
) -> None:
    database = tmp_path / "example.db"
    env = user_env(pydantic_ai_venv, AGENT_DATABASE_URL=f"sqlite+aiosqlite:///{database}")
    run([str(pydantic_ai_venv / "bin" / "bounded-agents"), "migrate"], tmp_path, env)
    (tmp_path / "example.py").write_text(doc_example("Pydantic AI"))
    shown = run([str(pydantic_ai_venv / "bin" / "python"), "example.py"], tmp_path, env)
    assert shown.stdout.count("sunny in Paris | rows read:") == 3
    others = (
        "import importlib.util\n"
        "print([m for m in ('agents', 'langchain_core') if importlib.util.find_spec(m)])"
    )
    assert (
        run([str(pydantic_ai_venv / "bin" / "python"), "-c", others], tmp_path, env).stdout.strip()
        == "[]"
    )
