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

from tests.http.conftest import ALICE, ModuleFactory, make_app, new_thread, open_client, parse_sse
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


async def test_a_native_streamed_keyed_retry_sends_each_tool_call_with_its_result(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The native stream's replay likewise: the first turn's `tool_call` and `tool_result`
    pairs (docs/http-api.md), then its text, then `done` with the same run."""
    client = await open_client(stack, make_app(make_module()))
    thread = await new_thread(client)
    url = f"/agents/helper/threads/{thread}/messages"
    body = {"content": "/read_page https://example.com/pricing"}
    key = {**ALICE, "Idempotency-Key": str(uuid.uuid4())}
    first = await client.post(url, headers=key, json=body)
    assert first.status_code == 200, first.text

    again = await client.post(url, headers={**key, "Accept": "text/event-stream"}, json=body)

    events = parse_sse(again.text)
    assert [e for e, _ in events] == ["tool_call", "tool_result", "delta", "done"], events
    call, result = events[0][1], events[1][1]
    assert result["call_id"] == call["id"] and result["name"] == call["name"] == "read_page"
    assert events[-1][1]["run_id"] == first.json()["run_id"]
