"""Revision 0021 (SQLite's search index keyed by thread) on a database at 0020 that holds two
threads' messages (more than one refill batch of them, some unindexed) and archived summary
parts, on SQLite and PostgreSQL (where the GIN index becomes one on the thread and the
vector): every row kept, the indexed rows
and only they found, each thread's search its own, the tokenizer the index was built with kept,
FTS5's integrity check passing; rows written after it indexed by the new triggers and erased
cleanly; the downgrade to 0020 back to the unkeyed index, and today's code still searching
it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bounded_agents.store import SqlAgentStore, migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.search import thread_key
from tests.conftest import create_pg_database, drop_pg_database
from tests.factories import user
from tests.migrations.conftest import migration_constant

BEFORE = "0020_erased_threads_retention"
HEAD = "0021_search_thread_key"


FILLER = int(migration_constant("0021", "SEARCH_BATCH")) + 50
"""Filler rows of t1: the refill takes more than one batch."""


async def _seed(engine: Any) -> None:
    rows: list[dict[str, Any]] = [
        {"t": "t1", "seq": 1, "content": "We deployed the build on Tuesday.", "i": True},
        {"t": "t1", "seq": 2, "content": "The deployment of the old cluster.", "i": False},
    ]
    rows += [
        {"t": "t1", "seq": 3 + n, "content": f"filler line {n} of chatter", "i": True}
        for n in range(FILLER)
    ]
    rows += [
        {"t": "t2", "seq": n, "content": f"t2 deployed patch {n}", "i": True} for n in (1, 2, 3)
    ]
    async with engine.begin() as conn:
        for tid, last in (("t1", 2 + FILLER), ("t2", 3)):
            await conn.execute(
                sa.text(
                    "INSERT INTO threads (id, actor_id, agent, last_seq) "
                    "VALUES (:t, 'alice', 'helper', :n)"
                ),
                {"t": tid, "n": last},
            )
        await conn.execute(
            sa.text(
                "INSERT INTO messages (thread_id, seq, role, content, indexed) "
                "VALUES (:t, :seq, 'user', :content, :i)"
            ),
            rows,
        )
        await conn.execute(
            sa.text(
                "INSERT INTO summary_archive (thread_id, from_seq, to_seq, content) VALUES "
                "('t1', 1, 2, 'Notes: deployed on Tuesday.'), "
                "('t2', 1, 3, 'Notes: t2 deployed.')"
            )
        )


async def _scalar(engine: Any, sql: str, params: dict[str, Any] | None = None) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(sa.text(sql), params or {})).scalar_one()


async def _fts_columns(conn: Any, fts: str) -> list[str]:
    rows = (await conn.execute(sa.text(f"PRAGMA table_info({fts})"))).all()
    return [r.name for r in rows]


async def _columns(engine: Any, fts: str) -> list[str]:
    async with engine.connect() as conn:
        return await _fts_columns(conn, fts)


async def _integrity(engine: Any) -> None:
    """FTS5's integrity check, which raises on a fault: the archive's against its table (rank
    1); the messages' of the index alone (rank 0), since 0016 leaves a thread's rows out of it
    when its agent does not search, which the check against the table counts as a fault
    (it fails at 0020 with this seed already), and the rows it holds counted instead: each
    indexed row, and no other, by its thread where the index is keyed."""
    async with engine.begin() as conn:
        await conn.execute(
            sa.text("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 0)")
        )
        await conn.execute(
            sa.text(
                "INSERT INTO summary_archive_fts(summary_archive_fts, rank) "
                "VALUES ('integrity-check', 1)"
            )
        )
        indexed = "SELECT count(*) FROM messages WHERE indexed"
        held = "SELECT count(*) FROM messages_fts_docsize"
        assert (await conn.execute(sa.text(held))).scalar() == (
            await conn.execute(sa.text(indexed))
        ).scalar()
        if "thread_key" in await _fts_columns(conn, "messages_fts"):
            for tid in ("t1", "t2"):
                keyed = sa.text("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :q")
                mine = sa.text("SELECT count(*) FROM messages WHERE indexed AND thread_id = :t")
                query = {"q": f'thread_key : "{thread_key(tid)}"'}
                assert (await conn.execute(keyed, query)).scalar() == (
                    await conn.execute(mine, {"t": tid})
                ).scalar()


async def _pg_search_indexes(engine: Any) -> dict[str, str]:
    """PostgreSQL: the search indexes of `messages` and `summary_archive`, name: definition."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN "
                "('messages', 'summary_archive') AND indexname LIKE 'ix_%search_%'"
            )
        )
        return {r.indexname: r.indexdef for r in rows}


async def _deployed(store: SqlAgentStore, tid: str) -> list[tuple[str, int]]:
    found = await store.search_history(tid, "deploying", limit=10)
    return sorted((h.role, h.seq) for h in found)


