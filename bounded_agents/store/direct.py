"""A unit of work's writes straight through the driver, inside the transaction SQLAlchemy
opened: one asyncpg call or one aiosqlite worker-thread call, no Core execute. Also the pieces
the per-turn read shares (`bounded_agents.store.hotread`): the compiled statement, the listener
call, the error translation, and when the driver's way may be taken at all.

Why: SQLAlchemy's Core execute costs about 100 us of Python per statement (an UPDATE measured
at 141 us through `AsyncConnection.execute` against 40 us as one aiosqlite worker-thread call,
and 176 us against 76 us on asyncpg), and a one-tool turn sends a dozen writes inside its units.

What stays SQLAlchemy's:
- The transaction: BEGIN, COMMIT and ROLLBACK. On PostgreSQL SQLAlchemy's asyncpg adapter
  sends BEGIN lazily, just before the transaction's first statement; a write sent here first
  (a unit's lease check) has the adapter send it then, by the adapter's own method
  (`_begin_now`), and goes on the driver's way once asyncpg says a transaction is open. On
  SQLite there is no BEGIN of SQLAlchemy's to wait for (sqlite3 opens the transaction itself
  at the first write), so once SQLAlchemy has begun, the first write may go too.
- The run's insert, whose unique violation the journal turns into `ThreadBusy` by reading
  SQLAlchemy's error. (A message's insert goes the driver's way: its unique violation comes
  back as `UniqueConflict`, with the driver's words, which the store turns into
  `DuplicateMessage`.)
- Everything, on an engine with `after_cursor_execute` listeners: instrumentation that needs
  SQLAlchemy's cursor and execution context (OpenTelemetry's, Sentry's, a timing recipe) listens
  after execution too, to close what it opened, so there the driver's way is never taken; nor
  with `do_execute` listeners, which replace the DBAPI call the driver's way does not make.
  Likewise behind PgBouncer, and on SQLite engines that are not `OneHopConnection`'s.

Same statement, seen the same way: each statement is compiled once per (statement, parameter
names, dialect), with `column_keys` as SQLAlchemy compiles an insert or update for the keys it
is given, and its parameters go through the dialect's own bind processors, so the SQL and the
values are SQLAlchemy's; a parameter the statement needs and was not given is refused, as
SQLAlchemy refuses it. Before it goes out, the engine's `before_cursor_execute` listeners are
called with it (cursor and context None), so statement capture and fault injection see it.
A driver error becomes the error `wrap_db_errors` makes of it (`InvalidContent` for refused
data, else `StoreError` naming the operation and the driver's error class); a cancellation
while the driver call is in flight invalidates the connection, as SQLAlchemy does, so a
statement still queued in the SQLite worker thread cannot leave a transaction open on a pooled
connection. Only module-level statements (or one per journal lease length) are sent this way:
the compiled forms are kept for the life of the process.
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
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from bounded_agents.errors import AgentError, InvalidContent, StoreError
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.engine import behind_pgbouncer, is_timeout
from bounded_agents.store.onehop import (
    Deferred,
    OneHopConnection,
    PendingFailed,
    run_many,
    run_many_and_commit,
    run_statement,
    run_together,
)

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


def driver_error(operation: str, exc: BaseException) -> AgentError:
    """The error `wrap_db_errors` makes of the same failure through SQLAlchemy."""
    if isinstance(exc, _DATA_ERRORS):
        return InvalidContent(f"{operation}: the database refused the data ({type(exc).__name__})")
    message = f"{operation}: database error ({type(exc).__name__})"
    if isinstance(exc, asyncpg.UniqueViolationError) or (
        isinstance(exc, sqlite3.IntegrityError) and str(exc).startswith("UNIQUE")
    ):
        return UniqueConflict(message, str(exc))
    return StoreError(message)


def driver_way_open(engine: AsyncEngine) -> bool:
    """Whether statements on `engine` may skip SQLAlchemy at all (see the module docstring):
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


