"""SQLite erasure without a whole-index `optimize` in its write transaction (issue 40, break
7): the erased row leaves the FTS5 index by its trigger's per-row 'delete', and the merge that
drops its terms from the segments runs after the commit, in steps of `SCRUB_PAGES` pages, each
its own transaction, so another writer gets the lock between steps. The erased words are gone
from the index's vocabulary all the same."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bounded_agents.core.messages import Message
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.erase import SCRUB_PAGES, scrub_search_index


def _record(store: SqlAgentStore) -> list[str]:
    """Every statement the store's engine sends, and `COMMIT` at each commit, in order."""
    seen: list[str] = []

    def statement(_conn: Any, _cursor: Any, text: str, *_args: Any) -> None:
        seen.append(" ".join(text.split()))

    sa.event.listen(store.engine.sync_engine, "before_cursor_execute", statement)
    sa.event.listen(store.engine.sync_engine, "commit", lambda _conn: seen.append("COMMIT"))
    return seen


def _vocabulary(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, messages_fts, row)")
        return {r[0] for r in conn.execute("SELECT term FROM temp.v")}
    finally:
        conn.close()


async def test_an_erasure_merges_the_index_after_its_commit_in_bounded_steps(
    tmp_path: Path,
) -> None:
    path = tmp_path / "erase.db"
    store = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{path}")
    await store.create_schema()
    thread = await store.create_thread(actor_id="alice", agent="helper")
    for batch in range(20):  # 20 transactions: 20 segments at least
        await store.append_messages(
            thread.id,
            [Message(role="user", content=f"m{batch}w{i}x filler text") for i in range(50)],
        )
    seen = _record(store)

    assert await store.delete_message(thread.id, 7)  # holds m0w6x

    await store.dispose()
    delete = next(i for i, s in enumerate(seen) if s.startswith("DELETE FROM messages"))
    first_commit = seen.index("COMMIT", delete)
    merges = [i for i, s in enumerate(seen) if "'merge'" in s]
    assert not [s for s in seen if "optimize" in s]
    assert merges and merges[0] > first_commit  # none inside the erasure's transaction
    for a, b in itertools.pairwise(merges):
        assert "COMMIT" in seen[a:b]  # each step its own transaction
    assert all(f"-{SCRUB_PAGES}" in seen[i] for i in merges)
    vocabulary = _vocabulary(path)
    assert "m0w6x" not in vocabulary
    assert {"m0w5x", "m0w7x"} <= vocabulary


async def test_a_scrub_of_a_merged_index_is_one_step_per_index_and_none_on_postgres(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [Message(role="user", content="one")])
    await scrub_search_index(sql_store.engine)

    steps = await scrub_search_index(sql_store.engine)

    assert steps == (2 if sql_store.engine.dialect.name == "sqlite" else 0)
