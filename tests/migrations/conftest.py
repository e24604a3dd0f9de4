"""A fresh, empty database per test, SQLite and PostgreSQL in turn: migrations run up and down
on a clean slate, never on the session's shared database."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.store import migrate
from bounded_agents.store.migrate import MIGRATIONS
from tests.conftest import create_pg_database, drop_pg_database


def migration_constant(number: str, name: str) -> Any:
    """A module-level constant of migration `number` ("0012"), read from its file (a migration
    is no importable module: its file name starts with a date)."""
    path = next((MIGRATIONS / "versions").glob(f"*_{number}_*.py"))
    spec = importlib.util.spec_from_file_location(f"m{number}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


async def seeded_at(engine: AsyncEngine, revision: str, statements: Sequence[str]) -> None:
    """The database migrated to `revision`, then `statements` run in one transaction: the
    rows a migration test upgrades from."""
    await migrate.upgrade(engine, revision)
    async with engine.begin() as conn:
        for statement in statements:
            await conn.execute(sa.text(statement))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/fresh.db"
        return
    url = create_pg_database("agent_migr")
    try:
        yield url
    finally:
        drop_pg_database(url)
