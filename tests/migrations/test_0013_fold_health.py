"""Revision 0013 (fold health, issue 36) adds `threads.fold_health` to a database that already
holds threads, messages and summaries: every row stays, every existing thread reads as healthy
(NULL), the column is written and read back, and the downgrade drops it and keeps every row, on
SQLite and PostgreSQL. (The lead re-chains the number at merge: it follows 0011 here.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.core.ports import FoldHealth, ThreadTurnQuery
from bounded_agents.store import SqlAgentStore, migrate
from bounded_agents.store.engine import make_engine
from tests.conftest import create_pg_database, drop_pg_database
from tests.migrations.conftest import seeded_at

HEAD = "0013_fold_health"
BEFORE = "0012_search"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/health.db"
        return
    url = create_pg_database("agent_migr13")
    try:
        yield url
    finally:
        drop_pg_database(url)


SEED = [
    "INSERT INTO threads (id, actor_id, agent, last_seq) VALUES ('t1', 'alice', 'helper', 3), "
    "('t2', 'bob', 'helper', 1)",
    "INSERT INTO messages (thread_id, seq, role, content, run_id) VALUES "
    "('t1', 1, 'user', 'Please note: the warehouse code is WH-42.', 'r1'), "
    "('t1', 2, 'assistant', 'Noted.', 'r1'), "
    "('t1', 3, 'user', 'And the dock is D-7.', 'r2'), "
    "('t2', 1, 'user', 'Hello.', 'r3')",
    "INSERT INTO thread_summaries (thread_id, covers_through_seq, text) VALUES "
    "('t1', 2, '- warehouse WH-42')",
]


async def _counts(engine: Any) -> dict[str, int]:
    out = {}
    async with engine.connect() as conn:
        for table in ("threads", "messages", "thread_summaries"):
            out[table] = (await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar()
    return out


async def _columns(engine: Any) -> set[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda c: {col["name"] for col in sa.inspect(c).get_columns("threads")}
        )


async def test_0013_adds_fold_health_to_a_database_with_data_and_downgrades(
    fresh_url: str,
) -> None:
    engine = make_engine(fresh_url)
    store = SqlAgentStore(engine)
    try:
        await seeded_at(engine, BEFORE, SEED)
        seeded = await _counts(engine)

        await migrate.upgrade(engine, HEAD)
        assert (
            await _counts(engine) == seeded == {"threads": 2, "messages": 4, "thread_summaries": 1}
        )
        assert "fold_health" in await _columns(engine)
        assert await store.fold_health("t1") is None and await store.fold_health("t2") is None
        page = await store.load_thread_for_turn(
            ThreadTurnQuery(thread_id="t1", message_limit=1, after_summary=True)
        )
        assert page is not None and page.fold_health is None and page.summary is not None
        failing = FoldHealth(outcome="empty", failures=2, retry_after_seq=9, owed=1)
        await store.save_fold_health("t1", failing)
        assert await store.fold_health("t1") == failing
        assert await store.fold_health("t2") is None

        await migrate.downgrade(engine, BEFORE)
        assert "fold_health" not in await _columns(engine)
        assert await _counts(engine) == seeded, "no row lost to the downgrade"
    finally:
        await store.dispose()  # the turn read's dedicated connections too
