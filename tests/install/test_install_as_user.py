"""The library installed the way a user installs it, and used the way the README says: a wheel,
a virtualenv outside the clone, a project whose `app/main.py` is the README's wiring example,
`bounded-agents migrate`, `uvicorn app.main:app`. The rest of the suite imports the library
from the checkout, where a module left out of the wheel, migrations the package cannot find, or
the repository's own `app/` standing in for the user's all go unnoticed."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.install.conftest import INSTALL_ROOT
from tests.install.user_side import Built, Server, run, user_env, wheel_names

HTTP_SECONDS = 30


def _head_revision(versions: Path) -> str:
    """The revision no other revision names as its parent."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in versions.glob("*.py"):
        text = script.read_text()
        revisions.update(re.findall(r'^revision(?:: str)? = "(\w+)"', text, re.MULTILINE))
        parents.update(re.findall(r'^down_revision(?:: .*?)? = "(\w+)"', text, re.MULTILINE))
    heads = revisions - parents
    assert len(heads) == 1, f"expected one head in {versions}, found {heads}"
    return str(heads.pop())


def test_the_wheel_carries_the_library_its_migrations_typing_marker_and_templates_but_no_app(
    wheel: Path,
) -> None:
    names = wheel_names(wheel)
    library = {
        p.relative_to(INSTALL_ROOT).as_posix()
        for p in (INSTALL_ROOT / "bounded_agents").rglob("*.py")
    }
    assert library, f"no bounded_agents package in {INSTALL_ROOT}"
    assert library - names == set(), "library modules missing from the wheel"
    migrations = {
        f"bounded_agents/migrations/versions/{p.name}"
        for p in (INSTALL_ROOT / "migrations" / "versions").glob("*.py")
    }
    assert migrations, f"no migrations in {INSTALL_ROOT / 'migrations' / 'versions'}"
    assert migrations - names == set(), "migrations missing from the wheel"
    assert {"bounded_agents/migrations/env.py", "bounded_agents/migrations/script.py.mako"} <= names
    assert "bounded_agents/py.typed" in names
    templates = {
        p.relative_to(INSTALL_ROOT).as_posix()
        for p in (INSTALL_ROOT / "bounded_agents" / "http").glob("t*/*.html")
    } | {
        p.relative_to(INSTALL_ROOT).as_posix()
        for p in (INSTALL_ROOT / "bounded_agents" / "http" / "static").iterdir()
    }
    assert "bounded_agents/http/templates/base.html" in templates
    assert templates - names == set(), "templates or static files missing from the wheel"
    assert sorted(n for n in names if n.startswith("app/")) == []


LEFT_OUT_WARNING = re.compile(
    r"Package '[\w.]+' is absent from the `packages` configuration"  # setuptools now
    r"|Installing '[\w.]+' as data is deprecated"  # older setuptools
    r"|Package would be ignored"  # the banner of both
)
"""setuptools' warning that an importable directory (one of data files is one too) is missing
from `packages`: the wheel still carries its files, but every build and editable install (the
lowest-versions job's) warned, until the data directories were listed (tests/test_packaging.py
checks the configuration itself)."""


def test_the_build_warns_of_no_directory_left_out_of_packages(built: Built) -> None:
    assert "setuptools" in built.output, "pip's output holds no build backend's: not verbose?"
    found = sorted({m.group(0) for m in LEFT_OUT_WARNING.finditer(built.output)})
    assert found == [], "\n".join(found)


def test_the_users_project_imports_its_own_app_and_the_installed_library(
    user_venv: Path, user_project: Path
) -> None:
    shown = run(
        [
            str(user_venv / "bin" / "python"),
            "-c",
            "import app.main, bounded_agents; print(app.main.__file__); "
            "print(bounded_agents.__file__)",
        ],
        user_project,
        user_env(user_venv),
    )
    app_file, library_file = (Path(line) for line in shown.stdout.split())
    assert app_file == user_project / "app" / "main.py"
    assert library_file.is_relative_to(user_venv)


def test_the_installed_library_brings_no_app_package_of_its_own(
    user_venv: Path, tmp_path: Path
) -> None:
    shown = run(
        [
            str(user_venv / "bin" / "python"),
            "-c",
            "import importlib.util; print(importlib.util.find_spec('app'))",
        ],
        tmp_path,
        user_env(user_venv),
    )
    assert shown.stdout.strip() == "None"


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.request.url}: {response.text}"
    return response.json()


def test_the_readme_app_serves_a_thread_whose_tool_call_is_stored_and_windowed(
    served: Server,
) -> None:
    with httpx.Client(base_url=served.url, trust_env=False, timeout=HTTP_SECONDS) as client:
        thread = _ok(client.post("/agents/helper/threads", json={"title": "installed"}), 201)
        assert thread["agent"] == "helper"
        tid = thread["id"]
        said = _ok(client.post(f"/agents/helper/threads/{tid}/messages", json={"content": "hi"}))
        assert said["message"]["role"] == "assistant"
        assert '"hi"' in said["message"]["content"]
        shouted = _ok(
            client.post(f"/agents/helper/threads/{tid}/messages", json={"content": "/shout hello"})
        )
        assert "Tool shout returned 6 characters." in shouted["message"]["content"]
        transcript = _ok(client.get(f"/threads/{tid}/messages"))["messages"]
        window = _ok(client.get(f"/threads/{tid}/window"))

    calls = [(c["name"], c["arguments"]) for m in transcript for c in m["tool_calls"]]
    assert calls == [("shout", {"text": "hello"})]
    results = [r["content"] for m in transcript for r in m["tool_results"]]
    assert results == ["HELLO!"]
    assert [m["role"] for m in transcript][:3] == ["user", "assistant", "user"]
    assert transcript[-1]["content"] == shouted["message"]["content"]

    assert window["thread_id"] == tid
    assert window["agent"] == "helper"
    assert window["read_bound"] == 20  # the README's HistoryConfig(max_messages=20)
    assert window["dropped_read_count"] == 0
    assert window["dropped"] == []
    assert window["summarizes"] is False
    assert [m["seq"] for m in window["kept"]] == [m["seq"] for m in transcript]
    assert all(m["tokens"] > 0 for m in window["kept"])
    assert window["total_tokens"] == sum(m["tokens"] for m in window["kept"])


@pytest.mark.parametrize(
    "command",
    [["bounded-agents", "migrate"], ["python", "-m", "bounded_agents", "migrate"]],
    ids=["console-script", "python-m"],
)
def test_migrate_creates_the_tables_in_a_sqlite_file_that_did_not_exist(
    user_venv: Path, tmp_path: Path, command: list[str]
) -> None:
    """Run from an empty directory: the revisions can only come from the installed package."""
    database = tmp_path / "new" / "fresh.db"
    database.parent.mkdir()
    assert not database.exists()
    env = user_env(user_venv, AGENT_DATABASE_URL=f"sqlite+aiosqlite:///{database}")
    done = run([str(user_venv / "bin" / command[0]), *command[1:]], database.parent, env)
    assert "database at head" in done.stdout
    with sqlite3.connect(database) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        versions = db.execute("SELECT version_num FROM alembic_version").fetchall()
    assert {"threads", "messages", "runs", "alembic_version"} <= tables
    assert versions == [(_head_revision(INSTALL_ROOT / "migrations" / "versions"),)]
