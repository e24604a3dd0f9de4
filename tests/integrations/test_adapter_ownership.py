"""A framework adapter object reads and writes only its own actor's, and its own agent's,
thread: checked on every call, not once per object. Found by attack: a long-lived object
(Pydantic AI's `BoundedMessageStore` keeps up to 1,024 threads, an Agents SDK session lives
across runs) checked the owner once; after its conversation was erased elsewhere and another
actor made one of the same id, it read that actor's messages and appended to his thread."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from bounded_agents.errors import ThreadNotFound
from bounded_agents.integrations import Projection
from bounded_agents.integrations.openai_agents import BoundedSession
from bounded_agents.integrations.pydantic_ai import BoundedMessageStore
from bounded_agents.store import SqlAgentStore


def _texts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(p.content)
        for m in messages
        for p in m.parts
        if isinstance(p, UserPromptPart | TextPart)
    ]


async def test_a_cached_pydantic_conversation_never_reads_or_writes_another_actors_thread(
    sql_store: SqlAgentStore,
) -> None:
    """Alice's long-lived store object checked the owner once. Her conversation is erased
    (by another object: another worker, the erasure route), then Bob starts a conversation of
    the same id. Alice's object must not read Bob's messages, nor append to his thread."""
    alice = BoundedMessageStore(sql_store, actor_id="alice")
    first = [
        ModelRequest(parts=[UserPromptPart("alice's question")]),
        ModelResponse(parts=[TextPart("alice's answer")]),
    ]
    await alice.save(first, conversation_id="support")
    assert "alice's question" in _texts(await alice.load("support"))

    await BoundedMessageStore(sql_store, actor_id="alice").clear("support")  # another worker

    bob = BoundedMessageStore(sql_store, actor_id="bob")
    secret = [
        ModelRequest(parts=[UserPromptPart("bob's card number 4111-1111")]),
        ModelResponse(parts=[TextPart("noted, bob")]),
    ]
    await bob.save(secret, conversation_id="support")

    try:
        leaked = _texts(await alice.load("support"))
    except ThreadNotFound:
        leaked = []
    assert not any("bob" in t for t in leaked), leaked


async def test_a_cached_pydantic_conversation_never_appends_to_another_actors_thread(
    sql_store: SqlAgentStore,
) -> None:
    alice = BoundedMessageStore(sql_store, actor_id="alice")
    first = [
        ModelRequest(parts=[UserPromptPart("alice's question")]),
        ModelResponse(parts=[TextPart("alice's answer")]),
    ]
    await alice.save(first, conversation_id="support")
    await BoundedMessageStore(sql_store, actor_id="alice").clear("support")  # another worker
    bob = BoundedMessageStore(sql_store, actor_id="bob")
    await bob.save(
        [
            ModelRequest(parts=[UserPromptPart("bob's question")]),
            ModelResponse(parts=[TextPart("bob's answer")]),
        ],
        conversation_id="support",
    )
    again = [
        ModelRequest(parts=[UserPromptPart("alice writes again")]),
        ModelResponse(parts=[TextPart("ok alice")]),
    ]
    try:
        await alice.save(again, conversation_id="support")
    except ThreadNotFound:
        pass
    assert not any("alice" in t for t in _texts(await bob.load("support")))


async def test_a_long_lived_agents_sdk_session_never_reads_another_actors_thread(
    sql_store: SqlAgentStore,
) -> None:
    """The same for an OpenAI Agents SDK session object kept across runs."""
    alice = BoundedSession("support", sql_store, actor_id="alice")
    await alice.add_items([{"role": "user", "content": "alice's question"}])
    assert await alice.get_items()

    await BoundedSession("support", sql_store, actor_id="alice").clear_session()
    bob = BoundedSession("support", sql_store, actor_id="bob")
    await bob.add_items([{"role": "user", "content": "bob's card number 4111-1111"}])

    try:
        leaked = await alice.get_items()
    except ThreadNotFound:
        leaked = []
    assert not any("bob" in str(item) for item in leaked), leaked
    try:
        await alice.add_items([{"role": "user", "content": "alice writes again"}])
    except ThreadNotFound:
        pass
    assert not any("alice" in str(item) for item in await bob.get_items())


@pytest.mark.parametrize("first", ["agents", "pydantic"])
async def test_two_adapters_on_the_same_session_id_keep_a_thread_each(
    sql_store: SqlAgentStore, first: str
) -> None:
    """An app keyed by the user's id ("user-42") uses the Agents SDK for one agent and
    Pydantic AI for another. Found by attack: both wrote into one thread, and Pydantic AI's
    `load` then failed on the SDK's items; then the second adapter was refused as not found.
    A thread id now names its adapter: each has its own thread, and reads its own items."""
    session = BoundedSession("user-42", sql_store)
    history = BoundedMessageStore(sql_store)
    run = [
        ModelRequest(parts=[UserPromptPart("pydantic question")]),
        ModelResponse(parts=[TextPart("pydantic answer")]),
    ]
    writes = [
        session.add_items([{"role": "user", "content": "sdk question"}]),
        history.save(run, conversation_id="user-42"),
    ]
    for write in writes if first == "agents" else writes[::-1]:
        await write

    assert await session.get_items() == [{"role": "user", "content": "sdk question"}]
    assert _texts(await history.load("user-42")) == ["pydantic question", "pydantic answer"]
    assert session.history.thread_id != history.thread("user-42").thread_id


async def test_two_actors_writing_one_session_id_at_once_each_keep_every_item_of_their_own(
    sql_store: SqlAgentStore,
) -> None:
    """Two actors' sessions of one id write at once, before either thread exists. Each has a
    thread of its own (the id names the actor): no write is refused, none lands in the other's.
    Before, the first to create the id owned it and the other's every write was refused."""
    sessions = {
        actor: BoundedSession("race", sql_store, actor_id=actor) for actor in ("alice", "bob")
    }
    writes = [
        sessions[actor].add_items([{"role": "user", "content": f"{actor} {n}"}])
        for n in range(5)
        for actor in sessions
    ]
    assert await asyncio.gather(*writes) == [None] * 10
    for actor, session in sessions.items():
        items = await session.get_items()
        assert sorted(str(i["content"]) for i in items) == sorted(f"{actor} {n}" for n in range(5))


