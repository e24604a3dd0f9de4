"""A unit of work's writes straight through the driver, inside the transaction SQLAlchemy
opened: one asyncpg call or one aiosqlite worker-thread call, no Core execute. The pieces this
shares with the per-turn read (`bounded_agents.store.hotread`) are in
`bounded_agents.store.driver`; PostgreSQL's waiting writes in `bounded_agents.store.waiting`.

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
- Nothing else of a turn, but on Citus the run's insert and the owner's read before it
  (`SqlJournal._insert_run`; the insert's refusals there are SQLAlchemy's `IntegrityError`).
  The driver's way's refusals come back as the driver's: a unique violation as
  `UniqueConflict`, with the driver's words (the store turns a message insert's into
  `DuplicateMessage`, the journal a run insert's into `ThreadBusy`), a foreign key's as
  `MissingParent` (the journal's `ThreadNotFound`: the run's thread was erased meanwhile).
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
statement (`bounded_agents.store.waiting`, which merges the last of them with the unit's last
rows into one statement: one round trip per unit less, issue 37). Not on Citus.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import ClauseElement

from bounded_agents.store import waiting
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.driver import (
    Check,
    Compiled,
    Outcome,
    announce,
    compiled,
    driver_way_open,
    guarded,
    raw_connection,
    send,
)
from bounded_agents.store.engine import is_timeout, on_citus
from bounded_agents.store.onehop import (
    Deferred,
    OneHopConnection,
    run_many,
    run_many_and_commit,
    run_statement,
    run_together,
)


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


async def write(
    conn: AsyncConnection, stmt: Executable, params: dict[str, Any], operation: str
) -> Outcome:
    """`stmt` with `params` on `conn`, inside the transaction open (or opening) there."""
    driver = await _open_driver(conn)
    if driver is None:
        result = await conn.execute(stmt, params)
        rows = result.all() if result.returns_rows else []
        return Outcome(rows, result.rowcount)
    if dialect_of(conn).postgres:
        assert isinstance(stmt, ClauseElement)
        form = compiled(stmt, conn.dialect, tuple(sorted(params)))
        return await waiting.send_after_waiting(conn, driver, form, form.args(params), operation)
    form, args = _announced(conn, stmt, params)
    outcome: Outcome = await guarded(conn, operation, send(driver, False, form, args))
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
        waiting.wait(conn, stmt, params, operation, check)
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
    form = compiled(stmt, conn.dialect, tuple(sorted(rows[0])))
    if dialect_of(conn).postgres:
        await waiting.send_rows(conn, driver, stmt, form, rows, operation, last=last)
        return
    args = [form.args(row) for row in rows]
    announce(conn.sync_engine, conn.sync_connection, form.sql, args, many=True)
    # With the writes deferred before it, if any (`OneHopConnection.call`).
    send = run_many_and_commit if last else run_many
    await guarded(conn, operation, driver.call(send, form.sql, args))


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
