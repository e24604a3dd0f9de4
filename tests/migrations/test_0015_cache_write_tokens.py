"""Revision 0015 (cache writes) adds `ledger.cache_write_tokens` to a database that already
books calls: the rows booked before read 0, a row booked after keeps its figure through the
store, and the downgrade drops the column and keeps every row, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.core.ports import LedgerEntry
from bounded_agents.store import migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.ledger import SqlLedger
from tests.conftest import create_pg_database, drop_pg_database
from tests.migrations.conftest import seeded_at

HEAD = "0015_cache_writes"
BEFORE = "0013_fold_health"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/cache_writes.db"
        return
    url = create_pg_database("agent_migr15")
    try:
        yield url
    finally:
        drop_pg_database(url)


SEED = [
    "INSERT INTO actor_usage (actor_id, tokens, last_ledger_id) VALUES ('alice', 150, 1)",
    "INSERT INTO ledger (id, run_id, thread_id, actor_id, agent, purpose, model, "
    "prompt_tokens, completion_tokens, cached_tokens) VALUES "
    "(1, 'r1', 't1', 'alice', 'helper', 'chat', 'm', 100, 50, 40)",
]


async def _columns(engine: Any) -> set[str]:
    def names(conn: sa.Connection) -> set[str]:
        return {c["name"] for c in sa.inspect(conn).get_columns("ledger")}

    async with engine.connect() as conn:
        return await conn.run_sync(names)


async def test_0015_adds_cache_write_tokens_to_booked_rows_and_downgrades(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    ledger = SqlLedger(engine)
    try:
        await seeded_at(engine, BEFORE, SEED)

        await migrate.upgrade(engine, HEAD)

        [old] = await ledger.entries_for_run("r1")
        assert (old.prompt_tokens, old.cached_tokens, old.cache_write_tokens) == (100, 40, 0)
        await ledger.record(
            LedgerEntry(
                run_id="r2",
                thread_id="t1",
                actor_id="alice",
                agent="helper",
                purpose="chat",
                model="claude",
                prompt_tokens=3000,
                completion_tokens=10,
                cached_tokens=2000,
                cache_write_tokens=900,
            )
        )
        [new] = await ledger.entries_for_run("r2")
        assert (new.cached_tokens, new.cache_write_tokens) == (2000, 900)

        await migrate.downgrade(engine, BEFORE)
        assert "cache_write_tokens" not in await _columns(engine)
        async with engine.connect() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM ledger"))).scalar()
        assert count == 2
    finally:
        await engine.dispose()
