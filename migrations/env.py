"""Alembic environment, async.

Two ways in: `create_schema()` and the tests hand over an open connection through
`config.attributes["connection"]` (so migrations run on the caller's engine and transaction);
the `alembic` CLI builds its own async engine from AGENT_DATABASE_URL or alembic.ini.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import Connection, pool
from sqlalchemy.ext.asyncio import create_async_engine

from app.store.migrate import MIGRATION_LOCK_KEY
from app.store.schema import metadata

config = context.config
target_metadata = metadata


def _configure(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        # Processes started together on one database queue here: the first migrates, the next
        # finds the schema at head. Held until the migration's transaction ends.
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    return os.environ.get("AGENT_DATABASE_URL") or config.get_main_option("sqlalchemy.url") or ""


async def _run_async() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_configure)
    finally:
        await engine.dispose()


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
    else:
        asyncio.run(_run_async())


if context.is_offline_mode():
    run_offline()
else:
    run_online()
