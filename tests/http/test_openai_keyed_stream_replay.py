"""docs/openai-api.md: with an `Idempotency-Key`, "a retry is answered with the first
Response", and "`stream` is not part of what the key must match, so a retry may stream or not".
Found by attack: a streamed retry of a turn that called a tool was built from the stored
answer's text alone (`bounded_agents.http.turns._repeated`), so its `response.completed` held
only the message item: the official SDK's `get_final_response()` said the agent called no
tool, while the unstreamed retry and `responses.retrieve` listed the call."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
from openai import AsyncOpenAI

from tests.http.conftest import ModuleFactory
from tests.http.test_openai_sdk import async_client, serve


@pytest.fixture
async def alice(stack: AsyncExitStack, make_module: ModuleFactory) -> AsyncIterator[AsyncOpenAI]:
    base_url = await serve(stack, make_module())
    async with async_client(base_url) as client:
        yield client


async def test_a_streamed_keyed_retry_of_a_tool_turn_answers_the_first_response_whole(
    alice: AsyncOpenAI,
) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = await alice.responses.create(
        model="helper", input="/read_page https://example.com/pricing", extra_headers=key
    )
    assert [item.type for item in first.output] == ["function_call", "message"]

    async with alice.responses.stream(
        model="helper", input="/read_page https://example.com/pricing", extra_headers=key
    ) as stream:
        replayed = await stream.get_final_response()

    assert replayed.id == first.id
    assert replayed.output_text == first.output_text
    assert [(i.type, getattr(i, "id", None)) for i in replayed.output] == [
        (i.type, getattr(i, "id", None)) for i in first.output
    ]
    retrieved = await alice.responses.retrieve(first.id)
    assert [(i.type, getattr(i, "id", None)) for i in retrieved.output] == [
        (i.type, getattr(i, "id", None)) for i in first.output
    ]
