"""The pieces every statement sent straight through the driver shares (`bounded_agents.store.direct`
for a unit's writes, `bounded_agents.store.waiting` for the writes that wait on a PostgreSQL
connection, `bounded_agents.store.hotread` for the per-turn read): when that way may be taken at
all, the statement compiled as SQLAlchemy compiles it, the engine's listeners told, one asyncpg or
aiosqlite call, and a driver error turned into the error `wrap_db_errors` makes of it.

Why apart: those three modules each take the driver's way for a different reason and share only
this; kept in one place, the rules that make a driver-way statement look like SQLAlchemy's (the
same SQL, the same bind processing, the same listeners, the same errors) are read once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, cast

import asyncpg  # type: ignore[import-untyped]
import sqlalchemy.exc as sa_exc
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from bounded_agents.errors import AgentError, InvalidContent, StoreError
from bounded_agents.store.engine import ConnectionLost, behind_pgbouncer
from bounded_agents.store.onehop import PendingFailed, run_statement

DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    # Raised by a connection whose server ended it (pg_terminate_backend, a failover) while it
    # sat idle: the protocol is left mid-state, so the connection cannot be used again.
    asyncpg.InternalClientError,
    sqlite3.Error,
)
"""What a driver call may raise that means the database (or the connection to it) failed."""

_DATA_ERRORS = (asyncpg.DataError, sqlite3.DataError)


class UniqueConflict(StoreError):
    """A unique index refused a write sent the driver's way. Still a `StoreError`, as through
    SQLAlchemy, but it keeps the driver's words (`detail`: they name the index or its columns)
    for a caller that turns a conflict it expects into its own error, as the store turns the
    (thread, run, role) index's into `DuplicateMessage`."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class MissingParent(StoreError):
    """A foreign key refused a write sent the driver's way: the row it points at is gone (a
    thread erased while a run began on it). Still a `StoreError`, as through SQLAlchemy, for a
    caller that names the missing parent, as the journal turns it into `ThreadNotFound`."""


def driver_error(operation: str, exc: BaseException) -> AgentError:
    """The error `wrap_db_errors` makes of the same failure through SQLAlchemy."""
    if isinstance(exc, _DATA_ERRORS):
        return InvalidContent(f"{operation}: the database refused the data ({type(exc).__name__})")
    if isinstance(exc, TimeoutError):  # asyncpg's statement timeout, an OSError to Python
        return StoreError(f"{operation}: the database did not answer in time")
    message = f"{operation}: database error ({type(exc).__name__})"
    if isinstance(exc, asyncpg.UniqueViolationError) or (
        isinstance(exc, sqlite3.IntegrityError) and str(exc).startswith("UNIQUE")
    ):
        return UniqueConflict(message, str(exc))
    if isinstance(exc, asyncpg.ForeignKeyViolationError) or (
        isinstance(exc, sqlite3.IntegrityError) and str(exc).startswith("FOREIGN KEY")
    ):
        return MissingParent(message)
    return StoreError(message)


def driver_way_open(engine: AsyncEngine) -> bool:
    """Whether statements on `engine` may skip SQLAlchemy at all (`bounded_agents.store.direct`
    says what stays SQLAlchemy's):
    asyncpg or aiosqlite, not behind PgBouncer, no `after_cursor_execute` or `do_execute`
    listeners (a `do_execute` listener stands in for the DBAPI call, which the driver's way
    never makes). Asked on every statement: a host may instrument the engine after the store
    was built."""
    return (
        engine.dialect.driver in ("asyncpg", "aiosqlite")
        and not behind_pgbouncer(engine)
        and not engine.sync_engine.dispatch.after_cursor_execute
        and not engine.dialect.dispatch.do_execute
    )


def announce(
    engine: Engine, conn: Connection | Engine | None, sql: str, args: Any, *, many: bool = False
) -> None:
    """The engine's `before_cursor_execute` listeners, called as SQLAlchemy calls them."""
    listeners = engine.dispatch.before_cursor_execute
    if listeners:
        listeners(conn, None, sql, args, None, many)