def _status_count(status: str) -> int:
    """Rows an asyncpg command touched, from its status ("UPDATE 1", "INSERT 0 1")."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _announced(
    conn: AsyncConnection, stmt: Executable, params: dict[str, Any]
) -> tuple[Compiled, tuple[Any, ...]]:
    """`stmt` compiled for `params`' names, its arguments, and the engine's listeners told:
    what every driver-way write does before it is sent (or queued)."""
    assert isinstance(stmt, ClauseElement)
    form = compiled(stmt, conn.dialect, tuple(sorted(params)))
    args = form.args(params)
    announce(conn.sync_engine, conn.sync_connection, form.sql, args)
    return form, args


async def _send(driver: Any, postgres: bool, stmt: Compiled, args: tuple[Any, ...]) -> Outcome:
    if postgres:
        if stmt.returns_rows:
            rows = await driver.fetch(stmt.sql, *args)
            return Outcome(rows, len(rows))
        return Outcome([], _status_count(await driver.execute(stmt.sql, *args)))
    _description, rows, rowcount, _lastrowid = await driver.call(run_statement, stmt.sql, args)
    return Outcome(rows, rowcount)


async def guarded(conn: AsyncConnection, operation: str, call: Any) -> Any:
    """Await the driver `call`: its errors translated, a cancellation invalidating `conn`."""
    try:
        return await call
    except PendingFailed as exc:  # a deferred write sent ahead of this one
        raise driver_error(exc.operation, exc.cause) from exc.cause
    except (*DRIVER_ERRORS, OSError) as exc:
        raise driver_error(operation, exc) from exc
    except AgentError:  # a deferred write's check: the transaction is the caller's to undo
        raise
    except BaseException:
        await conn.invalidate()
        raise


async def write(
    conn: AsyncConnection, stmt: Executable, params: dict[str, Any], operation: str
) -> Outcome:
    """`stmt` with `params` on `conn`, inside the transaction open (or opening) there."""
    driver = await _open_driver(conn)
    if driver is None:
        result = await conn.execute(stmt, params)
        rows = result.all() if result.returns_rows else []
        return Outcome(rows, result.rowcount)
    form, args = _announced(conn, stmt, params)
    postgres = dialect_of(conn).postgres
    outcome: Outcome = await guarded(conn, operation, _send(driver, postgres, form, args))
    return outcome


async def write_together(
    conn: AsyncConnection,
    stmt: Executable,
    then: Executable,
    params: dict[str, Any],
    operation: str,
) -> Outcome:
    """`stmt` (a write with RETURNING), then `then`, both with `params`: what `stmt` returned.
    On SQLite both go in ONE worker-thread call (`run_together`), since SQLite has no
    data-modifying CTE to make them one statement; elsewhere, two statements.

    `then` is always sent, so it must itself do nothing when `stmt` changed no row (the
    store's message insert checks SQLite's `changes()`): every statement announced to the
    engine's listeners is one the database ran. Both are announced before the call, so a
    listener that refuses `then` refuses the pair before anything is sent; the failure of
    either leaves the caller's transaction to roll back."""
    driver = await _open_driver(conn)
    if driver is None or not isinstance(driver, OneHopConnection):
        outcome = await write(conn, stmt, params, operation)
        await write(conn, then, params, operation)
        return outcome
    (first, args), (second, then_args) = (
        _announced(conn, stmt, params),
        _announced(conn, then, params),
    )
    call = driver.call(run_together, first.sql, args, second.sql, then_args)
    _description, rows, rowcount, _lastrowid = await guarded(conn, operation, call)
    return Outcome(rows, rowcount)


async def write_bumped(
    conn: AsyncConnection,
    *,
    combined: Executable,
    bump: Executable,
    then: Executable,
    params: dict[str, Any],
    operation: str,
) -> Any | None:
    """A counter bump and the row it numbers in one round trip; the first column of what came
    back (the number), or None when the bump found no row.

    On PostgreSQL, `combined`: the bump as a data-modifying CTE and the insert reading it, one
    statement. SQLite has no data-modifying CTE: there `bump` (with RETURNING, the number
    first) and `then` (which reads the bumped row itself, and inserts nothing when the bump
    changed no row) go in one worker-thread call (`write_together`)."""
    if dialect_of(conn).postgres:
        found = (await write(conn, combined, params, operation)).one_or_none()
    else:
        found = (await write_together(conn, bump, then, params, operation)).one_or_none()
    return None if found is None else found[0]


Check = Callable[[Outcome], AgentError | None]
"""What a deferred write's caller wants of its outcome: the error to raise, or None."""


async def write_later(
    conn: AsyncConnection,
    stmt: Executable,
    params: dict[str, Any],
    operation: str,
    *,
    check: Check | None = None,
    then: Executable | None = None,
    defer: bool = True,
) -> None:
    """`stmt` (then `then`, as `write_together`), for a caller that needs nothing back but
    `check`'s verdict on it. On SQLite's driver way it is DEFERRED (`OneHopConnection.defer`):
    announced to the engine's listeners now, in its place, and sent in the worker-thread call
    of the transaction's next statement or its COMMIT, one hop less; `check` runs there, and
    whatever fails surfaces from that later call, as this write's failure (the caller's unit
    rolls back either way). Elsewhere it is sent now (`then` too) and checked now.

    Only for writes whose failure fails their unit whatever else happens, inside a unit that
    goes on to another statement or commits: a ledger row, the run's end. `defer=False` sends
    it now everywhere (a write in a transaction of its own gains nothing by waiting for the
    COMMIT, and its failure is best named there)."""
    driver = await _open_driver(conn) if defer else None
    if not isinstance(driver, OneHopConnection):
        if then is None:
            outcome = await write(conn, stmt, params, operation)
        else:
            outcome = await write_together(conn, stmt, then, params, operation)
        problem = check(outcome) if check is not None else None
        if problem is not None:
            raise problem
        return
    first, args = _announced(conn, stmt, params)
    fn: Callable[..., Any] = run_statement
    call_args: tuple[Any, ...] = (first.sql, args)
    if then is not None:
        second, then_args = _announced(conn, then, params)
        fn, call_args = run_together, (first.sql, args, second.sql, then_args)
    driver.defer(Deferred(fn, call_args, operation, _outcome_check(check)))