async def test_one_actor_clearing_or_popping_a_session_id_never_touches_anothers(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: the owner check and the read, pop or clear after it were two
    statements, so another actor who started the same session id between them had his items
    read, popped or his thread cleared. The two actors' threads now have different ids."""
    alice = BoundedSession("support", sql_store, actor_id="alice")
    bob = BoundedSession("support", sql_store, actor_id="bob")
    await bob.add_items(
        [{"role": "user", "content": "bob 1"}, {"role": "user", "content": "bob 2"}]
    )
    await alice.add_items([{"role": "user", "content": "alice 1"}])

    assert await alice.pop_item() == {"role": "user", "content": "alice 1"}
    assert await alice.pop_item() is None
    await alice.clear_session()

    assert [i["content"] for i in await bob.get_items()] == ["bob 1", "bob 2"]


async def test_a_session_stored_before_ids_named_their_actor_is_still_its_owners_alone(
    sql_store: SqlAgentStore,
) -> None:
    """A session stored by the previous release is at its legacy id (the session id itself):
    its actor and adapter read it, write to it and clear it there; another actor naming the
    same session gets a thread of his own and never sees it; once cleared, the session
    starts again under its own id."""
    from bounded_agents.integrations.items import item_json, stored_message

    legacy = await sql_store.create_named_thread("support", actor_id="alice", agent="openai-agents")
    old = {"role": "user", "content": "alice's old question"}
    text = item_json(old, label="item 0")
    await sql_store.append_messages(legacy.id, [stored_message(Projection("user", "q"), text)])

    alice = BoundedSession("support", sql_store, actor_id="alice")
    bob = BoundedSession("support", sql_store, actor_id="bob")
    assert await alice.get_items() == [old]
    assert await bob.get_items() == []
    await alice.add_items([{"role": "user", "content": "alice again"}])
    assert alice.history.thread_id == "support"
    assert [i["content"] for i in await alice.get_items()] == [
        "alice's old question",
        "alice again",
    ]

    await alice.clear_session()
    await alice.add_items([{"role": "user", "content": "fresh"}])
    assert alice.history.thread_id != "support"
    assert await sql_store.get_thread_info("support") is None
    assert await alice.get_items() == [{"role": "user", "content": "fresh"}]
