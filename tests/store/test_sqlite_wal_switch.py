"""A new SQLite connection switches its file to WAL, and SQLite refuses that switch at once
("database is locked", its busy timeout not consulted) while the file is still in rollback-
journal mode and another connection writes it: three `migrate` processes started at once on a
fresh file hit it (CI, lowest versions, once). The switch waits, as any other statement does."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import sqlalchemy as sa

from bounded_agents.cli import database_problem
from bounded_agents.store.engine import make_engine


def _hold_rollback_journal_writer(path: Path, seconds: float) -> threading.Thread:
    """A writer in the file's own rollback-journal mode, holding its write lock `seconds`."""
    holding = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (2)")
            holding.set()
            time.sleep(seconds)
            conn.execute("COMMIT")
        finally:
            conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(5)
    return thread


def _rollback_journal_file(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        conn.close()


def test_the_sqlite_probe_waits_for_a_writer_instead_of_reporting_it_locked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fresh.db"
    _rollback_journal_file(path)
    writer = _hold_rollback_journal_writer(path, 0.6)
    started = time.monotonic()
    import asyncio

    problem = asyncio.run(database_problem(f"sqlite+aiosqlite:///{path}"))
    waited = time.monotonic() - started
    writer.join()
    assert problem is None
    assert waited >= 0.4  # it waited for the writer, it did not go around it


async def test_an_engine_connection_waits_for_the_switch_and_gets_wal(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    _rollback_journal_file(path)
    writer = _hold_rollback_journal_writer(path, 0.4)
    engine = make_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.connect() as conn:
            mode = (await conn.execute(sa.text("PRAGMA journal_mode"))).scalar_one()
            rows = (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one()
    finally:
        await engine.dispose()
        writer.join()
    assert mode == "wal"
    assert rows == 2  # the writer's row: the connection read after it committed
