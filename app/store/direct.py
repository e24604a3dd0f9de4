"""A unit of work's later writes straight through the driver, inside the transaction SQLAlchemy
opened: one asyncpg call or one aiosqlite worker-thread call, no Core execute.

Why: SQLAlchemy's Core execute costs about 100 us of Python per statement (an UPDATE measured
at 141 us through `AsyncConnection.execute` against 40 us as one aiosqlite worker-thread call,
and 176 us against 76 us on asyncpg), and a one-tool turn sends a dozen writes after its units'
first statements. Those writes go this way.

What stays SQLAlchemy's:
- The transaction: BEGIN, COMMIT and ROLLBACK. On PostgreSQL a unit's FIRST statement (the
  lease check) also goes through SQLAlchemy, because its asyncpg adapter sends BEGIN just
  before it: a write here takes the driver's way only when asyncpg says a transaction is open.
  On SQLite there is no BEGIN of SQLAlchemy's to wait for (sqlite3 opens the transaction itself
  at the first write), so once SQLAlchemy has begun, the first write may go too. Otherwise, and
  behind PgBouncer, and on SQLite engines that are not `OneHopConnection`'s, it is SQLAlchemy's
  `execute`, with the same outcome.
- Every write whose failure means something to its caller: the message insert, whose unique
  violation the store turns into `DuplicateMessage`, is not sent this way. A driver error here
  becomes `StoreError` naming the operation and the driver's error class, as `wrap_db_errors`
  words it; the unit then rolls back.

Same statement, seen the same way: each statement is compiled once per (statement, parameter
names, dialect), with `column_keys` as SQLAlchemy compiles an insert or update for the keys it
is given, so the SQL text is byte for byte SQLAlchemy's; before it goes out the engine's
`before_cursor_execute` listeners are called with it and its parameters (statement capture and
fault injection in the tests see it, and an injected failure fails it). Only module-level
statements are sent this way: the compiled forms are kept for the life of the process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, cast

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from app.errors import StoreError
from app.store.engine import behind_pgbouncer
from app.store.onehop import OneHopConnection
from app.store.onehop import _execute as _onehop_execute
from app.store.onehop import _executemany as _onehop_executemany

DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    sqlite3.Error,
    OSError,
)
"""What a driver call may raise that means the database (or the connection to it) failed."""


class Compiled:
    """A statement as the dialect renders it, its positional parameter names, their defaults
    (literal binds), and the bind processors SQLAlchemy would apply."""

    __slots__ = ("names", "processors", "returns_rows", "sql", "values")

    def __init__(
        self, stmt: ClauseElement, dialect: Dialect, column_keys: Sequence[str] | None = None
    ) -> None:
        keys = list(column_keys) if column_keys is not None else None
        compiled = cast(SQLCompiler, stmt.compile(dialect=dialect, column_keys=keys))
        self.sql = str(compiled)
        self.names = list(compiled.positiontup or [])
        self.values = dict(compiled.params)
        self.processors: list[Callable[[Any], Any] | None] = [
            compiled.binds[name].type.bind_processor(dialect) for name in self.names
        ]
        self.returns_rows = bool(getattr(compiled, "returning", None)) or "RETURNING" in self.sql

    def args(self, params: dict[str, Any]) -> tuple[Any, ...]:
        values = {**self.values, **params}
        return tuple(
            value if proc is None else proc(value)
            for value, proc in zip((values[n] for n in self.names), self.processors, strict=True)
        )


class Outcome:
    """What a write returned: its rows (RETURNING) and how many rows it touched."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: Sequence[Sequence[Any]], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def one_or_none(self) -> Sequence[Any] | None:
        if len(self.rows) > 1:
            raise StoreError("a write returned more than one row")
        return self.rows[0] if self.rows else None

    def scalar_one(self) -> Any:
        row = self.one_or_none()
        if row is None:
            raise StoreError("a write returned no row")
        return row[0]


