"""The history search index kept only for agents that search (issue 37, migration 0016), on
SQLite and PostgreSQL: a turn of an agent declared without `search` leaves the index as it was
(no row indexed: on SQLite no FTS5 row, on PostgreSQL no tsvector computed); an agent that turns
search on later finds its thread's old messages (a bounded backfill at start-up), and its new
ones; erasing an unindexed message leaves the index sound."""

from __future__ import annotations

import sqlalchemy as sa

from bounded_agents import AgentModule, agent
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.search_index import index_agents
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user

FACT = "Please note: the discount code is SPRING-7731."


@agent(name="helper", history={"max_messages": 4})
class Quiet:
    pass


@agent(name="helper", history={"max_messages": 4}, search=True)
class Searching:
    pass


async def _module(store: SqlAgentStore, cls: type, replies: int = 1) -> AgentModule:
    """A module as its lifespan leaves it: the store told which agents search."""
    module = AgentModule.for_root(
        model=ScriptedProvider([reply("ok")] * replies),
        store=store,
        agents=[cls],
        settings=Settings(migrate_on_start=False),
    )
    await module.persistence.index_search(module.loop.agents)
    return module


async def _index_entries(store: SqlAgentStore, thread_id: str) -> int:
    """The thread's messages the index holds: FTS5 rows (SQLite), tsvectors (PostgreSQL)."""
    if store.engine.dialect.name == "sqlite":
        stmt = (
            "SELECT count(*) FROM messages_fts_docsize d JOIN messages m "
            "ON m.search_id = d.id WHERE m.thread_id = :tid"
        )
    else:
        stmt = "SELECT count(*) FROM messages WHERE thread_id = :tid AND search_vector IS NOT NULL"
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.text(stmt), {"tid": thread_id})).scalar_one())


async def _all_index_entries(store: SqlAgentStore) -> int:
    if store.engine.dialect.name == "sqlite":
        stmt = "SELECT count(*) FROM messages_fts_docsize"
    else:
        stmt = "SELECT count(*) FROM messages WHERE search_vector IS NOT NULL"
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.text(stmt))).scalar_one())


async def test_a_turn_of_an_agent_without_search_does_not_touch_the_index(
    sql_store: SqlAgentStore,
) -> None:
    module = await _module(sql_store, Quiet, replies=2)
    other = await sql_store.create_thread(actor_id="bob", agent="seeker")  # not this module's
    await sql_store.append_messages(other.id, [user("indexed as before")])
    before = await _all_index_entries(sql_store)
    thread = await module.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user(FACT), assistant("Noted.")])

    await module.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content="hi")

    assert await _all_index_entries(sql_store) == before
    assert await _index_entries(sql_store, thread.id) == 0
    assert await _index_entries(sql_store, other.id) == 1, "an unknown agent keeps its index"
    assert await sql_store.search_history(thread.id, "discount", limit=5) == []


async def test_turning_search_on_later_finds_the_old_messages(sql_store: SqlAgentStore) -> None:
    quiet = await _module(sql_store, Quiet)
    thread = await quiet.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user(FACT), assistant("Noted.")])
    await quiet.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content="hi")
    assert await _index_entries(sql_store, thread.id) == 0

    searching = await _module(sql_store, Searching)  # the agent turns search on: start-up

    hits = await sql_store.search_history(thread.id, "discount code", limit=5)
    assert [(h.seq, h.content) for h in hits] == [(1, FACT)]
    assert await _index_entries(sql_store, thread.id) == 4
    await searching.run_turn(
        agent="helper", thread_id=thread.id, actor_id="alice", content="zebra crossing"
    )
    assert [h.seq for h in await sql_store.search_history(thread.id, "zebra", limit=5)] == [5]


async def test_the_backfill_goes_in_bounded_batches_and_misses_nothing(
    sql_store: SqlAgentStore,
) -> None:
    await _module(sql_store, Quiet)
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user(f"fact number {i}") for i in range(7)])
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    sa.event.listen(sql_store.engine.sync_engine, "commit", count)
    try:
        indexed = await index_agents(sql_store.engine, ["helper"], [], batch=3)
    finally:
        sa.event.remove(sql_store.engine.sync_engine, "commit", count)
    assert indexed == 7
    # seqs 1-3, 4-6, 7 in a transaction each, then the flip with what came since: 4 commits
    assert len(commits) == 4, commits
    assert len(await sql_store.search_history(thread.id, "fact", limit=10)) == 7
    assert await index_agents(sql_store.engine, ["helper"], [], batch=3) == 0, "done once"


async def test_erasing_an_unindexed_message_leaves_the_index_sound(
    sql_store: SqlAgentStore,
) -> None:
    module = await _module(sql_store, Quiet)
    thread = await module.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user(FACT), assistant("Noted.")])
    await module.erase_thread(thread.id, actor_id="alice")
    if sql_store.engine.dialect.name == "sqlite":
        async with sql_store.engine.begin() as conn:  # raises when the index and table differ
            await conn.execute(
                sa.text(
                    "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"
                )
            )
    assert await _all_index_entries(sql_store) == 0
