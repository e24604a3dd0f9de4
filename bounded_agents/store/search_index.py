"""Which threads feed the history search index (migration 0016, issue 37).

A thread's messages are indexed only while `threads.searchable` is on: the append copies the
flag into the row (`messages.indexed`) from the thread row it bumps anyway, and the index's
triggers fire for indexed rows only. So a turn of an agent that never searches costs the index
nothing (on SQLite the FTS5 tokenizer over every message and its tool text; on PostgreSQL
`to_tsvector`).

Turning search on for an agent indexes its threads' old rows first: per thread, a batch of at
most `BATCH_ROWS` seqs at a time, each its own transaction (every statement names the thread:
one shard answers it under Citus), while the thread still stores new rows unindexed; then, in
one transaction, the thread is flipped and the rows stored meanwhile are indexed. Interrupted
anywhere, the thread is still off and the next start-up goes on from where the rows say. Turning
search off only stops indexing new rows: what the index holds stays (erasure still removes it).
"""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.store.engine import write_transaction
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.schema import messages, threads

BATCH_ROWS = 2_000
"""Messages indexed per transaction by a backfill, at most."""

_TID: sa.BindParameter[str] = sa.bindparam("tid")
_THREADS_OFF = sa.select(threads.c.id, threads.c.last_seq).where(
    threads.c.agent.in_(sa.bindparam("agents", expanding=True)), ~threads.c.searchable
)
_INDEX_RANGE = (
    messages.update()
    .where(
        messages.c.thread_id == _TID,
        messages.c.seq > sa.bindparam("after"),
        messages.c.seq <= sa.bindparam("through"),
        ~messages.c.indexed,
    )
    .values(indexed=True)
)
_INDEX_AFTER = (
    messages.update()
    .where(
        messages.c.thread_id == _TID, messages.c.seq > sa.bindparam("after"), ~messages.c.indexed
    )
    .values(indexed=True)
)
"""The rows stored since the thread was read (a few at most), indexed with the flip."""
_FLIP_ON = threads.update().where(threads.c.id == _TID).values(searchable=True)
_TURN_OFF = (
    threads.update()
    .where(threads.c.agent.in_(sa.bindparam("agents", expanding=True)), threads.c.searchable)
    .values(searchable=False)
)


async def index_agents(
    engine: AsyncEngine,
    searching: Collection[str],
    not_searching: Collection[str],
    *,
    batch: int = BATCH_ROWS,
) -> int:
    """See `SearchIndexer.index_agents`: the threads of `not_searching` turned off, those of
    `searching` backfilled and turned on. Returns the messages indexed."""
    async with wrap_db_errors("index_agents"):
        if not_searching:
            async with write_transaction(engine) as conn:
                await conn.execute(_TURN_OFF, {"agents": list(not_searching)})
        if not searching:
            return 0
        async with engine.connect() as conn:
            off = (await conn.execute(_THREADS_OFF, {"agents": list(searching)})).all()
        indexed = 0
        for thread_id, last_seq in off:
            indexed += await _backfill(engine, thread_id, last_seq, batch)
        return indexed


async def _backfill(engine: AsyncEngine, thread_id: str, last_seq: int, batch: int) -> int:
    """Index the thread's rows through `last_seq`, `batch` seqs per transaction, then turn the
    thread on and index what was stored since, together."""
    indexed = 0
    for after in range(0, last_seq, batch):
        async with write_transaction(engine) as conn:
            indexed += await _index(conn, thread_id, after, after + batch)
    async with write_transaction(engine) as conn:
        # The flip first: it takes the thread row's lock, so an append racing with it either
        # committed before (its row is indexed below) or reads the flag on.
        await conn.execute(_FLIP_ON, {"tid": thread_id})
        indexed += await _index(conn, thread_id, last_seq, None)
    return indexed


async def _index(conn: AsyncConnection, thread_id: str, after: int, through: int | None) -> int:
    """Index the thread's unindexed rows after `after` (through `through`, or all of them)."""
    if through is None:
        found = await conn.execute(_INDEX_AFTER, {"tid": thread_id, "after": after})
    else:
        params = {"tid": thread_id, "after": after, "through": through}
        found = await conn.execute(_INDEX_RANGE, params)
    return found.rowcount


__all__ = ["BATCH_ROWS", "index_agents"]
