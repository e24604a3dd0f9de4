"""Engine construction: one place that knows the per-database connection settings."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sqlite3
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import event, exc
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import Pool

from bounded_agents.errors import StoreError
from bounded_agents.store import onehop
from bounded_agents.store.dialect import dialect_of, dialect_of_url

POOL_RECYCLE_SECONDS = 1800
"""Retire pooled connections after half an hour, before servers or proxies drop idle ones."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for the write lock before failing (WAL lets readers go on).
Within one process writers queue on `write_transaction`'s lock instead, so this only ever runs
out against another process holding the database."""

_WRITE_LOCKS: weakref.WeakKeyDictionary[Pool, asyncio.Lock] = weakref.WeakKeyDictionary()
_BEHIND_PGBOUNCER: weakref.WeakSet[Pool] = weakref.WeakSet()
"""Pools of engines built with `pgbouncer=True`: their reads keep their transactions."""
_ON_CITUS: weakref.WeakSet[Pool] = weakref.WeakSet()
"""Pools whose database has the Citus extension (found at their first connection)."""
_HAS_CITUS = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
_T = TypeVar("_T")
_RETRIES_FIRST = contextvars.ContextVar("retries_first_statement", default=False)
"""Set while a caller that retries its first statement on a dead connection checks one out:
the checkout then skips its ping round trip (see `_ping_on_checkout`)."""


def is_sqlite(url: str) -> bool:
    return dialect_of_url(url).sqlite


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 10,
    pool_timeout: float = 10.0,
    statement_timeout: float | None = None,
    pgbouncer: bool = False,
    echo: bool = False,
) -> AsyncEngine:
    """Build an async engine: PostgreSQL through asyncpg, SQLite through aiosqlite.

    SQLite gets WAL (readers never wait for the writer), foreign keys on (off by default in
    SQLite), and a busy timeout so concurrent writers queue instead of failing. PostgreSQL gets
    an explicit pool size and checkout timeout, so exhaustion is a clear error, not a hang.

    Dead PostgreSQL connections (server restarted, backend terminated) are weeded out at
    checkout with a one-round-trip ping; SQLAlchemy's `pool_pre_ping` costs three per checkout
    (BEGIN, ping, ROLLBACK), which was a third of a turn's database time. `pool_recycle`
    retires connections before servers or proxies drop idle ones.

    `statement_timeout` (PostgreSQL): seconds asyncpg waits for any one statement's answer
    (its `command_timeout`), or for a new connection (`timeout`, 60 s by default), before it
    gives up, cancels the statement and raises `TimeoutError`, which the
    store reports as a one-line `StoreError`. Without it a server that stops answering (a
    network partition drops packets without a reset) holds the request for as long as the
    kernel retransmits, a quarter of an hour. None (migrations, the CLI) waits as long as the
    statement takes: an index build on a large table may take minutes.

    `pgbouncer`: behind PgBouncer in transaction mode a prepared statement made in one
    transaction may be missing (or another client's) in the next, which runs on another server
    connection. asyncpg's statement cache and SQLAlchemy's are then off, and the statements
    asyncpg still prepares get unique names, as SQLAlchemy's asyncpg dialect documents.
    """
    kwargs: dict[str, Any] = {"echo": echo}
    if is_sqlite(url):
        path = _sqlite_file(url)
        if path is not None:
            # One worker-thread call per statement instead of four (`bounded_agents.store.onehop`).
            kwargs["async_creator"] = functools.partial(_connect_sqlite, path)
        else:
            kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs.update(
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=pool_timeout,
            pool_recycle=POOL_RECYCLE_SECONDS,
        )
        connect_args: dict[str, Any] = {}
        if statement_timeout is not None:
            connect_args.update(command_timeout=statement_timeout, timeout=statement_timeout)
        if pgbouncer:
            connect_args.update(
                statement_cache_size=0,
                prepared_statement_cache_size=0,
                prepared_statement_name_func=_unique_statement_name,
            )
        if connect_args:
            kwargs["connect_args"] = connect_args
    engine = create_async_engine(url, **kwargs)
    if pgbouncer and not is_sqlite(url):
        _BEHIND_PGBOUNCER.add(engine.sync_engine.pool)
    if is_sqlite(url):
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        event.listen(engine.sync_engine, "checkout", _closed_is_dead)
    else:
        event.listen(engine.sync_engine, "first_connect", functools.partial(_detect_citus, engine))
        event.listen(engine.sync_engine, "checkout", _ping_on_checkout)
        event.listen(engine.sync_engine, "handle_error", _left_mid_state_is_dead)
    return engine


def on_citus(engine: AsyncEngine) -> bool:
    """Whether `engine`'s database has the Citus extension (docs/scale-out.md): the store then
    sends a counter bump and the row it numbers as two statements, each of which Citus routes
    to the one shard that holds the row, instead of one with a data-modifying CTE, which Citus
    runs through the coordinator (an INSERT ... SELECT pulling the bumped row back). Known
    once the engine has connected, which it has by the first write."""
    return engine.sync_engine.pool in _ON_CITUS


def _detect_citus(engine: AsyncEngine, dbapi_connection: Any, _record: Any) -> None:
    """Once per pool, at its first connection: is this a Citus database? One query for the
    life of the process. Asked of the extension, not of the tables: an operator creates it
    before migrating and distributing, so it is there before the app starts."""
    if dbapi_connection.run_async(lambda driver: driver.fetchval(_HAS_CITUS)):
        _ON_CITUS.add(engine.sync_engine.pool)


def _left_mid_state_is_dead(context: ExceptionContext) -> BaseException | None:
    """asyncpg's `InternalClientError` ("cannot switch to state 12; another operation is in
    progress") comes from a connection whose server ended it while it sat idle, when asyncpg
    read the goodbye at the wrong moment. It is a dead connection, but SQLAlchemy takes it for
    none: up to 2.0 it is not even a DBAPI error, so it was neither invalidated nor wrapped, and
    callers that retry a dead connection's first statement did not retry. Mark it a disconnect
    (the connection and the pool's older ones are replaced) and hand callers a `DBAPIError`."""
    error = context.original_exception
    if not any(isinstance(e, asyncpg.InternalClientError) for e in (error, error.__cause__)):
        return None
    context.is_disconnect = True
    if context.sqlalchemy_exception is not None:
        return None  # wrapped already (SQLAlchemy 2.1); it now says connection_invalidated
    return exc.DBAPIError(context.statement, context.parameters, error, connection_invalidated=True)


def behind_pgbouncer(engine: AsyncEngine) -> bool:
    """Whether `engine` was built with `pgbouncer=True`."""
    return engine.sync_engine.pool in _BEHIND_PGBOUNCER


def _sqlite_file(url: str) -> str | None:
    """The file of a plain SQLite file URL; None for memory databases and URLs with options
    (`?mode=ro&uri=true`...), which keep aiosqlite as SQLAlchemy opens it."""
    parsed = make_url(url)
    if parsed.query or not parsed.database or parsed.database == ":memory:":
        return None
    return parsed.database


def autocommit(engine: AsyncEngine) -> AsyncEngine:
    """A view of `engine` (same pool) for single-statement reads: no BEGIN, no ROLLBACK.

    A statement is its own snapshot, so a one-statement read needs no transaction; on
    PostgreSQL this turns three round trips into one. SQLite keeps its engine as is: there,
    switching the isolation level costs aiosqlite more worker-thread hops than it saves
    (measured with `make bench-quick`: the bounded read went from 5x to 11x the floor).

    Behind PgBouncer in transaction mode the engine stays as is too: outside a transaction,
    asyncpg's prepare and execute of one statement may reach two different server connections.
    """
    if dialect_of(engine).sqlite or engine.sync_engine.pool in _BEHIND_PGBOUNCER:
        return engine
    return engine.execution_options(isolation_level="AUTOCOMMIT")


@asynccontextmanager
async def write_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """`engine.begin()` for a transaction that writes; on SQLite, one such transaction at a time
    per process.

    SQLite has one write lock per database file. Left to it, concurrent writers of one process
    wait for it inside their aiosqlite worker threads, each holding its connection's mutex
    while it waits, and the lock holder needs the event loop to get to its COMMIT: anything on
    the event-loop thread that touches one of the waiting connections (the garbage collector
    finalizing an old cursor of it) then blocks the loop, and the whole server with it, until
    the busy timeout runs out. Queuing writers on an asyncio lock before they take a connection
    means no thread of this process ever waits for the write lock: it is free whenever a writer
    gets to it (another process aside). Every write transaction of the project starts with its
    write, so SQLite's deferred BEGIN takes the lock at once, never upgrades from a read.
    PostgreSQL, with row locks, needs none of this.
    """
    lock = await acquire_writer(engine)
    try:
        async with engine.begin() as conn:
            yield conn
    finally:
        if lock is not None:
            lock.release()


async def acquire_writer(engine: AsyncEngine) -> asyncio.Lock | None:
    """Take this process's SQLite writer turn (see `write_transaction`) and return the lock to
    release when the write transaction ends; None on PostgreSQL, which needs no turn."""
    if not dialect_of(engine).sqlite:
        return None
    pool = engine.sync_engine.pool
    lock = _WRITE_LOCKS.get(pool)
    if lock is None:
        lock = _WRITE_LOCKS[pool] = asyncio.Lock()
    try:
        async with asyncio.timeout(SQLITE_BUSY_TIMEOUT_MS / 1000):
            await lock.acquire()
    except TimeoutError:
        raise StoreError(
            f"the database stayed busy for {SQLITE_BUSY_TIMEOUT_MS // 1000} s (SQLite write lock)"
        ) from None
    return lock


@contextmanager
def retrying_first_statement() -> Iterator[None]:
    """Checkouts in this block skip the ping: their caller retries the first statement on a
    fresh connection when it fails on a dead one (`is_dead_connection`), which costs nothing
    while connections live, where the ping costs a round trip on every checkout."""
    token = _RETRIES_FIRST.set(True)
    try:
        yield
    finally:
        _RETRIES_FIRST.reset(token)


class ConnectionLost(StoreError):
    """A statement sent the driver's way (`bounded_agents.store.driver.guarded`) whose
    connection died under it: a backend terminated, a failover, a reset socket. The
    connection is invalidated, as SQLAlchemy invalidates its own on such an error, and inside
    a transaction nothing of it was committed, so the opening of a unit may be tried again on
    a fresh connection (`is_dead_connection`)."""


def is_dead_connection(error: BaseException | None) -> bool:
    """Whether `error` (or what it was raised from) is a statement that failed because its
    connection died: SQLAlchemy then invalidated that connection, and the pool replaces every
    connection older than the failure at its next checkout (the driver's way says so with
    `ConnectionLost`)."""
    while error is not None:
        if isinstance(error, ConnectionLost):
            return True
        if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
            return True
        error = error.__cause__
    return False


def is_timeout(error: BaseException | None) -> bool:
    """Whether `error` (or what it was raised from) is a statement or a connection that waited
    out `statement_timeout` (asyncpg's `TimeoutError`, which `wrap_db_errors` and the driver
    path make a `StoreError` from): trying again waits as long again, as in a partition."""
    while error is not None:
        if isinstance(error, TimeoutError):
            return True
        error = error.__cause__
    return False


async def read_retrying(
    engine: AsyncEngine, read: Callable[[AsyncConnection], Awaitable[_T]]
) -> _T:
    """`read(conn)` on a pooled connection checked out without the ping, once more on a fresh
    connection if the first one turns out dead. For reads only: nothing to undo."""
    try:
        with retrying_first_statement():
            conn = await engine.connect()
        try:
            return await read(conn)
        finally:
            await conn.close()
    except exc.DBAPIError as error:
        if not is_dead_connection(error):
            raise
    async with engine.connect() as conn:
        return await read(conn)


def _unique_statement_name() -> str:
    return f"__asyncpg_{uuid.uuid4()}__"


def _ping_on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Hand out only live connections: one round trip (`SELECT 1`, outside any transaction).

    SQLAlchemy's `pool_pre_ping` does the same in three (BEGIN, ping, ROLLBACK). Asking asyncpg
    whether the socket is closed is not enough on its own: a backend terminated a moment ago
    may not have been noticed yet, and its connection then fails mid-statement.
    """
    try:
        if dbapi_connection.driver_connection.is_closed():
            raise ConnectionError("closed")
        if _RETRIES_FIRST.get():
            return  # the caller retries its first statement instead (`retrying_first_statement`)
        # `run_async` is SQLAlchemy's public way to await the driver from a sync event (the
        # adapter's `await_` attribute is private and gone in 2.1).
        dbapi_connection.run_async(lambda driver: driver.execute("SELECT 1"))
    except Exception as error:
        # The pool discards this connection and checks out (or opens) another one.
        raise exc.DisconnectionError(f"dead pooled connection ({type(error).__name__})") from error


def _closed_is_dead(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Hand out no SQLite connection that aiosqlite has closed (no worker-thread call: a flag).

    A read cancelled mid-statement (a client leaving an SSE stream cancels its handler through
    an anyio cancel scope, which cancels every await again) makes SQLAlchemy close the
    connection, and cancels that close too. aiosqlite marks it closed all the same, but
    SQLAlchemy before 2.0.55 keeps it in the pool's record, and giving it back to the pool
    needs no ROLLBACK when no transaction is open (`onehop` skips that call), so nothing finds
    it closed: the pool handed it out, and its next statement failed ("Connection closed")."""
    if getattr(dbapi_connection.driver_connection, "closed", False):
        raise exc.DisconnectionError("closed pooled connection")


async def _connect_sqlite(path: str) -> onehop.OneHopConnection:
    """A connection to the file at `path`, switched to WAL (its readers never wait for its writer).

    The switch is a connection's first statement that touches the file, and SQLite answers it
    "database is locked" at once, without its busy timeout, while the file is still in rollback-
    journal mode and another connection writes it (three `migrate` processes started together on
    a fresh file met that), or while another process's last connection cleans up the WAL as it
    closes (sqlite.org/wal.html, "Sometimes Queries Return SQLITE_BUSY"). So the switch is retried
    here, as long as the busy timeout, with sleeps that leave the event loop running."""
    conn = await onehop.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    try:
        while True:
            try:
                await conn.call(_switch_to_wal)
                return conn
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or loop.time() + pause > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.1)
    except BaseException:
        # Any way out but the return (another error, a caller's timeout cancelling the wait)
        # closes it: SQLAlchemy never saw this connection, so nothing else would, and each
        # left its worker thread and file handle behind (found by review). Shielded, so the
        # cancellation that brought us here does not cancel the close too.
        await asyncio.shield(conn.close())
        raise


def _switch_to_wal(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA journal_mode=WAL").fetchall()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """Every connection's settings. A plain file's switch to WAL is `_connect_sqlite`'s; a URL
    with options (`?mode=ro&uri=true`) or in memory (no WAL there) switches here, unretried."""
    cursor = dbapi_connection.cursor()
    try:
        if not isinstance(dbapi_connection.driver_connection, onehop.OneHopConnection):
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # What a delete frees is overwritten with zeros, so erased text leaves the file's pages
        # (and the WAL frames that write them) without a VACUUM: bounded_agents.store.erase.
        cursor.execute("PRAGMA secure_delete=ON")
    finally:
        cursor.close()
