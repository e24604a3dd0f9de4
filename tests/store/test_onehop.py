"""`bounded_agents.store.onehop`: aiosqlite with one worker-thread call per statement. Same results,
rowcounts, transactions and errors as plain aiosqlite under SQLAlchemy; fewer thread calls."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import exc

from bench.trips import count_aiosqlite
from bounded_agents.store.engine import make_engine
from bounded_agents.store.onehop import OneHopConnection

_T = sa.table("t", sa.column("id", sa.Integer), sa.column("v", sa.String))


async def test_sqlite_file_engines_use_it_and_statements_behave(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    try:
        async with engine.begin() as conn:
            raw = await conn.get_raw_connection()
            assert isinstance(raw.driver_connection, OneHopConnection)
            await conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)"))
            await conn.execute(_T.insert(), [{"id": i, "v": f"v{i}"} for i in range(1, 6)])
            updated = await conn.execute(sa.update(_T).where(_T.c.id > 3).values(v=_T.c.v + "!"))
            assert updated.rowcount == 2
            one = await conn.execute(sa.text("INSERT INTO t (v) VALUES ('new')"))
            assert one.lastrowid == 6
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.select(_T).order_by(_T.c.id))).all()
            assert [tuple(r) for r in rows][-3:] == [(4, "v4!"), (5, "v5!"), (6, "new")]
            result = await conn.execute(sa.select(_T.c.v).order_by(_T.c.id))
            assert result.fetchone() == ("v1",)
            assert result.fetchmany(2) == [("v2",), ("v3",)]
            assert [r[0] for r in result] == ["v4!", "v5!", "new"]
        # a failing statement raises the driver's error, and its transaction rolls back
        with pytest.raises(exc.IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(sa.text("INSERT INTO t (v) VALUES ('kept?')"))
                await conn.execute(sa.text("INSERT INTO t (v) VALUES ('v1')"))
        async with engine.connect() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar()
            assert count == 6
    finally:
        await engine.dispose()


async def test_one_thread_call_per_statement_and_none_for_an_idle_rollback(
    tmp_path: Path,
) -> None:
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))
        calls: list[str] = []
        with count_aiosqlite(calls):
            async with engine.connect() as conn:  # a read: no transaction, no ROLLBACK call
                await conn.execute(sa.select(_T))
        assert len(calls) == 1, calls
        calls.clear()
        with count_aiosqlite(calls):
            async with engine.begin() as conn:  # a write: the statement, then COMMIT
                await conn.execute(_T.insert().values(v="x"))
        assert len(calls) == 2, calls
        calls.clear()
        with count_aiosqlite(calls), pytest.raises(RuntimeError):
            async with engine.begin() as conn:  # an abandoned write still rolls back
                await conn.execute(_T.insert().values(v="gone"))
                raise RuntimeError
        assert len(calls) == 2, calls
        async with engine.connect() as conn:
            assert (await conn.execute(sa.select(_T.c.v))).scalars().all() == ["x"]
    finally:
        await engine.dispose()


async def test_a_connection_closed_by_a_cancelled_read_is_not_handed_out_again(
    tmp_path: Path,
) -> None:
    """A client that leaves an SSE stream cancels its handler through an anyio cancel scope,
    which cancels every await again, SQLAlchemy's clean-up included. A read cancelled mid-
    statement makes SQLAlchemy invalidate the connection, and that close is cancelled too:
    aiosqlite marks the connection closed, but SQLAlchemy before 2.0.55 keeps it in its record,
    and returning it to the pool needs no ROLLBACK (no transaction is open), which is the only
    call that would have found it closed. The pool then handed it out, and its next statement
    failed ("Connection closed", a 500), as CI saw after an abandoned /v1 stream."""
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'c.db'}")
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000)"
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))

        drivers: list[Any] = []

        async def read_slowly() -> None:
            async with engine.connect() as conn:
                drivers.append((await conn.get_raw_connection()).driver_connection)
                await conn.execute(sa.text(f"{slow} SELECT count(*) FROM c"))

        async with anyio.create_task_group() as group:
            group.start_soon(read_slowly)
            await asyncio.sleep(0.05)
            group.cancel_scope.cancel()
        # the cancelled statement runs on in the worker thread: wait for it, as its end is
        # handed to this event loop, which must still be open then
        (driver,) = drivers
        await asyncio.to_thread(getattr(driver, "_thread", driver).join, 30)
        gc.collect()
        connections = [await engine.connect() for _ in range(4)]  # the pooled one among them
        try:
            for conn in connections:
                assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar() == 0
        finally:
            for conn in connections:
                await conn.close()
        await engine.dispose()
        # and nothing is left waiting: with SQLAlchemy 2.1 and aiosqlite 0.22 the cancelled
        # close stopped the worker thread twice, and the second stop's future never resolved,
        # so the event loop's shutdown (uvicorn's, pytest's) waited for it forever
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            _, pending = await asyncio.wait(others, timeout=5)
            assert not pending, pending
    finally:
        await engine.dispose()
