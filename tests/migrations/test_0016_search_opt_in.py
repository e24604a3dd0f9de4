"""Revision 0016 (search opt-in) on a database at 0015 that holds indexed messages, on SQLite
and PostgreSQL: every thread stays searchable and every row indexed (search finds them as
before); a thread turned off stores new rows unindexed, turned on again it indexes them; the
downgrade to 0015 indexes every row first, keeps every row, and leaves 0015's index sound."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from bounded_agents.store import SqlAgentStore, migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.search_index import index_agents
from tests.factories import user
from tests.migrations.conftest import seeded_at

HEAD = "0016_search_opt_in"
BEFORE = "0015_cache_writes"

SEED = [
    "INSERT INTO threads (id, actor_id, agent, title, last_seq) VALUES "
    "('t1', 'alice', 'helper', 'old', 2)",
    "INSERT INTO messages (thread_id, seq, role, content) VALUES "
    "('t1', 1, 'user', 'We deployed the build on Tuesday.')",
    "INSERT INTO messages (thread_id, seq, role, content) VALUES "
    "('t1', 2, 'assistant', 'Noted, the deployment went fine.')",
]


async def _scalar(engine: Any, sql: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(sa.text(sql))).scalar_one()


async def test_0016_keeps_old_rows_indexed_indexes_by_thread_and_downgrades(
    fresh_url: str,
) -> None:
    engine = make_engine(fresh_url)
    store = SqlAgentStore(engine)
    try:
        await seeded_at(engine, BEFORE, SEED)

        await migrate.upgrade(engine, HEAD)

        assert await _scalar(engine, "SELECT count(*) FROM threads WHERE searchable") == 1
        assert await _scalar(engine, "SELECT count(*) FROM messages WHERE indexed") == 2
        assert 1 in [h.seq for h in await store.search_history("t1", "deploying", limit=5)]

        await index_agents(engine, [], ["helper"])  # the agent stops searching
        await store.append_messages("t1", [user("Shipping on Friday.")])
        assert await _scalar(engine, "SELECT count(*) FROM messages WHERE NOT indexed") == 1
        assert await store.search_history("t1", "friday", limit=5) == []

        assert await index_agents(engine, ["helper"], []) == 1  # and starts again
        assert [h.seq for h in await store.search_history("t1", "friday", limit=5)] == [3]
        await index_agents(engine, [], ["helper"])
        await store.append_messages("t1", [user("Unindexed until the downgrade.")])
        assert await store.search_history("t1", "downgrade", limit=5) == []

        await migrate.downgrade(engine, BEFORE)

        assert await _scalar(engine, "SELECT count(*) FROM messages") == 4
        found = await store.search_history("t1", "downgrade", limit=5)
        assert [h.seq for h in found] == [4], "the downgrade indexed the unindexed row"
        if engine.dialect.name == "sqlite":
            async with engine.begin() as conn:  # raises when the index and the table differ
                await conn.execute(
                    sa.text(
                        "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"
                    )
                )
    finally:
        await engine.dispose()
