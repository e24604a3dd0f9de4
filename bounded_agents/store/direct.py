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

A write nothing waits for (a ledger row, the run's end: `write_later`) waits for the unit's next
call on SQLite (`bounded_agents.store.onehop`), and on PostgreSQL for the transaction's next
statement: it is sent first, alone, before any other (a driver-way statement, a SQLAlchemy
execute, the COMMIT), except the unit's last rows (`write_many(last=True)`), with which the last
waiting write goes as ONE statement, the rows a data-modifying CTE in front of it (`_merged`):
one round trip per unit less (issue 37). Not on Citus, where those rows live on other shards.
"""

from __future__ import annotations

import re
import sqlite3
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import asyncpg  # type: ignore[import-untyped]
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy import event
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from bounded_agents.errors import AgentError, InvalidContent, StoreError
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.engine import behind_pgbouncer, is_timeout, on_citus
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
    postgres = dialect_of(conn).postgres
    if postgres:
        await send_waiting(conn)
    form, args = _announced(conn, stmt, params)
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
    mergeable: bool = True,
) -> None:
    """`stmt` (then `then`, as `write_together`), for a caller that needs nothing back but
    `check`'s verdict on it. On a driver's way it is DEFERRED: it waits on the connection for
    the transaction's next statement, and `check` runs when it is sent; whatever fails
    surfaces from that later call, as this write's failure (named by its `operation`; the
    caller's unit rolls back either way). A rollback drops it unsent.

    - SQLite (`OneHopConnection.defer`): announced to the engine's listeners now, in its
      place, and sent in the worker-thread call of the transaction's next statement or its
      COMMIT, one hop less.
    - PostgreSQL (`asyncpg`, not on Citus, `then` None: see `_Waiting`): announced when it is
      sent, as what is sent. It goes alone, first, before the transaction's next statement
      (a driver-way write or read, a SQLAlchemy execute, the COMMIT), unless that statement is
      the unit's last write (`write_many(last=True)`): then the last waiting write and those
      rows go as ONE statement, the rows a data-modifying CTE (`_merged`), one round trip less.
      `mergeable=False` (the lease check) never shares a statement, so on PostgreSQL, where
      waiting pays only by merging, it is sent now.

    Elsewhere (Citus, SQLAlchemy's way) it is sent now (`then` too) and checked now.

    Only for writes whose failure fails their unit whatever else happens, inside a unit that
    goes on to another statement or commits: a ledger row, the run's end. `defer=False` sends
    it now everywhere (a write in a transaction of its own gains nothing by waiting for the
    COMMIT, and its failure is best named there)."""
    driver = await _open_driver(conn) if defer else None
    if (
        isinstance(driver, asyncpg.Connection)
        and then is None
        and mergeable
        and not on_citus(conn.engine)
    ):
        _wait(conn, stmt, params, operation, check)
        return
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

    `last`: this is the transaction's last write, and its caller commits right after. On
    PostgreSQL the last write waiting on the connection (`write_later`), if any, goes with the
    rows as one statement (`_merged`; the writes waiting before it are sent first). On SQLite
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
    keys = tuple(sorted(rows[0]))
    form = compiled(stmt, conn.dialect, keys)
    if dialect_of(conn).postgres:
        sync = conn.sync_connection
        waiting = _WAITING.pop(sync, None) if _WAITING and sync is not None else None
        merged = (
            _merged(waiting[-1].form, stmt, form, keys, conn.dialect) if waiting and last else None
        )
        last_waiting = waiting.pop() if waiting and merged is not None else None
        if waiting:
            await _send_all(conn, waiting)
        if last_waiting is not None and merged is not None:
            await _send_merged(conn, driver, last_waiting, merged, rows, operation)
            return
        args = [form.args(row) for row in rows]
        announce(conn.sync_engine, conn.sync_connection, form.sql, args, many=True)
        await guarded(conn, operation, driver.executemany(form.sql, args))
        return
    args = [form.args(row) for row in rows]
    announce(conn.sync_engine, conn.sync_connection, form.sql, args, many=True)
    # With the writes deferred before it, if any (`OneHopConnection.call`).
    send = run_many_and_commit if last else run_many
    await guarded(conn, operation, driver.call(send, form.sql, args))


class _Waiting(NamedTuple):
    """A write waiting on a PostgreSQL connection (`write_later`): compiled, its arguments
    processed (a missing parameter is refused when it is queued, as when it is sent), not yet
    announced. Only `asyncpg` outside Citus: there a unit's runs and run_steps rows and the
    actor's ledger rows live on different shards, and a statement touching several goes
    through the coordinator. Not with `then`: two statements, nothing to merge."""

    form: Compiled
    args: tuple[Any, ...]
    operation: str
    check: Check | None


_WAITING: weakref.WeakKeyDictionary[Connection, list[_Waiting]] = weakref.WeakKeyDictionary()
"""PostgreSQL's waiting writes, by the SQLAlchemy connection (one checkout) they wait on.
Dropped at its rollback and at its next BEGIN (`_hook`), gone with it."""

_HOOKED: weakref.WeakSet[Engine] = weakref.WeakSet()


def _wait(
    conn: AsyncConnection, stmt: Executable, params: dict[str, Any], operation: str, check: Any
) -> None:
    assert isinstance(stmt, ClauseElement) and conn.sync_connection is not None
    form = compiled(stmt, conn.dialect, tuple(sorted(params)))
    waiting = _Waiting(form, form.args(params), operation, check)
    _hook(conn.sync_engine)
    _WAITING.setdefault(conn.sync_connection, []).append(waiting)


def _hook(engine: Engine) -> None:
    """The engine's events that send (or drop) the waiting writes around what SQLAlchemy sends
    itself: before each of its statements and its COMMIT; dropped at its ROLLBACK, at its
    ROLLBACK TO SAVEPOINT (a write waits only within its savepoint: the SAVEPOINT statement
    sent the ones before it; found by review, the rollback sent them and was itself never
    sent, so the savepoint's rows committed) and at its BEGIN (a transaction never inherits a
    write of the one before). Sent at `before_execute`,
    which SQLAlchemy fires before it compiles the statement and before any
    `before_cursor_execute` listener is told of it, so that such a listener sees the
    statements in the order the database runs them, whenever it was registered."""
    if engine in _HOOKED:
        return
    event.listen(engine, "before_execute", _before_statement)
    event.listen(engine, "commit", _before_commit)
    event.listen(engine, "rollback", _drop_waiting)
    event.listen(engine, "rollback_savepoint", _drop_waiting)
    event.listen(engine, "begin", _drop_waiting)
    _HOOKED.add(engine)


def _drop_waiting(conn: Connection, *_savepoint: Any) -> None:
    _WAITING.pop(conn, None)


def _before_statement(conn: Connection, *_args: Any) -> None:
    """SQLAlchemy is about to execute a statement on `conn`: the waiting writes go first. A
    failure is raised from SQLAlchemy's execute."""
    _send_from_event(conn, roll_back=False)


def _before_commit(conn: Connection) -> None:
    """SQLAlchemy is about to COMMIT `conn`: the waiting writes go first. If one fails, the
    transaction is rolled back here before the error is raised: SQLAlchemy takes a transaction
    whose commit raised as ended, and gives its connection back to the pool unreset (it would
    keep the unit's writes open for the connection's next user)."""
    _send_from_event(conn, roll_back=True)


def _send_from_event(conn: Connection, *, roll_back: bool) -> None:
    """The writes waiting on `conn`, sent from a SQLAlchemy event. A cancellation (or a failed
    `roll_back`) invalidates the connection, as `guarded` does: these events fire outside
    SQLAlchemy's own error handling."""
    waiting = _WAITING.pop(conn, None) if _WAITING else None
    if not waiting:
        return
    try:
        _in_greenlet(conn, waiting)
    except Exception:
        if roll_back:
            try:
                conn.engine.dialect.do_rollback(conn.connection)
            except BaseException:
                conn.invalidate()
        raise
    except BaseException:
        conn.invalidate()
        raise


def _in_greenlet(conn: Connection, waiting: list[_Waiting]) -> None:
    """`waiting` sent from a SQLAlchemy event, through the adapter's `run_async` (SQLAlchemy's
    public way to await the driver from a sync event)."""
    adapter: Any = conn.connection.dbapi_connection

    async def send(driver: Any) -> None:
        for one in waiting:
            announce(conn.engine, conn, one.form.sql, one.args)
            try:
                outcome = await _send(driver, True, one.form, one.args)
            except (*DRIVER_ERRORS, OSError) as exc:
                raise driver_error(one.operation, exc) from exc
            _checked(one, outcome)

    adapter.run_async(send)


def _checked(one: _Waiting, outcome: Outcome) -> None:
    problem = one.check(outcome) if one.check is not None else None
    if problem is not None:
        raise problem


async def send_waiting(conn: AsyncConnection) -> None:
    """Send the writes waiting on `conn` (PostgreSQL, `write_later`), in order, each checked:
    what a driver-way statement on `conn` does first."""
    if _WAITING:
        sync = conn.sync_connection
        waiting = _WAITING.pop(sync, None) if sync is not None else None
        if waiting:
            await _send_all(conn, waiting)


async def _send_all(conn: AsyncConnection, waiting: list[_Waiting]) -> None:
    driver = (await raw_connection(conn)).driver_connection
    for one in waiting:
        announce(conn.sync_engine, conn.sync_connection, one.form.sql, one.args)
        _checked(one, await guarded(conn, one.operation, _send(driver, True, one.form, one.args)))


_MERGED_AS = "merged_rows"
"""The name of a unit's last rows as a CTE of the write waiting before them (`_merged`)."""


class _Merged(NamedTuple):
    """A waiting write with a unit's last rows (`write_many(last=True)`) as ONE statement: the
    rows, passed as one array per column, inserted by a data-modifying CTE in front of it."""

    sql: str
    table: str
    columns: tuple[str, ...]
    arrays: Compiled
    """The rows' insert alone (`INSERT ... SELECT ... FROM unnest($1::t1[], ...)`), for its
    parameters' names, binds and processors."""


_MERGED: dict[tuple[int, int], tuple[Compiled, Compiled, _Merged | None]] = {}

_PLACEHOLDER = re.compile(r"\$(\d+)")


def _merged(
    first: Compiled, stmt: ClauseElement, many: Compiled, keys: tuple[str, ...], dialect: Dialect
) -> _Merged | None:
    """`first` (a waiting write) and the rows of `stmt` (a table's plain insert of `keys`) as
    one statement, or None when they cannot be: `stmt` is not a plain insert, or `first` is
    neither an INSERT, UPDATE or DELETE nor a `WITH` list of them that the rows' CTE can join
    (`WITH RECURSIVE`, or one that already uses the CTE's name). Cached per pair: both are
    compiled forms kept for the life of the process."""
    key = (id(first), id(many))
    hit = _MERGED.get(key)
    if hit is None or hit[0] is not first or hit[1] is not many:
        hit = _MERGED[key] = (first, many, _merge(first, stmt, many, keys, dialect))
    return hit[2]


def _merge(
    first: Compiled, stmt: ClauseElement, many: Compiled, keys: tuple[str, ...], dialect: Dialect
) -> _Merged | None:
    table = getattr(stmt, "table", None)
    if not isinstance(stmt, sa.Insert) or not isinstance(table, sa.Table):
        return None
    if many.sql != Compiled(table.insert(), dialect, keys).sql:
        return None  # not the table's plain insert of those columns (values, a SELECT, ...)
    sql = first.sql.lstrip()
    head = sql[:15].upper()
    if _MERGED_AS in sql or head.startswith("WITH RECURSIVE"):
        return None
    arrays_of = [sa.bindparam(k, type_=ARRAY(table.c[k].type)) for k in keys]
    rows = sa.func.unnest(*arrays_of).table_valued(*keys).render_derived()
    insert = table.insert().from_select(list(keys), sa.select(*(rows.c[k] for k in keys)))
    arrays = Compiled(insert, dialect)
    offset = len(first.names)
    renumbered = _PLACEHOLDER.sub(lambda m: f"${int(m.group(1)) + offset}", arrays.sql)
    if head.startswith("WITH "):
        merged = f"WITH {_MERGED_AS} AS ({renumbered}), {sql[5:]}"
    elif head.startswith(("INSERT ", "UPDATE ", "DELETE ")):
        merged = f"WITH {_MERGED_AS} AS ({renumbered}) {sql}"
    else:
        return None
    return _Merged(merged, table.name, keys, arrays)


async def _send_merged(
    conn: AsyncConnection,
    driver: Any,
    waiting: _Waiting,
    merged: _Merged,
    rows: Sequence[dict[str, Any]],
    operation: str,
) -> None:
    """`waiting` and `rows` as one statement (`_merged`); `waiting`'s check on what it returned
    (the statement's own RETURNING rows and row count are the waiting write's). A failure is
    named by the waiting write's operation when the database names one of its tables, else by
    the rows' `operation` (the unit's)."""
    args = waiting.args + merged.arrays.args({k: [row[k] for row in rows] for k in merged.columns})
    announce(conn.sync_engine, conn.sync_connection, merged.sql, args)
    try:
        if waiting.form.returns_rows:
            found = await driver.fetch(merged.sql, *args)
            outcome = Outcome(found, len(found))
        else:
            outcome = Outcome([], _status_count(await driver.execute(merged.sql, *args)))
    except (*DRIVER_ERRORS, OSError) as exc:
        table = getattr(exc, "table_name", None)
        name = waiting.operation if table and table != merged.table else operation
        raise driver_error(name, exc) from exc
    except BaseException:
        await conn.invalidate()
        raise
    _checked(waiting, outcome)


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
