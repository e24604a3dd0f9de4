"""A `/v1` stream of a turn whose model speaks before its tool calls, read by the real `openai`
SDK over uvicorn: the final Response (`response.completed`) is the stored one, item for item,
as `responses.retrieve` and the conversation's items show it (attack round 8: it carried the
streamed items, whose ids named no stored item, and whose text the stored answer joined)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from bounded_agents.core.messages import ToolCall
from bounded_agents.core.ports import ModelResponse, Usage
from bounded_agents.testing import StreamingScriptedProvider
from tests.http.conftest import ModuleFactory
from tests.http.test_openai_sdk import async_client, serve

# --- a model that speaks before its tool call, and calls a tool it never declared ----------------


@pytest.fixture
async def scripted_url(stack: AsyncExitStack, make_module: ModuleFactory) -> str:
    model = StreamingScriptedProvider(
        [
            ModelResponse(
                content="Let me check the page first.",
                tool_calls=[
                    ToolCall(id="call_1", name="read_page", arguments={"url": "https://e.x"})
                ],
                usage=Usage(prompt_tokens=10, completion_tokens=5),
                finish_reason="tool_calls",
            ),
            ModelResponse(
                content="",
                tool_calls=[ToolCall(id="call_2", name="delete_everything", arguments={})],
                usage=Usage(prompt_tokens=10, completion_tokens=5),
                finish_reason="tool_calls",
            ),
            ModelResponse(
                content="Done: it says hello.", usage=Usage(prompt_tokens=10, completion_tokens=5)
            ),
        ]
    )
    return await serve(stack, make_module(model=model))


async def test_streamed_final_response_equals_the_retrieved_one(scripted_url: str) -> None:
    async with async_client(scripted_url) as client:
        async with client.responses.stream(model="helper", input="read it") as stream:
            events = [e async for e in stream]
            final = await stream.get_final_response()
        retrieved = await client.responses.retrieve(final.id)
        items = [
            i async for i in client.conversations.items.list(final.conversation.id, order="asc")
        ]
    assert events[-1].type == "response.completed"
    assert final.output_text.endswith("Done: it says hello.")
    streamed = [(o.type, getattr(o, "name", None)) for o in final.output]
    stored = [(o.type, getattr(o, "name", None)) for o in retrieved.output]
    assert stored == streamed, (
        streamed,
        stored,
        [(i.type, getattr(i, "role", None)) for i in items],
    )
    assert retrieved.output_text == final.output_text
    # the undeclared tool's call got an error result, stored
    outputs = [i for i in items if i.type == "function_call_output"]
    assert len(outputs) == 2


async def test_streamed_output_item_ids_are_distinct_and_resolvable(scripted_url: str) -> None:
    """Every item of the streamed final Response is an item of the conversation (its id names
    one), and no two output items share an id."""
    async with async_client(scripted_url) as client:
        async with client.responses.stream(model="helper", input="read it") as stream:
            final = await stream.get_final_response()
        items = [
            i async for i in client.conversations.items.list(final.conversation.id, order="asc")
        ]
    ids = [o.id for o in final.output]
    assert len(ids) == len(set(ids)), ids
    known = {i.id for i in items}
    assert set(ids) <= known, (ids, sorted(known))
