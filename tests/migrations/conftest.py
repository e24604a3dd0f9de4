"""A fresh, empty database per test, SQLite and PostgreSQL in turn: migrations run up and down
on a clean slate, never on the session's shared database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import create_pg_database, drop_pg_database


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
