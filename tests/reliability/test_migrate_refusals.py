"""`python -m app migrate` / `serve` against databases an operator really meets: one from a
newer release (the code rolled back), a search language PostgreSQL lacks (each was Alembic's
or a migration's traceback, attack round 5: now one line), three migrates at once."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from bounded_agents.store import migrate
from tests.reliability.processes import app_env, free_port, run_command


def _newer_database(path: Path) -> str:
    """A database a newer release of the app migrated (its revision unknown to this code): what
    an operator has after rolling the code back a release."""
    url = f"sqlite+aiosqlite:///{path}"
    asyncio.run(migrate.upgrade_url(url))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0021_from_a_newer_release'")
    return url


def test_migrate_on_a_database_from_a_newer_release_is_one_line(tmp_path: Path) -> None:
    url = _newer_database(tmp_path / "newer.db")
    done = asyncio.run(run_command(app_env(url), "-m", "app", "migrate"))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, (
        f"exit {done.returncode}, {len(done.stderr.splitlines())} lines of stderr:\n"
        + done.stderr[-400:]
    )
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "a newer release migrated this database" in done.stderr


def test_serve_on_a_database_from_a_newer_release_is_one_line(tmp_path: Path) -> None:
    url = _newer_database(tmp_path / "newer.db")
    env = app_env(url, AGENT_PORT=str(free_port()))
    done = asyncio.run(_serve_briefly(env))
    assert "Traceback" not in done, f"{len(done.splitlines())} lines:\n{done[-600:]}"
    assert "a newer release migrated this database" in done


async def _serve_briefly(env: dict[str, str]) -> str:
    import sys

    from tests.reliability.processes import ROOT

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app",
        "serve",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.terminate()
        out, _ = await proc.communicate()
    return out.decode()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@pytest.mark.parametrize("start", ["base", "0001", "0010"])
def test_two_migrates_at_once_from_an_older_revision(
    tmp_path: Path, backend: str, start: str
) -> None:
    from tests.conftest import create_pg_database, drop_pg_database

    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    else:
        url = create_pg_database("attack5mig")
    try:
        if start != "base":
            asyncio.run(migrate.upgrade_url(url, start))

        async def both() -> list:
            env = app_env(url)
            return await asyncio.gather(
                *(run_command(env, "-m", "app", "migrate") for _ in range(3))
            )

        results = asyncio.run(both())
        assert [d.returncode for d in results] == [0, 0, 0], [d.stderr[-500:] for d in results]
    finally:
        if backend == "postgres":
            drop_pg_database(url)


@pytest.mark.postgres
def test_migrate_with_a_search_language_postgres_lacks_is_one_line() -> None:
    """AGENT_SEARCH_LANGUAGE passes the settings' pattern (`klingon`), but PostgreSQL has no
    such text search configuration: migration 0012 refuses it in one line."""
    from tests.conftest import create_pg_database, drop_pg_database

    url = create_pg_database("attack5lang")
    try:
        done = asyncio.run(
            run_command(app_env(url, AGENT_SEARCH_LANGUAGE="klingon"), "-m", "app", "migrate")
        )
    finally:
        drop_pg_database(url)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, (
        f"exit {done.returncode}, {len(done.stderr.splitlines())} lines:\n{done.stderr[-300:]}"
    )
    assert done.stderr.strip().splitlines() == [
        "error: AGENT_SEARCH_LANGUAGE='klingon' is not a text search configuration of this "
        "database (SELECT cfgname FROM pg_ts_config lists them)"
    ]
