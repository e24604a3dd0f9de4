"""What a thread row cannot hold is refused alike on every store, as a caller's mistake
(`InvalidContent`, 422) before any write: an actor id, agent name or title longer than its
column, a named thread's id longer than 36 characters, or any of them holding a NUL or a lone
surrogate. Found by attack through the Python API: SQLite stored a 1,000-character actor id
that PostgreSQL refused as a database error (`StoreError`, read as an outage, 503), and a lone
surrogate escaped SQLite's driver as a raw `UnicodeEncodeError`."""

from __future__ import annotations

from typing import Any

import pytest

from bounded_agents import AgentModule, agent
from bounded_agents.errors import InvalidContent, ThreadNotFound
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import user
from tests.store.conftest import ContractStore

BAD = {
    "long": ("x" * 201, "longer than 200"),
    "nul": ("a\x00b", "NUL"),
    "surrogate": ("a\ud800b", "surrogate"),
}


@pytest.mark.parametrize("bad", list(BAD))
async def test_an_actor_id_or_agent_a_thread_cannot_hold_is_refused_alike(
    store: ContractStore, bad: str
) -> None:
    value, reason = BAD[bad]
    with pytest.raises(InvalidContent, match=f"actor id .*{reason}"):
        await store.create_thread(actor_id=value, agent="helper")
    with pytest.raises(InvalidContent, match=f"agent .*{reason}"):
        await store.create_named_thread("t-1", actor_id="alice", agent=value)


async def test_a_title_or_named_id_a_thread_cannot_hold_is_refused_alike(
    store: ContractStore,
) -> None:
    with pytest.raises(InvalidContent, match=r"title .*longer than 500"):
        await store.create_thread(actor_id="alice", agent="helper", title="t" * 501)
    with pytest.raises(InvalidContent, match=r"thread id .*longer than 36"):
        await store.create_named_thread("n" * 37, actor_id="alice", agent="helper")
    thread = await store.create_thread(actor_id="alice", agent="helper", title="t" * 500)
    assert thread.title == "t" * 500  # the limit itself is stored


async def test_reading_a_thread_id_no_store_can_hold_finds_none(sql_store: SqlAgentStore) -> None:
    for thread_id in ("\udc00", "a\x00", "x" * 5000):
        assert await sql_store.get_thread(thread_id) is None
        assert await sql_store.search_history(thread_id, "hi", limit=5) == []


@agent(name="helper", history={"max_messages": 4})
class _Helper:
    pass


def _module(store: ContractStore) -> AgentModule:
    return AgentModule.for_root(
        model=ScriptedProvider(default=reply("ok")),
        store=store,
        agents=[_Helper],
        settings=Settings(migrate_on_start=False),
    )


@pytest.mark.parametrize("content", ["lone \udc80 surrogate", "nul \x00 PRIVATEWORD"])
async def test_a_turn_with_unstorable_text_is_refused_before_any_run(
    sql_store: SqlAgentStore, content: str
) -> None:
    """A lone surrogate escaped as a raw pydantic serialization error; a NUL began a run that
    failed, and kept the refused text in the run's request, out of reach of message erasure."""
    import sqlalchemy as sa

    module = _module(sql_store)
    thread = await module.create_thread("helper", actor_id="a")
    with pytest.raises(InvalidContent):
        await module.run_turn(agent="helper", thread_id=thread.id, actor_id="a", content=content)
    async with sql_store.engine.connect() as conn:
        runs = (await conn.execute(sa.text("SELECT count(*) FROM runs"))).scalar_one()
    assert runs == 0


async def test_a_turn_on_a_thread_id_no_store_can_hold_is_thread_not_found(
    sql_store: SqlAgentStore,
) -> None:
    module = _module(sql_store)
    for thread_id in ("\ud800", "a\x00"):
        with pytest.raises(ThreadNotFound):
            await module.run_turn(agent="helper", thread_id=thread_id, actor_id="a", content="hi")


async def test_any_other_read_by_such_an_id_is_a_caller_error_alike(
    sql_store: SqlAgentStore,
) -> None:
    """Reads without their own check (`messages_after` here) answer what the database refused
    as the caller's data on both: SQLite's driver raised a raw `UnicodeEncodeError`, and
    PostgreSQL's refusal (SQLSTATE class 22, data exception) was a `StoreError`, an outage."""
    for thread_id in (
        ("\udc00", "a\x00") if sql_store.engine.dialect.name != "sqlite" else ("\udc00",)
    ):
        with pytest.raises(InvalidContent):
            await sql_store.messages_after(thread_id, 0, 5)


async def test_a_thread_sqlite_stored_with_a_longer_id_before_stays_readable(tmp_path: Any) -> None:
    """SQLite stored named ids past 36 characters before they were refused at creation; reads
    by such an id must still find the thread (found by review: it answered not found)."""
    import sqlalchemy as sa

    store = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}")
    try:
        await store.create_schema()
        long_id = "customer-0001-support-conversation-2026-12"
        async with store.engine.begin() as conn:
            await conn.execute(
                sa.text("INSERT INTO threads (id, actor_id, agent) VALUES (:i, 'alice', 'helper')"),
                {"i": long_id},
            )
        await store.append_messages(long_id, [user("the order is ORD-41234")])
        thread = await store.get_thread(long_id)
        assert thread is not None and [m.content for m in thread.messages] == [
            "the order is ORD-41234"
        ]
        assert await store.get_thread_info(long_id) is not None
        assert [h.seq for h in await store.search_history(long_id, "order", limit=5)] == [1]
    finally:
        await store.dispose()
