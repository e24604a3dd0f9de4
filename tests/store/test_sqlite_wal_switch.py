"""A new SQLite connection switches its file to WAL, and SQLite refuses that switch at once
("database is locked", its busy timeout not consulted) while the file is still in rollback-
journal mode and another connection writes it: three `migrate` processes started at once on a
fresh file hit it (CI, lowest versions, once). The switch waits, as any other statement does."""

from __future__ import annotations

import asyncio
import os
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


def _open_under(folder: Path) -> list[str]:
    """The files under `folder` this process holds open: a connection left open holds its
    database file (and its worker thread). Counting every thread or descriptor instead failed
    in the whole suite, where other tests' threads end while this one runs."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if target.startswith(str(folder)):
            held.append(target)
    return held


def _settled(folder: Path) -> list[str]:
    """`_open_under` once a closed connection's worker thread has had time to end (aiosqlite's
    close does not join it): a leak never comes back down."""
    deadline = time.monotonic() + 2
    while _open_under(folder) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _open_under(folder)


def test_a_file_that_is_not_a_database_leaves_no_file_open(tmp_path: Path) -> None:
    """Every probe of such a file added a worker thread and a file handle (found by review):
    the connection SQLAlchemy never saw was closed only when the switch was refused as locked."""
    garbage = tmp_path / "not.db"
    garbage.write_bytes(b"not a database, " * 100)

    async def probe_garbage() -> None:
        for _ in range(5):
            assert await database_problem(f"sqlite+aiosqlite:///{garbage}") is not None

    asyncio.run(probe_garbage())
    assert _settled(tmp_path) == []


def test_a_wait_for_the_switch_cancelled_leaves_no_file_open(tmp_path: Path) -> None:
    """A caller's timeout (a health check's) cancelling the wait for a writer left the
    connection open (found by review)."""
    path = tmp_path / "busy.db"
    _rollback_journal_file(path)
    writer = _hold_rollback_journal_writer(path, 1.0)

    async def cancelled() -> None:
        engine = make_engine(f"sqlite+aiosqlite:///{path}")
        try:
            async with asyncio.timeout(0.3), engine.connect():
                pass
        except TimeoutError:
            pass
        finally:
            await engine.dispose()

    asyncio.run(cancelled())
    writer.join()  # the writer's own file is closed too
    assert _settled(tmp_path) == []