def _outcome_check(check: Check | None) -> Callable[[Any], BaseException | None] | None:
    """`check` over the worker thread's raw outcome tuple."""
    if check is None:
        return None
    return lambda raw: check(Outcome(raw[1], raw[2]))


async def write_bumped_later(
    conn: AsyncConnection,
    *,
    combined: Executable,
    bump: Executable,
    then: Executable,
    params: dict[str, Any],
    operation: str,
    check: Check,
    defer: bool = True,
) -> None:
    """`write_bumped` for a caller that needs only `check`'s verdict on what came back: on
    SQLite's driver way the bump and its row are deferred together (`write_later`); elsewhere
    sent now, as `write_bumped` sends them."""
    if dialect_of(conn).postgres:
        await write_later(conn, combined, params, operation, check=check, defer=defer)
    else:
        await write_later(conn, bump, params, operation, then=then, check=check, defer=defer)


async def write_many(
    conn: AsyncConnection,
    stmt: Executable,
    rows: Sequence[dict[str, Any]],
    operation: str,
    *,
    last: bool = False,
) -> None:
    """`stmt` once per row of `rows` (all with the same keys), as one driver call (asyncpg's
    `executemany`, sqlite3's `executemany` in one worker-thread call).

    `last`: this is the transaction's last write, and its caller commits right after. On SQLite
    the COMMIT then rides in the same worker-thread call (`run_many_and_commit`), and the
    caller's SQLAlchemy commit finds nothing left to send: one hop per unit less. A failure of
    either leaves the transaction open, for the caller's rollback, as before. A cancellation
    while that call is in flight may find the unit committed (the worker thread finishes what
    it started), as a cancellation during SQLAlchemy's own COMMIT call always could: the
    database holds all of the unit or none of it, never a part."""
    if not rows:
        return
    driver = await _open_driver(conn)
    if driver is None:
        await conn.execute(stmt, list(rows))
        return
    assert isinstance(stmt, ClauseElement)
    form = compiled(stmt, conn.dialect, tuple(sorted(rows[0])))
    args = [form.args(row) for row in rows]
    announce(conn.sync_engine, conn.sync_connection, form.sql, args, many=True)
    if dialect_of(conn).postgres:
        await guarded(conn, operation, driver.executemany(form.sql, args))
    else:  # with the writes deferred before it, if any (`OneHopConnection.call`)
        send = run_many_and_commit if last else run_many
        await guarded(conn, operation, driver.call(send, form.sql, args))


async def raw_connection(conn: AsyncConnection) -> PoolProxiedConnection:
    """`conn.get_raw_connection()`, without its greenlet hand-over when the connection is
    plainly there: SQLAlchemy then returns an attribute it holds (it does I/O only to
    reconnect an invalidated connection), and a turn asked it a dozen times."""
    sync = conn.sync_connection
    if sync is not None and not sync.closed and not sync.invalidated:
        return sync.connection
    return await conn.get_raw_connection()


async def _open_driver(conn: AsyncConnection) -> Any:
    """The driver connection under `conn` when the driver's way is taken for this engine and a
    transaction is open (or, on SQLite, begun) on it; None otherwise (SQLAlchemy's way)."""
    if not driver_way_open(conn.engine):
        return None
    raw = await raw_connection(conn)
    driver = raw.driver_connection
    if isinstance(driver, OneHopConnection):
        # SQLAlchemy's BEGIN on SQLite is sqlite3's own implicit one, made at the first write:
        # once SQLAlchemy has begun, a write sent here opens the transaction just the same.
        return driver if driver.in_transaction or conn.in_transaction() else None
    if isinstance(driver, asyncpg.Connection):
        if driver.is_in_transaction():
            return driver
        if conn.in_transaction() and await _begin_now(conn, raw.dbapi_connection):
            return driver if driver.is_in_transaction() else None
    return None


async def _begin_now(conn: AsyncConnection, adapter: Any) -> bool:
    """Send the BEGIN of the transaction SQLAlchemy has begun on `conn` (PostgreSQL), so that
    its first statement may take the driver's way too (issue 37: a unit's lease check, about
    100 us of Python less). SQLAlchemy's asyncpg adapter sends BEGIN lazily, just before the
    transaction's first statement, by its `_start_transaction`; this calls that same method a
    moment earlier, so SQLAlchemy's COMMIT and ROLLBACK find the transaction as their own.

    False, sending nothing more, where the adapter has no such method (another SQLAlchemy) or
    BEGIN failed (a dead connection): the statement then goes SQLAlchemy's way, which begins
    again and reports and invalidates as it always did (`open_write` retries a dead pooled
    connection on that error). A BEGIN that waited out the statement timeout is raised, the
    connection invalidated: begun again it would wait as long again, as in a partition (found
    by review: a unit's opening took twice the timeout). A cancellation while BEGIN is in
    flight invalidates `conn`, as `guarded` does for any driver call."""
    start = getattr(adapter, "_start_transaction", None)
    if start is None:
        return False
    try:
        await start()
    except Exception as error:
        if not is_timeout(error):
            return False
        await conn.invalidate()
        raise
    except BaseException:
        await conn.invalidate()
        raise
    return True
