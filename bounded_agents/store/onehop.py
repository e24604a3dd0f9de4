"""aiosqlite with one worker-thread call per statement, for SQLAlchemy's aiosqlite dialect.

aiosqlite runs every sqlite3 call in the connection's worker thread, and SQLAlchemy's adapter
makes four such calls per statement (make a cursor, execute, fetch, close), plus a ROLLBACK when
a connection goes back to the pool even if no transaction is open. Each call is a round trip
between the event loop and the thread (a queue put, a GIL hand-over, a wake-up): on a 2-core
machine 50-100 us apiece, 77 of them per benchmark turn, more than the statements themselves.

`OneHopConnection` is an `aiosqlite.Connection` whose cursors run execute + fetchall + close as
one call and buffer the rows, and which skips the ROLLBACK (and COMMIT) call when sqlite3 says
no transaction is open (it knows, since every statement reports `in_transaction` back from the
thread). The statements, their order, their transactions and their errors are those of plain
aiosqlite: only the number of thread hand-overs changes. SQLAlchemy gets it through
`create_async_engine`'s `async_creator` (see `bounded_agents.store.engine.make_engine`), so every
engine event still fires.

A write whose outcome nothing waits for (a ledger row, the run's end) may also be DEFERRED
(`OneHopConnection.defer`, issue 37): it is queued, and sent first thing in the next call to the
worker thread on that connection, or with the COMMIT. Its statement and its place in the
transaction are unchanged; the turn saves the hop it would have cost (measured at 150-200 us
inside a turn on the 2-core machine, against 30-90 us in a loop of empty calls). What it
returned is checked in the worker thread (`Deferred.check`), and a failure comes back from the
call that sent it, named by the deferred write's own operation (`PendingFailed`). (On PostgreSQL,
which has no worker thread, such a write waits on the connection for the transaction's next
statement instead, and may go as one statement with the unit's last rows:
`bounded_agents.store.direct.write_later`.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Generator, Iterable, Sequence
from functools import partial
from typing import Any, NamedTuple

import aiosqlite


class BufferedCursor:
    """The aiosqlite cursor API over rows fetched in the statement's own worker-thread call."""

    __slots__ = ("_conn", "_rows", "arraysize", "description", "lastrowid", "rowcount")

    def __init__(self, conn: OneHopConnection) -> None:
        self._conn = conn
        self._rows: list[Any] = []
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1

    def __await__(self) -> Generator[Any, None, BufferedCursor]:
        """SQLAlchemy 2.0's adapter awaits `connection.cursor()` (aiosqlite's is awaitable);
        2.1's uses it as it comes. Both get this cursor."""
        return self._itself().__await__()

    async def _itself(self) -> BufferedCursor:
        return self

    async def __aenter__(self) -> BufferedCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return None

    async def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> BufferedCursor:
        self._take(
            await self._conn.call(run_statement, sql, () if parameters is None else parameters)
        )
        return self

    async def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> BufferedCursor:
        self._take(await self._conn.call(run_many, sql, parameters))
        return self

    def _take(self, outcome: tuple[Any, list[Any], int, int | None]) -> None:
        self.description, self._rows, self.rowcount, self.lastrowid = outcome

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        n = self.arraysize if size is None else size
        out, self._rows = self._rows[:n], self._rows[n:]
        return out

    async def fetchall(self) -> list[Any]:
        out, self._rows = self._rows, []
        return out

    async def close(self) -> None:
        self._rows = []


def _outcome(cursor: sqlite3.Cursor) -> tuple[Any, list[Any], int, int | None]:
    description = cursor.description
    rows = cursor.fetchall() if description else []
    outcome = (description, rows, cursor.rowcount, cursor.lastrowid)
    cursor.close()
    return outcome


def run_statement(
    conn: sqlite3.Connection, sql: str, parameters: Sequence[Any]
) -> tuple[Any, list[Any], int, int | None]:
    cursor = conn.cursor()
    try:
        cursor.execute(sql, parameters)
        return _outcome(cursor)
    except BaseException:
        cursor.close()
        raise


def run_many(
    conn: sqlite3.Connection, sql: str, parameters: Iterable[Sequence[Any]]
) -> tuple[Any, list[Any], int, int | None]:
    cursor = conn.cursor()
    try:
        cursor.executemany(sql, parameters)
        return _outcome(cursor)
    except BaseException:
        cursor.close()
        raise


def run_together(
    conn: sqlite3.Connection,
    sql: str,
    parameters: Sequence[Any],
    then_sql: str,
    then_parameters: Sequence[Any],
) -> tuple[Any, list[Any], int, int | None]:
    """`sql`, then `then_sql`, in one worker-thread call; what `sql` returned. A failure of
    either leaves the transaction open for the caller to roll back, as two calls would."""
    outcome = run_statement(conn, sql, parameters)
    run_statement(conn, then_sql, then_parameters)
    return outcome


def run_many_and_commit(
    conn: sqlite3.Connection, sql: str, parameters: Iterable[Sequence[Any]]
) -> tuple[Any, list[Any], int, int | None]:
    """`run_many`, then COMMIT, in the same worker-thread call: a unit's last write and its
    commit in one hop. If either fails, the transaction is left open for the caller to roll
    back, as a failed statement or a failed COMMIT of plain sqlite3 leaves it."""
    outcome = run_many(conn, sql, parameters)
    conn.commit()
    return outcome


RawOutcome = tuple[Any, list[Any], int, "int | None"]
"""What `run_statement` and its kin return in the worker thread: (description, rows, rowcount,
lastrowid). `bounded_agents.store.driver.Outcome` is what callers see of it."""