_COMPILED: dict[tuple[int, tuple[str, ...], str, str], tuple[ClauseElement, Compiled]] = {}


def _compiled(stmt: ClauseElement, dialect: Dialect, keys: tuple[str, ...]) -> Compiled:
    key = (id(stmt), keys, dialect.name, str(dialect.driver))
    hit = _COMPILED.get(key)
    if hit is None or hit[0] is not stmt:
        hit = _COMPILED[key] = (stmt, Compiled(stmt, dialect, keys))
    return hit[1]


def _status_count(status: str) -> int:
    """Rows an asyncpg command touched, from its status ("UPDATE 1", "INSERT 0 1")."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else -1


async def _driver_call(
    driver: Any, postgres: bool, compiled: Compiled, args: tuple[Any, ...]
) -> Outcome:
    if postgres:
        if compiled.returns_rows:
            rows = await driver.fetch(compiled.sql, *args)
            return Outcome(rows, len(rows))
        return Outcome([], _status_count(await driver.execute(compiled.sql, *args)))
    _description, rows, rowcount, _lastrowid = await driver.call(
        _onehop_execute, compiled.sql, args
    )
    return Outcome(rows, rowcount)


async def write(
    conn: AsyncConnection, stmt: Executable, params: dict[str, Any], operation: str
) -> Outcome:
    """`stmt` with `params` on `conn`, inside the transaction already open there."""
    driver = await _open_driver(conn)
    if driver is None:
        result = await conn.execute(stmt, params)
        rows = result.all() if result.returns_rows else []
        return Outcome(rows, result.rowcount)
    postgres = conn.dialect.name == "postgresql"
    assert isinstance(stmt, ClauseElement)
    compiled = _compiled(stmt, conn.dialect, tuple(sorted(params)))
    args = compiled.args(params)
    listeners = conn.sync_engine.dispatch.before_cursor_execute
    if listeners:
        listeners(conn.sync_connection, None, compiled.sql, args, None, False)
    try:
        return await _driver_call(driver, postgres, compiled, args)
    except DRIVER_ERRORS as exc:
        raise StoreError(f"{operation}: database error ({type(exc).__name__})") from exc


async def write_many(
    conn: AsyncConnection, stmt: Executable, rows: Sequence[dict[str, Any]], operation: str
) -> None:
    """`stmt` once per row of `rows` (all with the same keys), as one driver call (asyncpg's
    `executemany`, sqlite3's `executemany` in one worker-thread call)."""
    driver = await _open_driver(conn) if rows else None
    if driver is None:
        if rows:
            await conn.execute(stmt, list(rows))
        return
    assert isinstance(stmt, ClauseElement)
    compiled = _compiled(stmt, conn.dialect, tuple(sorted(rows[0])))
    args = [compiled.args(row) for row in rows]
    listeners = conn.sync_engine.dispatch.before_cursor_execute
    if listeners:
        listeners(conn.sync_connection, None, compiled.sql, args, None, True)
    try:
        if conn.dialect.name == "postgresql":
            await driver.executemany(compiled.sql, args)
        else:
            await driver.call(_onehop_executemany, compiled.sql, args)
    except DRIVER_ERRORS as exc:
        raise StoreError(f"{operation}: database error ({type(exc).__name__})") from exc


async def _open_driver(conn: AsyncConnection) -> Any:
    """The driver connection under `conn` when a driver transaction is open on it and the
    driver's way is taken for this engine; None otherwise (SQLAlchemy's way)."""
    if conn.dialect.driver not in ("asyncpg", "aiosqlite") or behind_pgbouncer(conn.engine):
        return None
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    if isinstance(driver, OneHopConnection):
        # SQLAlchemy's BEGIN on SQLite is sqlite3's own implicit one, made at the first write:
        # once SQLAlchemy has begun, a write sent here opens the transaction just the same.
        return driver if driver.in_transaction or conn.in_transaction() else None
    if isinstance(driver, asyncpg.Connection) and driver.is_in_transaction():
        return driver
    return None
