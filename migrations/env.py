"""Alembic environment, async.

Two ways in: `create_schema()` and the tests hand over an open connection through
`config.attributes["connection"]` (so migrations run on the caller's engine and transaction);
the `alembic` CLI builds the app's engine (`make_engine`, honouring AGENT_DB_PGBOUNCER) from
AGENT_DATABASE_URL or alembic.ini. Both run in `bounded_agents.store.migrate.migration_connection`:
on SQLite with foreign keys off, checked with `PRAGMA foreign_key_check` before the commit.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import Connection

from bounded_agents.settings import get_settings
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.engine import make_engine
from bounded_agents.store.migrate import (
    MIGRATION_LOCK_KEY,
    check_foreign_keys,
    migration_connection,
    require_foreign_keys_off,
)
from bounded_agents.store.schema import metadata
from bounded_agents.store.search import include_name

config = context.config
target_metadata = metadata


def _configure(connection: Connection) -> None:
    if dialect_of(connection).postgres:
        # Processes started together on one database queue here: the first migrates, the next
        # finds the schema at head. Held until the migration's transaction ends.
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
        if connection.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'citus'").first():
            # On a Citus coordinator one migration run mixes DDL on distributed tables with
            # functions (0012's search trigger), which Citus allows in one transaction only over
            # one connection per node.
            connection.exec_driver_sql("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    require_foreign_keys_off(connection)
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=dialect_of(connection).sqlite,
        compare_type=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()
        check_foreign_keys(connection)


def _url() -> str:
    return os.environ.get("AGENT_DATABASE_URL") or config.get_main_option("sqlalchemy.url") or ""


async def _run_async() -> None:
    engine = make_engine(_url(), pgbouncer=get_settings().db_pgbouncer)
    try:
        async with migration_connection(engine) as conn:
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
