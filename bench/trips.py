"""Counting what a read costs at the driver: asyncpg protocol round trips (PostgreSQL) or
aiosqlite thread hops (SQLite; each call is queued to the connection's worker thread and
awaited). Bench-only instrumentation: nothing in app/ is patched."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiosqlite
import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

_WIRE_CALLS = frozenset(
    {"query", "prepare", "bind_execute", "bind_execute_many", "bind", "execute", "close_statement"}
)
"""asyncpg protocol methods that each send a message and wait for the server's answer."""


class DriverClock:
    """Driver calls and the wall time spent awaiting them, while `enabled`."""

    def __init__(self) -> None:
        self.enabled = False
        self.calls = 0
        self.seconds = 0.0

    def reset(self) -> None:
        self.calls, self.seconds = 0, 0.0

    async def timed(self, awaitable: Awaitable[Any]) -> Any:
        if not self.enabled:
            return await awaitable
        start = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


class _CountingProtocol:
    """Stands in front of an asyncpg connection's protocol and notes every wire call (and, with
    a clock, times it)."""

    def __init__(self, inner: Any, calls: list[str], clock: DriverClock | None = None) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_calls", calls)
        object.__setattr__(self, "_clock", clock)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in _WIRE_CALLS:
            return attr
        calls: list[str] = self._calls
        clock: DriverClock | None = self._clock

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            result = attr(*args, **kwargs)
            return result if clock is None else clock.timed(result)

        return wrapped

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)


def count_asyncpg(
    conn: asyncpg.Connection, calls: list[str], clock: DriverClock | None = None
) -> None:
    conn._protocol = _CountingProtocol(conn._protocol, calls, clock)


def count_engine_asyncpg(
    engine: AsyncEngine, calls: list[str], clock: DriverClock | None = None
) -> None:
    """Count the wire calls of every connection `engine` opens from now on."""

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        count_asyncpg(dbapi_connection.driver_connection, calls, clock)

    event.listen(engine.sync_engine, "connect", on_connect)


@contextlib.contextmanager
def clock_aiosqlite(clock: DriverClock) -> Iterator[None]:
    """Time every aiosqlite call (queue to the worker thread, run, wake up) while the block runs."""
    original = aiosqlite.Connection._execute

    async def _execute(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await clock.timed(original(self, fn, *args, **kwargs))

    aiosqlite.Connection._execute = _execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        aiosqlite.Connection._execute = original  # type: ignore[method-assign]


@contextlib.contextmanager
def count_aiosqlite(calls: list[str]) -> Iterator[None]:
    """Count every aiosqlite call (one worker-thread hop each) while the block runs."""
    original = aiosqlite.Connection._execute

    async def _execute(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", "call"))
        return await original(self, fn, *args, **kwargs)

    aiosqlite.Connection._execute = _execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        aiosqlite.Connection._execute = original  # type: ignore[method-assign]


async def calls_of(
    url: str,
    engine: AsyncEngine,
    fn: Callable[[], Awaitable[Any]],
    calls: list[str],
    warmup: int = 2,
) -> list[str]:
    """The driver calls of one `fn()` after `warmup` calls (statement caches filled). For
    PostgreSQL `calls` must already be wired to the connection(s) `fn` uses."""
    sqlite = make_url(url).get_backend_name() == "sqlite"
    for _ in range(warmup):
        await fn()
    calls.clear()
    if sqlite:
        with count_aiosqlite(calls):
            await fn()
    else:
        await fn()
    del engine
    return list(calls)