async def test_0021_keys_the_index_by_thread_keeps_every_row_and_downgrades(
    fresh_url: str,
) -> None:
    engine = make_engine(fresh_url)
    store = SqlAgentStore(engine)
    sqlite = engine.dialect.name == "sqlite"
    try:
        await migrate.upgrade(engine, BEFORE)
        await _seed(engine)
        seeded = await _scalar(engine, "SELECT count(*) FROM messages")
        if sqlite:
            made_with = await _scalar(
                engine, "SELECT sql FROM sqlite_master WHERE name = 'messages_fts'"
            )

        await migrate.upgrade(engine, HEAD)

        assert await _scalar(engine, "SELECT count(*) FROM messages") == seeded
        # t1's indexed message and archived part, not its unindexed row (seq 2), not t2's
        assert await _deployed(store, "t1") == [("summary", 2), ("user", 1)]
        assert await _deployed(store, "t2") == [
            ("summary", 3),
            ("user", 1),
            ("user", 2),
            ("user", 3),
        ]
        assert len(await store.search_history("t1", "chatter", limit=FILLER)) == FILLER
        if sqlite:
            assert await _columns(engine, "messages_fts") == [
                "content",
                "search_text",
                "thread_key",
            ]
            assert await _columns(engine, "summary_archive_fts") == ["content", "thread_key"]
            kept = await _scalar(
                engine, "SELECT sql FROM sqlite_master WHERE name = 'messages_fts'"
            )
            assert kept.split("tokenize=")[1] == made_with.split("tokenize=")[1]
            await _integrity(engine)

        else:  # GIN on (thread_id, search_vector), of the rows that are indexed
            indexes = await _pg_search_indexes(engine)
            assert sorted(indexes) == [
                "ix_messages_search_thread",
                "ix_summary_archive_search_thread",
            ]
            for definition in indexes.values():
                assert "USING gin (thread_id, search_vector)" in definition, definition
                assert "WHERE (search_vector IS NOT NULL)" in definition, definition

        await store.append_messages("t1", [user("Redeploying tomorrow.")])
        assert (await store.search_history("t1", "redeploy", limit=5))[0].seq == seeded - 2
        assert await store.delete_message("t1", 1)  # and the archived part made of it
        assert await _deployed(store, "t1") == []
        if sqlite:
            await _integrity(engine)

        await migrate.downgrade(engine, BEFORE)

        assert await _scalar(engine, "SELECT count(*) FROM messages") == seeded
        # today's code on the unkeyed index: the words alone, the thread by the join
        assert await _deployed(store, "t2") == [
            ("summary", 3),
            ("user", 1),
            ("user", 2),
            ("user", 3),
        ]
        assert [h.seq for h in await store.search_history("t1", "redeploy", limit=5)] == [
            seeded - 2
        ]
        if not sqlite:
            indexes = await _pg_search_indexes(engine)
            assert sorted(indexes) == [
                "ix_messages_search_vector",
                "ix_summary_archive_search_vector",
            ]
        if sqlite:
            assert await _columns(engine, "messages_fts") == ["content", "search_text"]
            assert await _columns(engine, "summary_archive_fts") == ["content"]
            await _integrity(engine)
            await store.append_messages("t2", [user("Deploy again.")])  # 0016's triggers
            assert len(await _deployed(store, "t2")) == 5
            await _integrity(engine)
    finally:
        await engine.dispose()


@pytest.fixture
def unprivileged_url() -> Iterator[str]:
    """A fresh PostgreSQL database, and the URL of a role that may create tables in it but
    not extensions (no CREATE on the database: a managed database's application user)."""
    url = create_pg_database("agent_noext")
    role = f"agent_noext_{uuid.uuid4().hex[:8]}"

    async def run(target: str, statements: list[str]) -> None:
        dsn = make_url(target).set(drivername="postgresql").render_as_string(False)
        conn = await asyncpg.connect(dsn)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(
        run(url, [f'CREATE ROLE "{role}" LOGIN', f'GRANT CREATE ON SCHEMA public TO "{role}"'])
    )
    try:
        yield make_url(url).set(username=role).render_as_string(hide_password=False)
    finally:
        drop_pg_database(url)
        asyncio.run(run(url.rsplit("/", 1)[0] + "/postgres", [f'DROP ROLE "{role}"']))


@pytest.mark.postgres
async def test_0021_without_btree_gin_keeps_the_index_it_had_and_search_works(
    unprivileged_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(unprivileged_url)
    store = SqlAgentStore(engine)
    try:
        await migrate.upgrade(engine, BEFORE)
        await _seed(engine)

        with caplog.at_level(logging.WARNING):
            await migrate.upgrade(engine, HEAD)

        assert any("btree_gin could not be created" in r.getMessage() for r in caplog.records)
        indexes = await _pg_search_indexes(engine)
        assert sorted(indexes) == ["ix_messages_search_vector", "ix_summary_archive_search_vector"]
        assert await _deployed(store, "t1") == [("summary", 2), ("user", 1)]
        await migrate.downgrade(engine, BEFORE)  # and back, with nothing to undo
        assert sorted(await _pg_search_indexes(engine)) == sorted(indexes)
    finally:
        await engine.dispose()