class Deferred(NamedTuple):
    """A queued write: `fn(sqlite3_connection, *args)` (`run_statement`, `run_together`), then
    `check(outcome)`, which returns the error to raise (or None) and runs in the worker thread."""

    fn: Callable[..., RawOutcome]
    args: tuple[Any, ...]
    operation: str
    check: Callable[[RawOutcome], BaseException | None] | None


class PendingFailed(sqlite3.Error):
    """A deferred write that sqlite3 refused when it was sent: `operation` is the deferred
    write's own, `cause` sqlite3's error (the caller translates it as if the write had been
    sent on its own)."""

    def __init__(self, operation: str, cause: sqlite3.Error) -> None:
        super().__init__(str(cause))
        self.operation = operation
        self.cause = cause


def run_deferred(conn: sqlite3.Connection, deferred: Sequence[Deferred]) -> None:
    """The queued writes, in order, each checked."""
    for write in deferred:
        try:
            outcome = write.fn(conn, *write.args)
        except sqlite3.Error as exc:
            raise PendingFailed(write.operation, exc) from exc
        problem = write.check(outcome) if write.check is not None else None
        if problem is not None:
            raise problem


def _after_deferred(
    conn: sqlite3.Connection, deferred: Sequence[Deferred], fn: Any, *args: Any
) -> Any:
    run_deferred(conn, deferred)
    return fn(conn, *args)


def _deferred_then_commit(conn: sqlite3.Connection, deferred: Sequence[Deferred]) -> None:
    """The queued writes (if any), then COMMIT; if either fails, ROLLBACK before raising.
    Unlike a failure in any other call, this one comes out of SQLAlchemy's commit, after which
    SQLAlchemy takes the transaction as ended and the pool gives the connection back without a
    rollback of its own: left open, the failed unit's writes would be seen by the connection's
    next user, and committed by its next unit."""
    try:
        run_deferred(conn, deferred)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


class OneHopConnection(aiosqlite.Connection):
    """See the module docstring. `in_transaction` is sqlite3's, as of the end of the last call
    to the worker thread (every call reports it back, whichever method made it)."""

    in_transaction = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deferred: list[Deferred] = []
        """Writes queued for the next call (`defer`)."""
        self._stop_requested = False

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        inner: Any = super()._execute  # untyped in aiosqlite
        return await inner(_tracked, self, partial(fn, *args, **kwargs))

    @property
    def closed(self) -> bool:
        """Whether aiosqlite has closed it, or begun to: its next call would fail with
        "Connection closed". (`engine.make_engine` discards such a connection at checkout.)"""
        return not self._running or self._connection is None

    def stop(self) -> Any:
        """aiosqlite 0.22's: stop the worker thread once. A second stop queues its sentinel
        behind the first, which the thread never reads: its future never resolves, and
        `close` awaits it (SQLAlchemy 2.1 closes a connection whose terminate was cancelled
        that way; then the task waits forever and the event loop cannot shut down)."""
        inner = getattr(super(), "stop", None)
        if inner is None:  # aiosqlite before 0.22.1: as SQLAlchemy expects of a driver without it
            raise NotImplementedError("this aiosqlite cannot stop its worker thread")
        if self._stop_requested:
            return None
        self._stop_requested = True
        return inner()

    def defer(self, write: Deferred) -> None:
        """Queue `write` for the next call to the worker thread (see the module docstring).
        Only inside a transaction the caller commits or rolls back: a rollback drops it."""
        self.deferred.append(write)

    async def call(self, fn: Any, *args: Any) -> Any:
        """`fn(sqlite3_connection, *args)` in the worker thread: one hop, the deferred writes
        first. (Not named `run`: up to aiosqlite 0.21 the connection is the worker `Thread`,
        whose `run` is its loop.)"""
        if self.deferred:
            deferred, self.deferred = self.deferred, []
            return await self._execute(_on_connection, self, _after_deferred, deferred, fn, *args)
        return await self._execute(_on_connection, self, fn, *args)

    def cursor(self) -> Any:
        return BufferedCursor(self)

    async def rollback(self) -> None:
        self.deferred = []  # never sent: nothing of them to undo
        if self.in_transaction:
            await super().rollback()
        # else nothing to undo, and no call to the worker thread

    async def commit(self) -> None:
        if self.deferred or self.in_transaction:  # the deferred writes, then COMMIT: one hop
            deferred, self.deferred = self.deferred, []
            await self._execute(_on_connection, self, _deferred_then_commit, deferred)
            return
        # else nothing to commit (sqlite3's own commit would do nothing): no call either. This
        # is how a transaction whose last write committed in the same hop
        # (`run_many_and_commit`) ends, SQLAlchemy's commit and its events included.


def _tracked(owner: OneHopConnection, call: Any) -> Any:
    """In the worker thread: make the call, then note whether a transaction is open."""
    try:
        return call()
    finally:
        try:
            owner.in_transaction = owner._conn.in_transaction
        except (ValueError, sqlite3.ProgrammingError):  # closed (by this very call, maybe)
            owner.in_transaction = False


def _on_connection(owner: OneHopConnection, fn: Any, *args: Any) -> Any:
    return fn(owner._conn, *args)


async def connect(path: str, **kwargs: Any) -> OneHopConnection:
    """`aiosqlite.connect(path, **kwargs)`, one hop per statement."""
    conn = OneHopConnection(partial(sqlite3.connect, path, **kwargs), 64)
    thread: Any = getattr(conn, "_thread", conn)  # aiosqlite < 0.22: the connection is one
    thread.daemon = True  # as SQLAlchemy's own aiosqlite connect does
    await conn
    return conn
