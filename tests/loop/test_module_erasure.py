"""Erasure without HTTP: `AgentModule.erase_thread` and `AgentModule.erase_message`, the methods
the routes call, on SQLite and PostgreSQL. A library user (or a framework adapter) erases with
the same guarantees as `DELETE /threads/...`: no byte of the message left in any table, the
owner checked, a missing seq refused, and nothing touched when the call is refused."""

from __future__ import annotations

import uuid

import pytest

from bounded_agents import AgentModule, agent
from bounded_agents.core.ports import Thread
from bounded_agents.errors import MessageNotFound, ThreadNotFound
from bounded_agents.store.sql import SqlAgentStore
from tests.factories import summary_rows
from tests.http.erasure import SUMMARIZING, RecordingEcho, count_rows, marker_hits


@agent(name="helper", system_prompt="You help.")
class Helper:
    pass


def _module(store: object) -> AgentModule:
    return AgentModule.for_root(
        store=store,  # type: ignore[arg-type]
        model=RecordingEcho(),  # never quotes the user: the marker is in one message only
        agents=[Helper],
        history=SUMMARIZING,
    )


async def _folded(module: AgentModule, marker: str) -> str:
    """A thread of alice whose first message holds `marker`, turned until a summary holds it."""
    thread = await module.create_thread("helper", actor_id="alice")
    for text in [f"my secret is {marker}", "the boat is red", "a", "b", "c", "d", "e"]:
        await module.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content=text)
    summaries = await summary_rows(module.store, thread.id)  # type: ignore[arg-type]
    assert summaries and marker in summaries[-1][1], summaries
    return thread.id


async def test_erase_message_leaves_no_byte_of_it_in_any_table_and_only_it_goes(
    sql_store: SqlAgentStore,
) -> None:
    module = _module(sql_store)
    marker = f"MARK{uuid.uuid4().hex}"
    thread_id = await _folded(module, marker)
    before = await count_rows(sql_store, "messages", thread_id)
    # the test can fail: the message, its summary and its journal hold the marker before
    assert {"messages.content", "thread_summaries.text", "run_steps.payload"} <= set(
        await marker_hits(sql_store, marker)
    )

    await module.erase_message(thread_id, 1, actor_id="alice")

    assert await marker_hits(sql_store, marker) == []
    assert await count_rows(sql_store, "messages", thread_id) == before - 1


async def test_erase_thread_leaves_no_row_of_it_but_its_ledger_rows(
    sql_store: SqlAgentStore,
) -> None:
    module = _module(sql_store)
    marker = f"MARK{uuid.uuid4().hex}"
    thread_id = await _folded(module, marker)
    ledger = await count_rows(sql_store, "ledger", thread_id)
    assert ledger > 0

    await module.erase_thread(thread_id, actor_id="alice")

    assert await marker_hits(sql_store, marker) == []
    assert await sql_store.get_thread(thread_id) is None
    for table in ("messages", "thread_summaries", "runs"):
        assert await count_rows(sql_store, table, thread_id) == 0, table
    assert await count_rows(sql_store, "ledger", thread_id) == ledger


@pytest.mark.parametrize("what", ["thread", "message"])
async def test_another_actors_thread_is_thread_not_found_and_nothing_is_erased(
    sql_store: SqlAgentStore, what: str
) -> None:
    module = _module(sql_store)
    marker = f"MARK{uuid.uuid4().hex}"
    thread_id = await _folded(module, marker)
    before = await marker_hits(sql_store, marker)

    with pytest.raises(ThreadNotFound):
        if what == "thread":
            await module.erase_thread(thread_id, actor_id="mallory")
        else:
            await module.erase_message(thread_id, 1, actor_id="mallory")

    assert await marker_hits(sql_store, marker) == before


async def test_an_unknown_thread_is_thread_not_found(sql_store: SqlAgentStore) -> None:
    module = _module(sql_store)
    with pytest.raises(ThreadNotFound):
        await module.erase_thread(str(uuid.uuid4()), actor_id="alice")


async def test_a_seq_with_no_message_is_message_not_found_and_the_thread_is_kept(
    sql_store: SqlAgentStore,
) -> None:
    module = _module(sql_store)
    thread = await module.create_thread("helper", actor_id="alice")
    await module.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content="hi")
    await module.erase_message(thread.id, 1, actor_id="alice")

    with pytest.raises(MessageNotFound) as raised:  # erased already
        await module.erase_message(thread.id, 1, actor_id="alice")
    with pytest.raises(MessageNotFound):  # never stored
        await module.erase_message(thread.id, 99, actor_id="alice")

    assert raised.value.seq == 1
    assert await count_rows(sql_store, "messages", thread.id) == 1  # the answer stays


async def test_the_thread_a_caller_already_checked_is_not_read_again(
    sql_store: SqlAgentStore,
) -> None:
    """What the routes rely on: their ownership check loaded the thread, the method trusts it
    (same id and actor) instead of reading it a second time."""
    module = _module(sql_store)
    thread = await module.create_thread("helper", actor_id="alice")
    await module.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content="hi")
    reads: list[str] = []
    owned = module.loop.owned_thread

    async def counted(thread_id: str, actor_id: str, agent: str | None = None) -> Thread:
        reads.append(thread_id)
        return await owned(thread_id, actor_id, agent)

    module.loop.owned_thread = counted  # type: ignore[method-assign]
    await module.erase_message(thread.id, 1, actor_id="alice", thread=thread)
    assert reads == []
    await module.erase_message(thread.id, 2, actor_id="alice")
    assert reads == [thread.id]
