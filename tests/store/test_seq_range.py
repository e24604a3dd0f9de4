"""A position past what a store can hold names no message, on every store: PostgreSQL keeps
`seq` in a 32-bit column and refused 2**31 as a database error (a `StoreError`, read as an
outage), where SQLite and memory answered "no such message". Found by attack through the
Python API, which the HTTP routes' own bound (`MAX_SEQ`) does not cover."""

from __future__ import annotations

import pytest

from bounded_agents import AgentModule, agent
from bounded_agents.core.messages import MAX_SEQ
from bounded_agents.core.ports import (
    supports_erasure,
    supports_history_search,
    supports_summary_archive,
)
from bounded_agents.errors import MessageNotFound
from bounded_agents.settings import Settings
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import user
from tests.store.conftest import ContractStore

PAST = (MAX_SEQ + 1, 2**40, 2**70)


async def _thread(store: ContractStore) -> str:
    thread = await store.create_thread(actor_id="alice", agent="helper")
    await store.append_messages(thread.id, [user("one"), user("two")])
    return thread.id


async def test_deleting_a_position_past_the_range_erases_nothing(store: ContractStore) -> None:
    assert supports_erasure(store)
    tid = await _thread(store)
    for seq in (*PAST, 0, -1, -(2**40)):
        assert await store.delete_message(tid, seq) is False
    assert len((await store.get_thread(tid) or pytest.fail()).messages) == 2


async def test_reading_positions_past_the_range_finds_none_and_keeps_the_others(
    store: ContractStore,
) -> None:
    tid = await _thread(store)
    assert await store.messages_after(tid, 2**40, 10) == []
    assert [m.seq for m in await store.messages_after(tid, -(2**40), 10)] == [1, 2]
    assert [m.seq for m in await store.list_messages(tid, limit=10, before=2**40)] == [1, 2]
    assert await store.list_messages(tid, limit=10, before=-(2**40)) == []
    if supports_summary_archive(store):
        await store.archive_summary_part(tid, 1, 2, "the part")
        assert len(await store.archived_parts(tid, before_seq=2**40)) == 1
        assert await store.archived_parts(tid, before_seq=-(2**40)) == []
    if supports_history_search(store):
        found = await store.messages_at(tid, [2, *PAST, -(2**40)])
        assert [m.seq for m in found] == [2]


@agent(name="helper", history={"max_messages": 4})
class _Helper:
    pass


async def test_erasing_a_message_past_the_range_is_message_not_found(
    store: ContractStore,
) -> None:
    module = AgentModule.for_root(
        model=ScriptedProvider(default=reply("ok")),
        store=store,
        agents=[_Helper],
        settings=Settings(migrate_on_start=False),
    )
    thread = await module.create_thread("helper", actor_id="a")
    await module.run_turn(agent="helper", thread_id=thread.id, actor_id="a", content="hi")
    with pytest.raises(MessageNotFound):
        await module.erase_message(thread.id, MAX_SEQ + 1, actor_id="a")
