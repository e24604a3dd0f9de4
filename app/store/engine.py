"""Engine construction: one place that knows the per-database connection settings."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for the write lock before failing (WAL lets readers go on)."""


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 10,
    pool_timeout: float = 10.0,
    echo: bool = False,
) -> AsyncEngine:
    """Build an async engine: PostgreSQL through asyncpg, SQLite through aiosqlite.

    SQLite gets WAL (readers never wait for the writer), foreign keys on (off by default in
    SQLite), and a busy timeout so concurrent writers queue instead of failing. PostgreSQL gets
    an explicit pool size and checkout timeout, so exhaustion is a clear error, not a hang, and
    `pool_pre_ping` so a restarted server costs one failed ping rather than one failed request.
    """
    kwargs: dict[str, Any] = {"echo": echo}
    if is_sqlite(url):
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs.update(
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=pool_timeout,
            pool_pre_ping=True,
        )
    engine = create_async_engine(url, **kwargs)
    if is_sqlite(url):
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()
