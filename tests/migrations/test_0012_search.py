"""Revision 0012 (stemmed index over content and tool results, dump-safe SQLite key, summary
archive) on a database at 0011 that holds messages: more than one backfill batch of them, old
messages found by another form of their words, their tool results found (the search tool's own
not), every row indexed, and the downgrade back to 0011 keeping every message with 0011's
index working again. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bounded_agents.core.messages import ToolCall, ToolResult, encode_json_list
from bounded_agents.store import SqlAgentStore, migrate
from bounded_agents.store.engine import make_engine
from bounded_agents.store.migrate import MIGRATIONS
from bounded_agents.store.search import FTS_TABLE
from tests.factories import user
from tests.migrations.conftest import migration_constant

BEFORE = "0011_search"
HEAD = "0012_search"


FILLER = int(migration_constant("0012", "BATCH_ROWS")) + 100
"""Filler messages beyond the ones searched: the backfill takes more than one batch."""

CALLS = encode_json_list(
    [
        ToolCall(id="c1", name="inventory", arguments={}),
        ToolCall(id="c2", name="search_history", arguments={"query": "x"}),
    ]
)
RESULTS = encode_json_list(
    [
        ToolResult(call_id="c1", content="pallet count for bay 7: 4411 units"),
        ToolResult(call_id="c2", content='{"results": [{"content": "zebracode"}]}'),
    ]
)


async def _seed(engine: Any) -> None:
    rows: list[dict[str, Any]] = [
        {"seq": 1, "role": "user", "content": "We deployed the build on Tuesday.", "c": None},
        {"seq": 2, "role": "assistant", "content": "", "c": CALLS, "r": RESULTS},
    ]
    rows += [
        {"seq": 3 + i, "role": "user", "content": f"filler line {i} of chatter", "c": None}
        for i in range(FILLER)
    ]
    for row in rows:
        row.setdefault("r", None)
    async with engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO threads (id, actor_id, agent, last_seq) "
                f"VALUES ('t1', 'alice', 'helper', {len(rows)})"
            )
        )
        await conn.execute(
            sa.text(
                "INSERT INTO messages (thread_id, seq, role, content, tool_calls, tool_results) "
                "VALUES ('t1', :seq, :role, :content, :c, :r)"
            ),
            rows,
        )


async def _unindexed(engine: Any) -> int:
    column = "search_vector" if engine.dialect.name == "postgresql" else "search_id"
    async with engine.connect() as conn:
        found = await conn.execute(sa.text(f"SELECT count(*) FROM messages WHERE {column} IS NULL"))
        return int(found.scalar_one())


async def _count(engine: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(sa.text("SELECT count(*) FROM messages"))).scalar_one())


async def test_0012_indexes_what_a_database_at_0011_holds_and_downgrades(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    store = SqlAgentStore(engine)
    try:
        await migrate.upgrade(engine, BEFORE)
        await _seed(engine)
        seeded = await _count(engine)

        # Through 0012 to the head: today's store writes the columns of later revisions
        # (0016's search flags), so it is driven at the head; the downgrade below walks back
        # through every revision to 0011.
        await migrate.upgrade(engine, "head")

        assert await _unindexed(engine) == 0
        deployed = await store.search_history("t1", "deploying", limit=5)
        assert [(h.seq, h.content) for h in deployed] == [(1, "We deployed the build on Tuesday.")]
        pallet = await store.search_history("t1", "pallets", limit=5)
        assert [(h.seq, h.in_tools) for h in pallet] == [(2, True)]
        assert await store.search_history("t1", "zebracode", limit=5) == []
        assert len(await store.search_history("t1", "filler chatter", limit=FILLER)) == FILLER
        await store.append_messages("t1", [user("Redeploying tomorrow.")])
        assert [h.seq for h in await store.search_history("t1", "redeploy", limit=5)] == [
            seeded + 1
        ]
        await store.archive_summary_part("t1", 1, 2, "Notes: deployment on Tuesday.")
        if engine.dialect.name == "sqlite":
            async with engine.begin() as conn:  # raises when the index and the table differ
                for fts in (FTS_TABLE, "summary_archive_fts"):
                    await conn.execute(
                        sa.text(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")
                    )

        await migrate.downgrade(engine, BEFORE)

        assert await _count(engine) == seeded + 1
        async with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                stmt = "SELECT seq FROM messages WHERE search_vector @@ to_tsquery('simple', :q)"
            else:
                stmt = (
                    f"SELECT m.seq FROM {FTS_TABLE} f JOIN messages m ON m.rowid = f.rowid "
                    f"WHERE {FTS_TABLE} MATCH :q"
                )
            found = (await conn.execute(sa.text(stmt), {"q": "deployed"})).scalars().all()
        assert found == [1]  # 0011's index again: unstemmed, over content
    finally:
        await engine.dispose()


def test_the_migration_is_bounded_in_batches() -> None:
    """Each backfill statement touches at most BATCH_ROWS rows (the module's docstring says
    how); a batch that size keeps a statement's work and memory small."""
    assert 100 <= int(migration_constant("0012", "BATCH_ROWS")) <= 10_000
    text = Path(next((MIGRATIONS / "versions").glob("*_0012_*.py"))).read_text()
    assert "'rebuild'" not in text.split("_SQLITE_DOWN")[0]  # no whole-table rebuild going up
