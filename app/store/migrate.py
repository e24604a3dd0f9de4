"""Alembic, driven from code: `create_schema()` and the tests use the same revisions users get.

Several processes may start at once on one database (`AGENT_MIGRATE_ON_START` in each): on
PostgreSQL every migration first takes an advisory lock (`migrations/env.py`), on SQLite a file
lock beside the database file, so one migrates and the others find the schema at head.
"""

from __future__ import annotations

import asyncio
import fcntl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.engine import make_engine

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "migrations"
MIGRATION_LOCK_KEY = 0x626F756E646564
"""The PostgreSQL advisory lock every migration takes first ("bounded" in ASCII), and
`app.store.distribute` too: processes started together queue on it."""


def alembic_config(url: str | None = None) -> Config:
    """Config for `migrations/`; `alembic.ini` at the top is used when present."""
    ini = ROOT / "alembic.ini"
    cfg = Config(str(ini)) if ini.exists() else Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    async with _sqlite_file_lock(engine), engine.begin() as conn:
        await conn.run_sync(_run, "upgrade", revision)


async def upgrade_url(url: str, revision: str = "head") -> None:
    """`upgrade` on an engine of its own for `url`, disposed afterwards: for callers that
    migrate a database they do not otherwise hold (test fixtures, the benchmark)."""
    engine = make_engine(url)
    try:
        await upgrade(engine, revision)
    finally:
        await engine.dispose()


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    async with _sqlite_file_lock(engine), engine.begin() as conn:
        await conn.run_sync(_run, "downgrade", revision)


@asynccontextmanager
async def _sqlite_file_lock(engine: AsyncEngine) -> AsyncIterator[None]:
    """An exclusive `flock` on `<database>.migrate-lock` while a SQLite migration runs (two
    processes migrating one file would otherwise both read the old version, then collide on
    the write lock). A no-op for PostgreSQL and in-memory databases."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a") as handle:  # noqa: ASYNC230 (a local file)
        await asyncio.to_thread(fcntl.flock, handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _run(connection: Connection, action: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    if action == "upgrade":
        command.upgrade(cfg, revision)
    else:
        command.downgrade(cfg, revision)
