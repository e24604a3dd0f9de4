"""Alembic owns the schema: the migrated database matches the metadata, and it downgrades."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from bounded_agents.store import migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.schema import metadata
from bounded_agents.store.search import include_name


def _diff(connection: sa.Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"include_name": include_name})
    return list(compare_metadata(context, metadata))


def _tables(connection: sa.Connection) -> set[str]:
    return set(sa.inspect(connection).get_table_names())


async def test_upgrade_head_matches_metadata_and_downgrade_base_empties(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    try:
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
            assert await conn.run_sync(_tables) >= {t.name for t in metadata.sorted_tables}
        await migrate.downgrade(engine, "base")
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) == {"alembic_version"}
        # And back up again: the revision chain is repeatable.
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
    finally:
        await engine.dispose()


async def test_create_schema_is_idempotent(fresh_url: str) -> None:
    from bounded_agents.store import SqlAgentStore

    store = SqlAgentStore.from_url(fresh_url)
    try:
        await store.create_schema()
        await store.create_schema()
        thread = await store.create_thread(actor_id="a", agent="b")
        assert await store.get_thread(thread.id) is not None
    finally:
        await store.dispose()


def test_alembic_cli_config_points_at_the_migrations() -> None:
    cfg = migrate.alembic_config("sqlite+aiosqlite:///x.db")
    assert cfg.get_main_option("script_location") == str(migrate.MIGRATIONS)
    assert cfg.get_main_option("sqlalchemy.url") == "sqlite+aiosqlite:///x.db"
