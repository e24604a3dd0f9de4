"""The per-turn read straight through the driver: one asyncpg call or one aiosqlite worker-thread
call, no SQLAlchemy Core execute, no result objects, no pool checkout for a read of its own.

The statement is the store's own (`turn_read`), compiled once per shape with the engine's
dialect, so the SQL text is byte for byte what SQLAlchemy would send. Before it goes out the
engine's `before_cursor_execute` listeners are called with it and its parameters, as SQLAlchemy
calls them, so whatever watches the engine's statements (the tests that check every statement
of a turn names its thread, fault injection) still sees it, and may still make it fail. On an
engine with `after_cursor_execute` listeners (tracing that needs SQLAlchemy's cursor) the read
is SQLAlchemy's (`bounded_agents.store.driver.driver_way_open`).

Two ways in:
- `fetch_on(conn, ...)`: on a connection the caller holds (the turn's unit of work), through its
  driver connection, inside the transaction already open there (so it sees the turn's own
  uncommitted user message). When no driver transaction is open yet, SQLAlchemy runs it.
- `fetch(...)`: a read of its own on one of at most `DEDICATED` driver connections this reader
  keeps out of the pool (opened through the engine, so its connect events ran; detached, so
  the pool counts them no more and opens others as it needs). No checkout ping: a connection
  the driver knows is closed is dropped before use, and a read that fails because its
  connection died is retried once on a fresh one (a single SELECT: nothing to undo). When
  every dedicated connection is busy, it returns None and the caller takes the pool's way.
  Each store keeps at most `DEDICATED` connections beside its pool (docs/scale-out.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import asyncpg  # type: ignore[import-untyped]
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.driver import (
    DRIVER_ERRORS,
    Compiled,
    announce,
    compiled,
    driver_error,
    driver_way_open,
    guarded,
    raw_connection,
)
from bounded_agents.store.onehop import OneHopConnection, run_statement
from bounded_agents.store.waiting import send_waiting

DEDICATED = 2
"""Driver connections a reader keeps for reads of its own, at most."""

Rows = Sequence[Sequence[Any]]


class HotReader:
    """See the module docstring. Whether the driver's way is taken is asked on every read
    (`bounded_agents.store.driver.driver_way_open`: not behind PgBouncer, whose pooling turns
    asyncpg's statement cache off, nor with instrumentation listening after execution); on SQLite
    engines that are not `OneHopConnection`'s (memory databases, URLs with options) the read
    is SQLAlchemy's too. `enabled=False` turns it off altogether (tests' reference reads)."""

    def __init__(self, engine: AsyncEngine, *, enabled: bool = True) -> None:
        self._engine = engine
        self._sync = engine.sync_engine
        self._postgres = dialect_of(engine).postgres
        self._idle: list[Any] = []
        self._open = 0
        self.enabled = enabled

    def _compile(self, stmt: sa.Select[Any]) -> Compiled:
        return compiled(stmt, self._engine.dialect, None)

    async def _driver_fetch(self, driver: Any, sql: str, args: tuple[Any, ...]) -> Rows | None:
        if self._postgres:
            rows: Rows = await driver.fetch(sql, *args)
            return rows
        if isinstance(driver, OneHopConnection):
            _description, found, _count, _rowid = await driver.call(run_statement, sql, args)
            return cast(Rows, found)
        return None

    async def fetch_on(
        self, conn: AsyncConnection, stmt: sa.Select[Any], params: dict[str, Any]
    ) -> Rows:
        """`stmt` on the caller's connection, inside its open transaction."""
        if self.enabled and driver_way_open(self._engine):
            driver = (await raw_connection(conn)).driver_connection
            if driver is not None and (not self._postgres or driver.is_in_transaction()):
                if self._postgres:
                    await send_waiting(conn)  # the unit's waiting writes go first
                form = self._compile(stmt)
                args = form.args(params)
                announce(self._sync, conn.sync_connection, form.sql, args)
                fetched = self._driver_fetch(driver, form.sql, args)
                rows: Rows | None = await guarded(conn, "turn read", fetched)
                if rows is not None:
                    return rows
        result: Rows = (await conn.execute(stmt, params)).all()
        return result

    async def fetch(self, stmt: sa.Select[Any], params: dict[str, Any]) -> Rows | None:
        """`stmt` on a dedicated connection; None when there is none free (use the pool)."""
        if not self.enabled or not driver_way_open(self._engine):
            return None
        form = self._compile(stmt)
        args = form.args(params)
        for attempt in range(2):
            driver = await self._take(fresh=attempt > 0)
            if driver is None:
                return None
            announce(self._sync, self._sync, form.sql, args)
            try:
                rows = await self._driver_fetch(driver, form.sql, args)
            except (*DRIVER_ERRORS, OSError) as exc:
                dead = self._postgres and (
                    driver.is_closed() or isinstance(exc, asyncpg.InternalClientError)
                )
                await self._drop(driver)
                if dead and attempt == 0:
                    continue  # the connection died: nothing was read, read again on a new one
                raise driver_error("turn read", exc) from exc
            except BaseException:
                await self._drop(driver)
                raise
            self._idle.append(driver)
            return rows
        return None  # pragma: no cover - the loop returns or raises

    async def _take(self, *, fresh: bool) -> Any:
        while self._idle and not fresh:
            driver = self._idle.pop()
            if self._postgres and driver.is_closed():
                await self._drop(driver)
                continue
            return driver
        if self._open >= DEDICATED:
            return None
        self._open += 1
        try:
            fairy = await self._engine.raw_connection()
            driver = fairy.driver_connection
            fairy.detach()  # ours now: the pool forgets it
        except BaseException:
            self._open -= 1
            raise
        return driver

    async def _drop(self, driver: Any) -> None:
        self._open -= 1
        try:
            if self._postgres:
                driver.terminate()
            else:
                await driver.close()
        except Exception:  # a connection being dropped may well be broken
            pass

    async def close(self) -> None:
        """Close the dedicated connections (the store's `dispose`)."""
        idle, self._idle = self._idle, []
        for driver in idle:
            self._open -= 1
            try:
                await driver.close()
            except Exception:  # closing is best effort: the connection may be broken
                pass
