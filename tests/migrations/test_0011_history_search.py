"""Revision 0011 (history search) indexes a database that already holds messages: the messages
stored before the upgrade are found by a search after it, the index follows every later
write (insert, update, delete), and the downgrade removes it and keeps every message, on
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.store import SqlAgentStore, migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.search import FTS_TABLE, SEARCH_COLUMN
from tests.conftest import create_pg_database, drop_pg_database
from tests.migrations.conftest import seeded_at

HEAD = "0011_search"
BEFORE = "0010"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/search.db"
        return
    url = create_pg_database("agent_migr11")
    try:
        yield url
    finally:
        drop_pg_database(url)


SEED = [
    "INSERT INTO threads (id, actor_id, agent, last_seq) VALUES ('t1', 'alice', 'helper', 3), "
    "('t2', 'bob', 'helper', 1)",
    "INSERT INTO messages (thread_id, seq, role, content, run_id) VALUES "
    "('t1', 1, 'user', 'Please note: the warehouse code is WH-42.', 'r1'), "
    "('t1', 2, 'assistant', 'Noted, the warehouse it is.', 'r1'), "
    "('t1', 3, 'user', 'Unrelated chat about coffee.', 'r2'), "
    "('t2', 1, 'user', 'Another warehouse in another thread.', 'r3')",
]


async def _contents(store: SqlAgentStore, thread_id: str, query: str) -> list[str]:
    """The messages 0011's own index finds for any word of `query`, sorted: queried by hand,
    since the store's search reads the index of the newest revision (0012's)."""
    words = query.lower().split()
    if store.engine.dialect.name == "postgresql":
        statement = sa.text(
            f"SELECT content FROM messages WHERE thread_id = :tid AND {SEARCH_COLUMN} @@ "
            "to_tsquery('simple', :q)"
        )
        q = " | ".join(words)
    else:
        statement = sa.text(
            f"SELECT m.content FROM {FTS_TABLE} f JOIN messages m ON m.rowid = f.rowid "
            f"WHERE {FTS_TABLE} MATCH :q AND m.thread_id = :tid"
        )
        q = " OR ".join(f'"{w}"' for w in words)
    async with store.engine.connect() as conn:
        rows = (await conn.execute(statement, {"tid": thread_id, "q": q})).scalars().all()
    return sorted(rows)


async def _search_objects(engine: Any) -> set[str]:
    def names(conn: sa.Connection) -> set[str]:
        inspector = sa.inspect(conn)
        found = {t for t in inspector.get_table_names() if t.startswith(FTS_TABLE)}
        found |= {c["name"] for c in inspector.get_columns("messages")} & {SEARCH_COLUMN}
        return found

    async with engine.connect() as conn:
        return await conn.run_sync(names)


async def test_0011_indexes_the_messages_a_database_already_holds_and_downgrades(
    fresh_url: str,
) -> None:
    engine = make_engine(fresh_url)
    store = SqlAgentStore(engine)
    try:
        await seeded_at(engine, BEFORE, SEED)

        await migrate.upgrade(engine, HEAD)

        assert await _contents(store, "t1", "warehouse WH") == [
            "Noted, the warehouse it is.",
            "Please note: the warehouse code is WH-42.",
        ]
        async with engine.begin() as conn:  # as a store at 0011 wrote (no search_text yet)
            await conn.execute(
                sa.text(
                    "INSERT INTO messages (thread_id, seq, role, content) "
                    "VALUES ('t1', 4, 'user', 'The warehouse moved to Porto.')"
                )
            )
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "UPDATE messages SET content = 'tea instead' WHERE seq = 3 AND thread_id = 't1'"
                )
            )
            await conn.execute(sa.text("DELETE FROM messages WHERE thread_id = 't1' AND seq = 2"))
        assert sorted(await _contents(store, "t1", "warehouse")) == [
            "Please note: the warehouse code is WH-42.",
            "The warehouse moved to Porto.",
        ]
        assert await _contents(store, "t1", "coffee") == []
        assert await _contents(store, "t1", "tea") == ["tea instead"]
        if engine.dialect.name == "sqlite":
            async with engine.begin() as conn:  # raises when the index and the table differ
                await conn.execute(
                    sa.text(
                        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)"
                    )
                )

        await migrate.downgrade(engine, BEFORE)
        assert await _search_objects(engine) == set()
        async with engine.connect() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM messages"))).scalar()
        assert count == 4  # 4 seeded, 1 appended, 1 deleted
    finally:
        await engine.dispose()
