"""Revision 0017 (token ratios) adds `token_ratios` to a database that already books calls:
every ledger row and thread is kept, the ledger saves and loads ratios through it, a second
save of a model replaces its ratio, and the downgrade drops the table and keeps every row, on
SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from bounded_agents.store import migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.ledger import SqlLedger
from tests.migrations.conftest import seeded_at

HEAD = "0017_token_ratios"
BEFORE = "0016_search_opt_in"

SEED = [
    "INSERT INTO threads (id, actor_id, agent, title) VALUES ('t1', 'alice', 'helper', 'x')",
    "INSERT INTO actor_usage (actor_id, tokens, last_ledger_id) VALUES ('alice', 150, 1)",
    "INSERT INTO ledger (id, run_id, thread_id, actor_id, agent, purpose, model, "
    "prompt_tokens, completion_tokens) VALUES "
    "(1, 'r1', 't1', 'alice', 'helper', 'chat', 'm', 100, 50)",
]


async def _count(engine: Any, table: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar_one())


async def _tables(engine: Any) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))


async def test_0017_adds_token_ratios_keeps_every_row_and_downgrades(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    ledger = SqlLedger(engine)
    try:
        await seeded_at(engine, BEFORE, SEED)

        await migrate.upgrade(engine, HEAD)

        assert (await _count(engine, "threads"), await _count(engine, "ledger")) == (1, 1)
        assert await ledger.load_ratios() == {}
        await ledger.save_ratios({"claude": 1.25, "gpt": 1.5})
        await ledger.save_ratios({"claude": 2.0})  # replaced; gpt left as it was
        assert await ledger.load_ratios() == {"claude": 2.0, "gpt": 1.5}

        await migrate.downgrade(engine, BEFORE)
        assert "token_ratios" not in await _tables(engine)
        assert (await _count(engine, "threads"), await _count(engine, "ledger")) == (1, 1)
    finally:
        await engine.dispose()
