"""The per-turn read through the driver (`bounded_agents.store.hotread`): exactly what the
SQLAlchemy path returns, for random thread shapes, on a dedicated connection and inside a shared
transaction; seen by the engine's statement listeners; and a dead dedicated connection costs a
retry, not a failed read."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import ThreadSummary, ThreadTurnPage, ThreadTurnQuery
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.hotread import HotReader
from bounded_agents.store.tx import open_write
from tests.conftest import emptied_store
from tests.store.test_bounded_reads import _queries, _thread, transcript
from tests.store.test_store import captured_sql


def _sqlalchemy_only(store: SqlAgentStore) -> SqlAgentStore:
    """The same store, its reads through SQLAlchemy Core only (the reference)."""
    twin = SqlAgentStore(store.engine)
    twin._hot = HotReader(store.engine, enabled=False)
    return twin


@pytest.mark.parametrize("seed", range(4))
async def test_the_driver_read_returns_what_sqlalchemy_returns(
    sql_store: SqlAgentStore, seed: int
) -> None:
    rng = random.Random(100 + seed)
    msgs = transcript(rng, rng.randint(0, 50))
    tid = await _thread(sql_store, msgs)
    if msgs and rng.random() < 0.7:
        await sql_store.save_summary(
            tid, ThreadSummary(text="s", covers_through_seq=rng.randint(0, len(msgs)))
        )
    reference = _sqlalchemy_only(sql_store)
    for query in _queries(rng, tid):
        expected = await reference.load_thread_for_turn(query)
        with captured_sql(sql_store) as statements:
            got = await sql_store.load_thread_for_turn(query)
        assert got == expected, query
        # the driver-level read is announced to the listeners (with the count of the seqs a
        # summarizing read skipped, when it skipped some: tests/store/test_bounded_reads.py)
        assert got is not None
        counted = query.after_summary and query.count_unread and got.skipped
        assert len(statements) == 1 + bool(counted), statements
        # inside a write transaction, it sees that transaction's own uncommitted append
        tx = await open_write(sql_store.engine, "test")
        try:
            appended = await sql_store.append_messages(
                tid, [Message(role="user", content="uncommitted")], tx=tx
            )
            inside = await sql_store.load_thread_for_turn(query, tx=tx)
            twin = await reference.load_thread_for_turn(query, tx=tx)
        finally:
            await tx.close(commit=False)
        assert inside == twin, query
        assert isinstance(inside, ThreadTurnPage)
        if query.message_limit != 0 and query.token_limit != 0:
            assert inside.messages and inside.messages[-1].seq == appended[0].seq
    assert await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id="nope")) is None


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url, pool_size=3, max_overflow=0, pool_timeout=5) as store:
        yield store


@pytest.mark.postgres
@pytest.mark.parametrize(
    "notice_seconds",
    [0.0, 0.3],
    ids=["read-races-the-end", "end-seen-while-idle"],
)
async def test_a_dead_dedicated_connection_is_replaced_and_the_read_retried(
    pg_store: SqlAgentStore, postgres_url: str, notice_seconds: float
) -> None:
    """Killed while idle, a connection fails its next read on the dead socket, or asyncpg has
    seen the end first and the reader drops it before use; either way a fresh one reads."""
    tid = await _thread(pg_store, transcript(random.Random(7), 20))
    query = ThreadTurnQuery(thread_id=tid, message_limit=5)
    before = await pg_store.load_thread_for_turn(query)
    hot = pg_store._hot
    assert hot._idle, "the read went through a dedicated connection"
    # Kill the dedicated connection's backend without letting asyncpg notice first: the next
    # read sends its statement on a dead socket.
    victim = hot._idle[-1]
    pid = victim.get_server_pid()
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    admin = await asyncpg.connect(dsn)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1::int)", pid)
    finally:
        await admin.close()
    await asyncio.sleep(notice_seconds)
    with captured_sql(pg_store) as statements:
        after = await pg_store.load_thread_for_turn(query)
    assert after == before
    assert len(statements) <= 2, "at most the one failed attempt, then the retry"
    assert victim not in hot._idle
    assert await pg_store.load_thread_for_turn(query) == before


class _LeftMidState:
    """A dedicated connection as asyncpg leaves one whose server said goodbye at the wrong
    moment: not closed, yet every operation raises `InternalClientError`."""

    def __init__(self) -> None:
        self.terminated = False

    def is_closed(self) -> bool:
        return False

    async def fetch(self, *_args: object) -> list[object]:
        raise asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        )

    def terminate(self) -> None:
        self.terminated = True


async def test_a_connection_left_mid_state_is_dropped_and_the_read_retried(
    pg_store: SqlAgentStore,
) -> None:
    """Seen once in 6 runs of the test above: asyncpg's `InternalClientError` is no
    `PostgresError`, and it escaped the reader as a bare exception."""
    tid = await _thread(pg_store, transcript(random.Random(8), 12))
    query = ThreadTurnQuery(thread_id=tid, message_limit=5)
    before = await pg_store.load_thread_for_turn(query)
    hot = pg_store._hot
    broken = _LeftMidState()
    hot._idle.append(broken)
    hot._open += 1
    assert await pg_store.load_thread_for_turn(query) == before
    assert broken.terminated and broken not in hot._idle
    assert hot._open <= 2