class Compiled:
    """A statement as the dialect renders it, its positional parameter names, their literal
    values, the binds that need a value, and the dialect's bind processors."""

    __slots__ = ("names", "processors", "required", "returns_rows", "sql", "values")

    def __init__(
        self, stmt: ClauseElement, dialect: Dialect, column_keys: Sequence[str] | None = None
    ) -> None:
        keys = list(column_keys) if column_keys is not None else None
        compiled = cast(SQLCompiler, stmt.compile(dialect=dialect, column_keys=keys))
        self.sql = str(compiled)
        self.names = list(compiled.positiontup or [])
        self.values = dict(compiled.params)
        self.required = frozenset(n for n in self.names if compiled.binds[n].required)
        # The dialect's own type's processor (a DateTime on SQLite renders as SQLAlchemy's
        # string, not sqlite3's default adapter's), as SQLAlchemy's execute applies it.
        self.processors: list[Callable[[Any], Any] | None] = [
            compiled.binds[n].type._cached_bind_processor(dialect) for n in self.names
        ]
        self.returns_rows = bool(getattr(compiled, "returning", None)) or "RETURNING" in self.sql

    def args(self, params: dict[str, Any]) -> tuple[Any, ...]:
        if not self.required <= params.keys():
            missing = sorted(self.required - params.keys())
            raise sa_exc.InvalidRequestError(f"A value is required for bind parameter {missing}")
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


_COMPILED: dict[tuple[int, tuple[str, ...], int], tuple[ClauseElement, Dialect, Compiled]] = {}


def compiled(stmt: ClauseElement, dialect: Dialect, keys: tuple[str, ...] | None) -> Compiled:
    """`stmt` compiled for `dialect` (the engine's own instance) and parameter names `keys`."""
    key = (id(stmt), keys or (), id(dialect))
    hit = _COMPILED.get(key)
    if hit is None or hit[0] is not stmt or hit[1] is not dialect:
        hit = _COMPILED[key] = (stmt, dialect, Compiled(stmt, dialect, keys))
    return hit[2]


def status_count(status: str) -> int:
    """Rows an asyncpg command touched, from its status ("UPDATE 1", "INSERT 0 1")."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else -1


async def send(driver: Any, postgres: bool, stmt: Compiled, args: tuple[Any, ...]) -> Outcome:
    """One statement as one driver call: asyncpg's `fetch` when it returns rows, else its
    `execute` (the row count read from the status); on SQLite one worker-thread call."""
    if postgres:
        if stmt.returns_rows:
            rows = await driver.fetch(stmt.sql, *args)
            return Outcome(rows, len(rows))
        return Outcome([], status_count(await driver.execute(stmt.sql, *args)))
    _description, rows, rowcount, _lastrowid = await driver.call(run_statement, stmt.sql, args)
    return Outcome(rows, rowcount)


async def guarded(conn: AsyncConnection, operation: str, call: Any) -> Any:
    """Await the driver `call`: its errors translated, a cancellation invalidating `conn`. A
    connection that died under the call is invalidated too, and said to be (`ConnectionLost`):
    a unit's opening is then tried again on a fresh one (`open_write`), as when SQLAlchemy's
    own statement meets a dead connection (found by review: it was a plain `StoreError`, and the
    retry happened only because the rollback that followed failed on the dead connection)."""
    try:
        return await call
    except PendingFailed as exc:  # a deferred write sent ahead of this one
        raise driver_error(exc.operation, exc.cause) from exc.cause
    except (*DRIVER_ERRORS, OSError) as exc:
        if _lost(conn, exc):
            await conn.invalidate()
            lost = f"{operation}: the database connection was lost ({type(exc).__name__})"
            raise ConnectionLost(lost) from exc
        raise driver_error(operation, exc) from exc
    except AgentError:  # a deferred write's check: the transaction is the caller's to undo
        raise
    except BaseException:
        await conn.invalidate()
        raise


def _lost(conn: AsyncConnection, exc: BaseException) -> bool:
    """Whether `exc` means the PostgreSQL connection under `conn` is gone (as
    `bounded_agents.store.hotread` tells it of its own connections)."""
    if isinstance(exc, asyncpg.ConnectionDoesNotExistError | asyncpg.InternalClientError):
        return True
    sync = conn.sync_connection
    if sync is None or sync.closed or sync.invalidated:
        return False
    driver = sync.connection.driver_connection
    return isinstance(driver, asyncpg.Connection) and driver.is_closed()


Check = Callable[[Outcome], AgentError | None]
"""What a deferred write's caller wants of its outcome: the error to raise, or None."""


async def raw_connection(conn: AsyncConnection) -> PoolProxiedConnection:
    """`conn.get_raw_connection()`, without its greenlet hand-over when the connection is
    plainly there: SQLAlchemy then returns an attribute it holds (it does I/O only to
    reconnect an invalidated connection), and a turn asked it a dozen times."""
    sync = conn.sync_connection
    if sync is not None and not sync.closed and not sync.invalidated:
        return sync.connection
    return await conn.get_raw_connection()
