"""The raw-driver floor: the store's own bounded-read statement, sent straight through asyncpg
(PostgreSQL) or aiosqlite (SQLite) on one open connection. No SQLAlchemy at run time, no
pydantic: just the round trip and the driver's row decoding, fetching the same columns.

The SQL text is the store's statement compiled once, up front, with the engine's own dialect,
so both sides send the same single statement (same placeholders, same casts).

Beside it, the commit floor: the least a committed write costs through the same connection,
one transaction holding one UPDATE of one small row (BEGIN, UPDATE, COMMIT: three round trips
on asyncpg; on SQLite two worker-thread calls, the UPDATE opening the transaction, with the
app's `synchronous=NORMAL`). A turn that commits N transactions cannot cost less than N of
these, whatever its Python does: the figure the turn's overhead target is checked against.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Protocol

import aiosqlite
import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.store import onehop
from bounded_agents.store.sql import TURN_READ_LIMITED

COMMIT_TABLE = "bench_commit_floor"
_CREATE = f"CREATE TABLE IF NOT EXISTS {COMMIT_TABLE} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)"


class Floor(Protocol):
    """One open driver connection that sends the bounded read."""

    sql: str

    def args(self, thread_id: str, limit: int) -> list[Any]: ...

    async def read(self, thread_id: str, limit: int) -> Sequence[Sequence[Any]]: ...

    async def commit_one(self) -> None:
        """One committed transaction of one UPDATE (the commit floor)."""

    async def replay(self, units: Sequence[Any]) -> None:
        """`bench.turnsql` units sent as recorded, each unit one committed transaction."""

    async def close(self) -> None: ...


def compiled_turn_read(engine: AsyncEngine) -> tuple[str, list[str], dict[str, Any]]:
    """(SQL text, positional parameter names, their default values) of the store's bounded read
    as the engine's dialect renders it."""
    compiled = TURN_READ_LIMITED.compile(dialect=engine.dialect)
    names = list(compiled.positiontup or [])
    return str(compiled), names, dict(compiled.params)


def _args(names: list[str], defaults: dict[str, Any], thread_id: str, limit: int) -> list[Any]:
    values = {**defaults, "tid": thread_id, "n": limit}
    return [values[name] for name in names]


class AsyncpgFloor:
    def __init__(self, conn: asyncpg.Connection, engine: AsyncEngine) -> None:
        self.connection = conn
        self.sql, self._names, self._defaults = compiled_turn_read(engine)

    def args(self, thread_id: str, limit: int) -> list[Any]:
        return _args(self._names, self._defaults, thread_id, limit)

    @classmethod
    async def open(cls, url: str, engine: AsyncEngine) -> AsyncpgFloor:
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        conn = await asyncpg.connect(dsn)
        await conn.execute(_CREATE)
        await conn.execute(f"INSERT INTO {COMMIT_TABLE} VALUES (1, 0) ON CONFLICT DO NOTHING")
        return cls(conn, engine)

    async def commit_one(self) -> None:
        async with self.connection.transaction():
            await self.connection.execute(f"UPDATE {COMMIT_TABLE} SET n = n + $1 WHERE id = 1", 1)

    async def replay(self, units: Sequence[Any]) -> None:
        """One round trip per statement (asyncpg has no pipelining), BEGIN and COMMIT too."""
        for unit in units:
            async with self.connection.transaction():
                for s in unit.statements:
                    if s.many:
                        await self.connection.executemany(s.sql, s.args)
                    else:
                        await self.connection.fetch(s.sql, *s.args)

    async def send(self, statements: Sequence[tuple[str, list[Any]]]) -> None:
        """Statements sent one round trip each, in autocommit (`bench.turnsql.merged`)."""
        for sql, args in statements:
            await self.connection.fetch(sql, *args)

    async def read(self, thread_id: str, limit: int) -> Sequence[Sequence[Any]]:
        # conn.fetch caches the prepared statement, as SQLAlchemy's asyncpg adapter does.
        return await self.connection.fetch(self.sql, *self.args(thread_id, limit))

    async def close(self) -> None:
        await self.connection.close()


def _run_unit(conn: sqlite3.Connection, statements: Sequence[Any]) -> None:
    for s in statements:
        if s.many:
            conn.executemany(s.sql, s.args)
        else:
            conn.execute(s.sql, s.args).fetchall()
    conn.commit()


class AiosqliteFloor:
    def __init__(self, conn: aiosqlite.Connection, engine: AsyncEngine, path: str) -> None:
        self._conn = conn
        self._path = path
        self._replayer: onehop.OneHopConnection | None = None
        self.sql, self._names, self._defaults = compiled_turn_read(engine)

    def args(self, thread_id: str, limit: int) -> list[Any]:
        return _args(self._names, self._defaults, thread_id, limit)

    @classmethod
    async def open(cls, url: str, engine: AsyncEngine) -> AiosqliteFloor:
        path = make_url(url).database
        if not path:
            raise ValueError(f"not a file SQLite URL: {url}")
        conn = await aiosqlite.connect(path)
        await conn.execute("PRAGMA synchronous=NORMAL")  # as the app's engine sets it
        await conn.execute(_CREATE)
        await conn.execute(f"INSERT OR IGNORE INTO {COMMIT_TABLE} VALUES (1, 0)")
        await conn.commit()
        return cls(conn, engine, path)

    async def commit_one(self) -> None:
        await self._conn.execute(f"UPDATE {COMMIT_TABLE} SET n = n + ? WHERE id = 1", (1,))
        await self._conn.commit()

    async def replay(self, units: Sequence[Any]) -> None:
        """Each unit in ONE worker-thread call on a connection of its own, statements and
        COMMIT: fewer hand-overs than any way the app could send them, so a lower bound."""
        if self._replayer is None:
            self._replayer = await onehop.connect(self._path)
            await self._replayer.execute("PRAGMA synchronous=NORMAL")
        for unit in units:
            await self._replayer.call(_run_unit, unit.statements)

    async def read(self, thread_id: str, limit: int) -> Sequence[Sequence[Any]]:
        return list(await self._conn.execute_fetchall(self.sql, self.args(thread_id, limit)))

    async def close(self) -> None:
        if self._replayer is not None:
            await self._replayer.close()
        await self._conn.close()


async def open_floor(url: str, engine: AsyncEngine) -> Floor:
    if make_url(url).get_backend_name() == "sqlite":
        return await AiosqliteFloor.open(url, engine)
    return await AsyncpgFloor.open(url, engine)
