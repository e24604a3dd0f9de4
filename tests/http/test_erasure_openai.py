"""The Conversations API's deletes through the official `openai` SDK, against the app served by
uvicorn, on SQLite and PostgreSQL: `conversations.delete` and `conversations.items.delete`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import openai
import pytest
from openai import AsyncOpenAI

from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ModuleFactory
from tests.http.erasure import RecordingEcho, marker_hits
from tests.http.test_openai_sdk import async_client, serve


@pytest.fixture
async def base_url(stack: AsyncExitStack, make_module: ModuleFactory) -> str:
    return await serve(stack, make_module(model=RecordingEcho(), history={"max_messages": 4}))


@pytest.fixture
async def alice(base_url: str) -> AsyncIterator[AsyncOpenAI]:
    async with async_client(base_url) as client:
        yield client


@pytest.fixture
async def bob(base_url: str) -> AsyncIterator[AsyncOpenAI]:
    async with async_client(base_url, key="key-b") as client:
        yield client


async def _conversation_with(alice: AsyncOpenAI, *inputs: str) -> str:
    conversation = await alice.conversations.create(metadata={"agent": "helper"})
    for text in inputs:
        await alice.responses.create(conversation=conversation.id, input=text)
    return conversation.id


async def test_conversations_delete_answers_the_deleted_resource_and_erases_the_thread(
    alice: AsyncOpenAI, bob: AsyncOpenAI, sql_store: SqlAgentStore
) -> None:
    marker = f"MARK{uuid.uuid4().hex}"
    conversation = await _conversation_with(alice, f"remember {marker}", "and this")
    with pytest.raises(openai.NotFoundError):
        await bob.conversations.delete(conversation)
    assert (await alice.conversations.retrieve(conversation)).id == conversation

    deleted = await alice.conversations.delete(conversation)

    assert (deleted.id, deleted.object, deleted.deleted) == (
        conversation,
        "conversation.deleted",
        True,
    )
    with pytest.raises(openai.NotFoundError):
        await alice.conversations.retrieve(conversation)
    with pytest.raises(openai.NotFoundError):
        await alice.conversations.delete(conversation)
    assert await marker_hits(sql_store, marker) == []


async def test_items_delete_erases_the_item_s_message_and_answers_the_conversation(
    alice: AsyncOpenAI, bob: AsyncOpenAI, sql_store: SqlAgentStore
) -> None:
    marker = f"MARK{uuid.uuid4().hex}"
    conversation = await _conversation_with(alice, f"remember {marker}", "and this")
    items = [i async for i in alice.conversations.items.list(conversation, order="asc")]
    secret = next(i.id for i in items if marker in str(i.model_dump()))
    with pytest.raises(openai.NotFoundError):
        await bob.conversations.items.delete(secret, conversation_id=conversation)

    answer = await alice.conversations.items.delete(secret, conversation_id=conversation)

    assert (answer.id, answer.object) == (conversation, "conversation")
    assert answer.metadata == {"agent": "helper"}
    left = [i.id async for i in alice.conversations.items.list(conversation, order="asc")]
    assert left == [i.id for i in items if i.id != secret]
    assert await marker_hits(sql_store, marker) == []
    for gone in (secret, "msg_999", "fc_2_0", "not_an_item", "msg_99999999999", "msg_0"):
        with pytest.raises(openai.NotFoundError) as refused:
            await alice.conversations.items.delete(gone, conversation_id=conversation)
        assert (refused.value.code, refused.value.param) == ("item_not_found", "item_id")


async def test_items_list_oldest_first_steps_over_a_stretch_of_erased_items(
    alice: AsyncOpenAI,
) -> None:
    conversation = await _conversation_with(alice, "one", "two", "three", "four")
    for seq in range(1, 6):
        await alice.conversations.items.delete(f"msg_{seq}", conversation_id=conversation)

    page = await alice.conversations.items.list(conversation, order="asc", limit=2)

    assert [i.id for i in page.data] == ["msg_6", "msg_7"]
    assert [i.id async for i in page] == ["msg_6", "msg_7", "msg_8"]


async def test_deleting_a_tool_call_s_item_erases_the_whole_message_that_made_it(
    alice: AsyncOpenAI,
) -> None:
    conversation = await _conversation_with(alice, "/read_page https://example.org/erase")
    items = [
        (i.type, i.id) async for i in alice.conversations.items.list(conversation, order="asc")
    ]
    assert items == [
        ("message", "msg_1"),
        ("function_call", "fc_2_0"),
        ("function_call_output", "fco_2_0"),
        ("message", "msg_2"),
    ]

    await alice.conversations.items.delete("fco_2_0", conversation_id=conversation)

    left = [i.id async for i in alice.conversations.items.list(conversation, order="asc")]
    assert left == ["msg_1"]
