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
async def test_a_second_adapter_on_the_same_id_is_refused_and_the_first_keeps_its_thread(
    sql_store: SqlAgentStore, first: str
) -> None:
    """An app keyed by the user's id ("user-42") uses the Agents SDK for one agent and
    Pydantic AI for another. Found by attack: both wrote into one thread, and Pydantic AI's
    `load` then failed on the SDK's items. The thread is its first adapter's (its agent): the
    other's reads and writes are refused as not found, and the first reads its own items."""
    session = BoundedSession("user-42", sql_store)
    history = BoundedMessageStore(sql_store)
    run = [
        ModelRequest(parts=[UserPromptPart("pydantic question")]),
        ModelResponse(parts=[TextPart("pydantic answer")]),
    ]
    if first == "agents":
        await session.add_items([{"role": "user", "content": "sdk question"}])
        with pytest.raises(ThreadNotFound):
            await history.save(run, conversation_id="user-42")
        with pytest.raises(ThreadNotFound):
            await history.load("user-42")
        assert await session.get_items() == [{"role": "user", "content": "sdk question"}]
    else:
        await history.save(run, conversation_id="user-42")
        with pytest.raises(ThreadNotFound):
            await session.add_items([{"role": "user", "content": "sdk question"}])
        with pytest.raises(ThreadNotFound):
            await session.get_items()
        assert _texts(await history.load("user-42")) == ["pydantic question", "pydantic answer"]


async def test_two_actors_starting_one_session_id_at_once_leave_it_to_one(
    sql_store: SqlAgentStore,
) -> None:
    """Attack on the per-call check: two actors' sessions of one id write at once, before the
    thread exists. The store's insert decides the race; the loser's writes are all refused
    (`ThreadNotFound`) and none of its items lands in the winner's thread."""
    sessions = {
        actor: BoundedSession("race", sql_store, actor_id=actor) for actor in ("alice", "bob")
    }
    writes = [
        (actor, sessions[actor].add_items([{"role": "user", "content": f"{actor} {n}"}]))
        for n in range(5)
        for actor in sessions
    ]
    outcomes = await asyncio.gather(*(w for _, w in writes), return_exceptions=True)

    refused = {actor for (actor, _), o in zip(writes, outcomes, strict=True) if o is not None}
    assert all(isinstance(o, ThreadNotFound) for o in outcomes if o is not None), outcomes
    assert len(refused) == 1, refused  # one actor lost every write, the other none
    [winner] = set(sessions) - refused
    items = await sessions[winner].get_items()
    assert sorted(str(i["content"]) for i in items) == sorted(f"{winner} {n}" for n in range(5))
