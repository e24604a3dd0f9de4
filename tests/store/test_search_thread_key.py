"""A thread's search reads that thread (migration 0021), on SQLite and PostgreSQL: it finds only
the thread's rows beside other threads full of the same word; a word that is a piece of the
thread's id, or of its token in the index, finds nothing; threads named with any id are
searched, each its own. On SQLite the index itself is asked for the thread's rows only: the
MATCH the store sends yields the thread's matching rows, not the database's (before 0021 it
yielded every thread's, and a search cost grew with them: `python -m bench.search_scale`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bounded_agents.store import SqlAgentStore
from bounded_agents.store.search import thread_key
from tests.factories import user

WORD = "invoice"


async def _thread_with(store: SqlAgentStore, matching: int, other: int = 0) -> str:
    tid = (await store.create_thread(actor_id="alice", agent="helper")).id
    texts = [f"the {WORD} number {n} was sent" for n in range(matching)]
    texts += [f"nothing to see, line {n}" for n in range(other)]
    await store.append_messages(tid, [user(t) for t in texts])
    return tid


async def test_a_threads_search_finds_its_own_rows_only_beside_other_threads_full_of_the_word(
    sql_store: SqlAgentStore,
) -> None:
    mine = await _thread_with(sql_store, matching=3, other=4)
    for _ in range(3):
        await _thread_with(sql_store, matching=40)

    found = await sql_store.search_history(mine, "invoices", limit=10)

    assert sorted(h.seq for h in found) == [1, 2, 3]


async def test_a_word_that_is_a_piece_of_the_threads_id_finds_nothing(
    sql_store: SqlAgentStore,
) -> None:
    tid = await _thread_with(sql_store, matching=2)
    pieces = [*tid.split("-"), thread_key(tid)]

    for piece in pieces:
        assert await sql_store.search_history(tid, piece, limit=5) == [], piece


async def test_named_threads_with_any_id_are_searched_each_its_own(
    sql_store: SqlAgentStore,
) -> None:
    # "user:42" begins "user:42:archive"; "sessão ü" has letters FTS5 folds; "--" has no
    # letter or digit: each is one token in the index, and finds its own rows only.
    ids = ["user:42", "user:42:archive", "sessão ü", "--"]
    for n, tid in enumerate(ids):
        await sql_store.create_named_thread(tid, actor_id="alice", agent="helper")
        await sql_store.append_messages(tid, [user(f"{WORD} for thread {n}")] * (n + 1))

    for n, tid in enumerate(ids):
        found = await sql_store.search_history(tid, WORD, limit=10)
        assert sorted(h.seq for h in found) == list(range(1, n + 2)), tid


async def test_on_sqlite_the_index_yields_the_threads_matches_not_the_databases(
    tmp_path: Path,
) -> None:
    """The MATCH the store sends, asked alone, yields the thread's 3 matching rows, where the
    words alone yield every thread's. (PostgreSQL's side is its planner's choice, by the
    table's size: `tests/migrations/test_0021_search_thread_key.py` holds the index it can
    choose, and bench/README.md the plans at 600,000 rows.)"""
    store = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{tmp_path}/keyed.db")
    await store.create_schema()
    sent: list[Any] = []

    def keep(_conn: Any, _cursor: Any, text: str, params: Any, *_args: Any) -> None:
        if "MATCH" in text and "bm25" in text:
            sent.append(params)

    try:
        mine = await _thread_with(store, matching=3, other=4)
        for _ in range(5):
            await _thread_with(store, matching=40)
        sa.event.listen(store.engine.sync_engine, "before_cursor_execute", keep)

        await store.search_history(mine, WORD, limit=5)

        values = sent[0].values() if isinstance(sent[0], dict) else sent[0]
        match = next(v for v in values if isinstance(v, str) and WORD in v)
        count = sa.text("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :q")
        async with store.engine.connect() as conn:
            yielded = (await conn.execute(count, {"q": match})).scalar_one()
            words_alone = (await conn.execute(count, {"q": f'"{WORD}"'})).scalar_one()
        assert words_alone == 3 + 5 * 40  # what the index yielded before 0021
        assert yielded == 3
    finally:
        await store.dispose()
