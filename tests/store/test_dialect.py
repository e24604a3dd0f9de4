"""The one place that tells PostgreSQL from SQLite (`bounded_agents.store.dialect`): an engine, a
connection and a URL of each give its row, and a database the project does not run on is one
clear `ConfigError` instead of being taken for SQLite, as the scattered `!= "postgresql"`
branches used to take it."""

from __future__ import annotations

import pytest

from bounded_agents.errors import ConfigError
from bounded_agents.store import SqlAgentStore, dialect_of, dialect_of_url
from bounded_agents.store.dialect import DIALECTS, POSTGRESQL, SQLITE


async def test_an_engine_and_its_connection_name_the_same_dialect(sql_store: SqlAgentStore) -> None:
    engine = sql_store.engine
    expected = POSTGRESQL if engine.url.get_backend_name() == "postgresql" else SQLITE
    assert dialect_of(engine) is expected
    assert dialect_of(engine.dialect) is expected
    async with engine.connect() as conn:
        assert dialect_of(conn) is expected
    assert dialect_of_url(engine.url) is expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite+aiosqlite:///./agent.db", SQLITE),
        ("sqlite://", SQLITE),
        ("postgresql+asyncpg://u@h/db", POSTGRESQL),
        ("postgresql://u@h/db", POSTGRESQL),
    ],
)
def test_a_url_names_its_dialect_by_backend_whatever_the_driver(url: str, expected: object) -> None:
    assert dialect_of_url(url) is expected


def test_each_dialect_is_exactly_one_of_postgres_and_sqlite() -> None:
    assert sorted(DIALECTS) == ["postgresql", "sqlite"]
    assert [(d.postgres, d.sqlite) for d in DIALECTS.values()] == [(True, False), (False, True)]


def test_a_database_the_project_does_not_run_on_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as raised:
        dialect_of_url("mysql+aiomysql://u@h/db")
    assert str(raised.value) == "bounded-agents runs on PostgreSQL or SQLite, not 'mysql'"
