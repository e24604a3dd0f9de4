"""The library as a user gets it: a wheel built once per session from the checkout (or from the
tree AGENT_INSTALL_TEST_ROOT names, to show an older tree fails), installed into a virtualenv
outside the clone, and a project of the user's own whose `app/main.py` is the README's wiring
example. Then, per database, the project migrated with `bounded-agents migrate` and served
by `uvicorn app.main:app`."""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.conftest import create_pg_database, drop_pg_database
from tests.install.user_side import Built, Server, build_wheel, run, user_env, wiring_block

INSTALL_ROOT = Path(
    os.environ.get("AGENT_INSTALL_TEST_ROOT") or Path(__file__).resolve().parents[2]
).resolve()
"""The tree the wheel is built from: this checkout unless AGENT_INSTALL_TEST_ROOT says."""

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember a failed call, so the server fixture prints the server's output with it."""
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_wheel(INSTALL_ROOT, tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="session")
def wheel(built: Built) -> Path:
    return built.wheel


@pytest.fixture(scope="session")
def user_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh virtualenv (no system site-packages) with the wheel and the dependencies it
    declares, from the configured index, as `pip install bounded-agents` would install them."""
    venv = tmp_path_factory.mktemp("user") / "venv"
    assert not venv.resolve().is_relative_to(INSTALL_ROOT)
    run([sys.executable, "-m", "venv", str(venv)], venv.parent)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    run([*pip, str(wheel)], venv.parent, user_env(venv))
    return venv


@pytest.fixture(scope="session")
def user_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project beside no clone: `app/__init__.py` and, as `app/main.py`, the README's wiring
    example, taken from the README as it stands (so the README's block is what runs)."""
    project = tmp_path_factory.mktemp("project")
    (project / "app").mkdir()
    (project / "app" / "__init__.py").write_text("")
    readme = (INSTALL_ROOT / "README.md").read_text()
    (project / "app" / "main.py").write_text(wiring_block(readme))
    return project


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database that does not exist yet (a SQLite file in tmp_path) or an empty one (a
    PostgreSQL database created here and dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'user.db'}"
        return
    url = create_pg_database("agent_install")
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def served(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    user_venv: Path,
    user_project: Path,
    database_url: str,
) -> Iterator[Server]:
    """The user's app on `database_url`: migrated by `bounded-agents migrate`, then served by
    uvicorn with migrate-on-start off, so the tables it uses are the command's work. Stopped
    afterwards; a failed test prints the server's output."""
    env = user_env(user_venv, AGENT_DATABASE_URL=database_url)
    migrated = run([str(user_venv / "bin" / "bounded-agents"), "migrate"], user_project, env)
    assert "database at head" in migrated.stdout, migrated.stdout
    server = Server(
        user_venv,
        user_project,
        {**env, "AGENT_MIGRATE_ON_START": "false"},
        tmp_path / "uvicorn.log",
    )
    try:
        server.wait_until_it_answers()
        yield server
    finally:
        server.stop()
        if request.node.stash.get(_FAILED, False):
            print(f"--- uvicorn's output ({server.log}) ---\n{server.output()}")
