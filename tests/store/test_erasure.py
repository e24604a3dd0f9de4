"""`ErasingStore` over every backend (memory, SQLite, PostgreSQL): a message or a thread erased,
the summaries covering the message with it and no other, an erased seq never handed out again;
and the SQL store's own traces (the prompt digest, its message cache) gone too."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from bounded_agents.core.messages import row_digest
from bounded_agents.core.ports import (
    ThreadSummary,
    ThreadTurnQuery,
    supports_erased_pruning,
    supports_erasure,
    supports_summaries,
)
from bounded_agents.errors import ThreadBusy, ThreadErased
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.clock import db_now
from bounded_agents.store.schema import erased_threads, messages, runs, threads
from tests.factories import assistant, user
from tests.store.conftest import ContractStore


async def _thread_of_six(store: ContractStore) -> str:
    thread = await store.create_thread(actor_id="alice", agent="assistant")
    await store.append_messages(
        thread.id, [m for i in range(3) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    )
    for boundary in (2, 4, 6):
        await store.save_summary(
            thread.id, ThreadSummary(text=f"through {boundary}", covers_through_seq=boundary)
        )
    return thread.id


async def test_erasing_a_message_removes_it_and_exactly_the_summaries_that_cover_it(
    store: ContractStore,
) -> None:
    assert supports_erasure(store) and supports_summaries(store)
    thread_id = await _thread_of_six(store)

    assert await store.delete_message(thread_id, 4) is True

    thread = await store.get_thread(thread_id)
    assert thread is not None
    assert [(m.seq, m.content) for m in thread.messages] == [
        (1, "q0"),
        (2, "a0"),
        (3, "q1"),
        (5, "q2"),
        (6, "a2"),
    ]
    latest = await store.latest_summary(thread_id)
    assert latest is not None and latest.covers_through_seq == 2
    assert [m.seq for m in await store.messages_after(thread_id, 2, 10)] == [3, 5, 6]
    assert await store.delete_message(thread_id, 4) is False
    assert await store.delete_message(thread_id, 99) is False
    assert await store.delete_message("no-such-thread", 1) is False


async def test_a_message_erased_by_digest_is_erased_only_while_it_is_the_row_read(
    store: ContractStore,
) -> None:
    """`delete_message(..., digest=)`: the row at that seq must still be the one the caller
    read; another (the thread erased and made again since, seqs from 1 again) is left alone."""
    assert supports_erasure(store)
    thread_id = await _thread_of_six(store)
    other = row_digest(4, "assistant", "a1", '[{"name":"x"}]')  # the same text, not the row
    assert await store.delete_message(thread_id, 4, digest=other) is False
    thread = await store.get_thread(thread_id)
    assert thread is not None and [m.seq for m in thread.messages] == [1, 2, 3, 4, 5, 6]
    latest = await store.latest_summary(thread_id)
    assert latest is not None and latest.covers_through_seq == 6  # no summary taken either
    read = row_digest(4, "assistant", "a1", None)
    assert await store.delete_message(thread_id, 4, digest=read) is True
    thread = await store.get_thread(thread_id)
    assert thread is not None and [m.seq for m in thread.messages] == [1, 2, 3, 5, 6]


async def test_an_erased_seq_is_never_handed_out_again(store: ContractStore) -> None:
    assert supports_erasure(store)
    thread_id = await _thread_of_six(store)
    assert await store.delete_message(thread_id, 6) is True
    stored = await store.append_messages(thread_id, [user("after")])
    assert stored[0].seq == 7


async def test_erasing_a_thread_removes_it_and_says_so_once(store: ContractStore) -> None:
    assert supports_erasure(store)
    thread_id = await _thread_of_six(store)
    other = await _thread_of_six(store)

    assert await store.delete_thread(thread_id) is True

    assert await store.get_thread(thread_id) is None
    assert await store.latest_summary(thread_id) is None
    assert await store.delete_thread(thread_id) is False
    kept = await store.get_thread(other)
    assert kept is not None and len(kept.messages) == 6


async def _refused(store: ContractStore, thread_id: str) -> bool:
    """Whether a keyed `/v1` retry's `create_named_thread(..., unless_erased=True)` is refused
    (an id not refused is made, or found, as a side effect)."""
    try:
        await store.create_named_thread(
            thread_id, actor_id="alice", agent="assistant", unless_erased=True
        )
    except ThreadErased:
        return True
    return False


async def test_a_thread_erased_whole_keeps_its_id_and_nothing_else(store: ContractStore) -> None:
    """What a keyed `/v1` retry is refused: an id erased whole, not a thread that lost a
    message, nor an id never made; an id made again and erased again stays refused."""
    thread_id = await _thread_of_six(store)
    other = await _thread_of_six(store)
    assert await store.delete_message(other, 1) is True
    assert not await _refused(store, thread_id) and not await _refused(store, other)

    assert await store.delete_thread(thread_id) is True

    assert await _refused(store, thread_id)
    assert await store.get_thread(thread_id) is None, "refused, nothing made"
    assert not await _refused(store, other)
    assert await store.delete_thread("no-such-thread") is False
    assert not await _refused(store, "no-such-thread"), "an unknown id is not recorded"
    again = await store.create_named_thread(thread_id, actor_id="alice", agent="assistant")
    assert again.id == thread_id  # a caller naming the id may make it again (adapters do)
    assert await store.delete_thread(thread_id) is True
    assert await _refused(store, thread_id)
    if isinstance(store, SqlAgentStore):
        async with store.engine.connect() as conn:
            rows = (await conn.execute(sa.select(erased_threads))).mappings().all()
        assert sorted((r["id"], r["actor_id"]) for r in rows) == [(thread_id, "alice")]
        assert set(erased_threads.c.keys()) == {"id", "actor_id", "erased_at"}, "no content"


async def _erased_ago(store: ContractStore, seconds_ago: dict[str, float]) -> None:
    """Erase each thread whole and date its kept id `seconds_ago` (the database's clock for
    the SQL store, as the sweep reads it)."""
    for thread_id, ago in seconds_ago.items():
        assert await store.delete_thread(thread_id) is True
        if isinstance(store, SqlAgentStore):
            async with store.engine.begin() as conn:
                await conn.execute(
                    erased_threads.update()
                    .where(erased_threads.c.id == thread_id)
                    .values(erased_at=db_now(-ago))
                )
        else:
            store._erased[thread_id] -= ago  # the memory store dates them by time.time()


async def test_erased_ids_past_their_retention_are_forgotten_oldest_first(
    store: ContractStore,
) -> None:
    """`prune_erased` ends the keeping of an erased thread's id (and its owner's): past the
    retention a keyed retry is no longer refused; within it, still refused; the oldest go first
    and `limit` bounds a call."""
    assert supports_erased_pruning(store)
    ages = {"fresh": 10.0, "old": 7_200.0, "older": 10_800.0, "oldest": 14_400.0}
    ids = {name: await _thread_of_six(store) for name in ages}
    await _erased_ago(store, {ids[name]: ago for name, ago in ages.items()})

    assert await store.prune_erased(3_600.0, 2) == 2
    assert not await _refused(store, ids["oldest"]) and not await _refused(store, ids["older"])
    assert await _refused(store, ids["old"]), "the third oldest waits for the next call"
    assert await store.prune_erased(3_600.0, 2) == 1
    assert not await _refused(store, ids["old"])
    assert await _refused(store, ids["fresh"]), "within its retention: still refused"
    assert await store.prune_erased(3_600.0, 2) == 0
    assert await store.prune_erased(0.0, 2) == 1, "0: every kept id goes"
    assert not await _refused(store, ids["fresh"])


async def test_an_id_erased_again_is_kept_from_its_latest_erasure(store: ContractStore) -> None:
    """A caller that names its threads (an Agents SDK session) may make an erased id again and
    erase it again: the retention counts from the second erasure, not the first, or the sweep
    would forget a conversation deleted a minute ago and let a keyed retry make it again."""
    thread_id = await _thread_of_six(store)
    await _erased_ago(store, {thread_id: 7_200.0})
    again = await store.create_named_thread(thread_id, actor_id="bob", agent="assistant")
    assert again.id == thread_id
    assert await store.delete_thread(thread_id) is True

    assert await store.prune_erased(3_600.0, 10) == 0, "erased a moment ago: kept"
    assert await _refused(store, thread_id)
    if isinstance(store, SqlAgentStore):
        async with store.engine.connect() as conn:
            owner = await conn.scalar(sa.select(erased_threads.c.actor_id))
        assert owner == "bob", "the owner of the thread erased last"


async def test_a_sweep_with_no_erased_id_to_forget_writes_nothing(
    sql_store: SqlAgentStore,
) -> None:
    """The common sweep: one read of the `erased_at` index, no write transaction."""
    await _erased_ago(sql_store, {await _thread_of_six(sql_store): 10.0})
    statements: list[str] = []
    commits: list[object] = []

    def on_statement(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    def on_commit(conn: object) -> None:
        commits.append(conn)

    engine = sql_store.engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", on_statement)
    sa.event.listen(engine, "commit", on_commit)
    try:
        assert await sql_store.prune_erased(3_600.0, 100) == 0
    finally:
        sa.event.remove(engine, "before_cursor_execute", on_statement)
        sa.event.remove(engine, "commit", on_commit)
    reads = [s for s in statements if s.strip().upper() != "SELECT 1"]  # the pool's ping
    assert len(reads) == 1 and reads[0].lstrip().upper().startswith("SELECT"), reads
    assert commits == []


async def test_the_sql_store_forgets_the_prompt_digest_and_its_cached_rows_of_the_thread(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="assistant")
    await sql_store.append_messages(thread.id, [user("secret")])
    await sql_store.append_answer(thread.id, [assistant("ok")], "digest", reported_tokens=7)
    await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=thread.id, message_limit=5))
    assert len(sql_store.message_cache) == 2

    assert await sql_store.delete_message(thread.id, 1) is True

    assert len(sql_store.message_cache) == 0
    assert await sql_store.last_prompt(thread.id) is None
    assert await sql_store.reported_tokens(thread.id) is None


@pytest.mark.parametrize("erase", ["message", "thread"])
async def test_the_sql_store_refuses_to_erase_while_a_live_run_holds_the_thread(
    sql_store: SqlAgentStore, erase: str
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="assistant")
    await sql_store.append_messages(thread.id, [user("secret")])
    async with sql_store.engine.begin() as conn:
        await conn.execute(
            runs.insert().values(
                id="r1",
                thread_id=thread.id,
                actor_id="alice",
                agent="assistant",
                status="running",
                request="{}",
                lease_expires_at=db_now(600),
            )
        )
    with pytest.raises(ThreadBusy):
        if erase == "message":
            await sql_store.delete_message(thread.id, 1)
        else:
            await sql_store.delete_thread(thread.id)
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and [m.content for m in loaded.messages] == ["secret"]


async def test_a_named_thread_made_unless_erased_loses_no_race_to_an_erasure(
    sql_store: SqlAgentStore,
) -> None:
    """A keyed `/v1` retry makes its thread while an erasure of that id is still open: the
    retry's insert waits for the erasure's lock and, once the erasure commits, must see its
    `erased_threads` row and make nothing. A check read before the insert (what the first
    version of this did) saw no row yet and made the erased thread again."""
    store = sql_store
    thread = await store.create_named_thread("keyed-1", actor_id="alice", agent="assistant")
    await store.append_messages(thread.id, [user("q"), assistant("a")])
    postgres = store.engine.dialect.name == "postgresql"
    async with store.engine.connect() as erasing:
        await erasing.begin()
        if postgres:
            await erasing.execute(
                sa.select(threads.c.id).where(threads.c.id == thread.id).with_for_update()
            )
        else:
            await erasing.execute(
                threads.update().where(threads.c.id == thread.id).values(title="x")
            )
        await erasing.execute(erased_threads.insert().values(id=thread.id, actor_id="alice"))
        await erasing.execute(messages.delete().where(messages.c.thread_id == thread.id))
        await erasing.execute(threads.delete().where(threads.c.id == thread.id))
        retry = asyncio.create_task(
            store.create_named_thread(
                thread.id, actor_id="alice", agent="assistant", unless_erased=True
            )
        )
        if postgres:
            await _until_a_backend_waits_on_a_lock(store)
        else:
            await asyncio.sleep(0.3)  # SQLite: the retry's BEGIN waits for the write lock
        assert not retry.done()
        await erasing.commit()
    with pytest.raises(ThreadErased):
        await asyncio.wait_for(retry, 10)
    assert await store.get_thread(thread.id) is None, "the erased thread was made again"
    again = await store.create_named_thread(thread.id, actor_id="alice", agent="assistant")
    assert again.id == thread.id  # without the flag (adapters naming their threads): made


async def _until_a_backend_waits_on_a_lock(store: SqlAgentStore) -> None:
    """On one server the retry's backend waits on a lock; on Citus it is the worker's backend
    running the shard's insert, which the coordinator's `citus_lock_waits` shows."""
    waiting = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    citus = sa.text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")
    async with store.engine.connect() as conn:
        if await conn.scalar(citus):
            waiting = sa.text("SELECT count(*) FROM citus_lock_waits")
    for _ in range(200):
        async with store.engine.connect() as conn:
            if await conn.scalar(waiting):
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the retry never waited for the erasure's lock")
