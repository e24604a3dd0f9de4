"""A streamed turn answers its headers once the run has begun, not at the model's first token.

A model slow to its first token (a reasoning model thinks for a minute; a fold runs first)
left a streaming client with no status line and no bytes until then, and a proxy with an idle
timeout (60 s on many load balancers) cut the connection. The stream now starts when the run's
first unit committed: headers, then pings while the model thinks. A turn refused before it began
is still a plain HTTP error (`tests/http/test_sse.py`). Over a real server (uvicorn), on both
databases.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from bounded_agents.testing import Gate, StreamingScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    SSE,
    ModuleFactory,
    live_client,
    make_app,
    new_thread,
    serve_live,
    sse_events,
    transcript,
)
from tests.http.test_openai_sdk import async_client, serve

HEADERS_WITHIN = 5.0
"""Seconds the headers may take. The gated model answers only after they came (the gate is
released after this wait), so headers that waited for the model time out: the test's check."""


async def test_native_stream_sends_its_headers_before_the_model_answers(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("thought long"))
    module = make_module(model=StreamingScriptedProvider([gate]))
    client = await live_client(stack, await serve_live(stack, make_app(module)))
    thread_id = await new_thread(client)
    url = f"/agents/helper/threads/{thread_id}/messages"

    async with asyncio.timeout(HEADERS_WITHIN):
        response = await stack.enter_async_context(
            client.stream("POST", url, headers={**ALICE, **SSE}, json={"content": "think"})
        )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    await gate.reached()  # the model call is in flight: nothing answered yet
    assert [m["role"] for m in await transcript(client, thread_id)] == ["user"]

    gate.release.set()
    events = [event async for event in sse_events(response)]
    assert {name for name, _ in events[:-1]} == {"delta"} and events[-1][0] == "done"
    assert "".join(data["text"] for _, data in events[:-1]) == "thought long"
    assert events[-1][1]["message"]["content"] == "thought long"


async def test_v1_stream_opens_with_response_created_before_the_model_answers(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("thought long"))
    base_url = await serve(stack, make_module(model=StreamingScriptedProvider([gate])))
    client = await stack.enter_async_context(async_client(base_url))

    async with asyncio.timeout(HEADERS_WITHIN):
        stream = await client.responses.create(model="helper", input="think", stream=True)
        events = aiter(stream)
        created = await anext(events)
    assert created.type == "response.created"
    assert created.response.status == "in_progress"

    gate.release.set()
    rest = [event async for event in events]
    assert rest[-1].type == "response.completed"
    assert rest[-1].response.output_text == "thought long"
    assert created.response.id == rest[-1].response.id


async def test_a_client_gone_right_after_the_early_headers_still_gets_its_answer_stored(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The attack on the early start: the client takes the headers and leaves before any event.
    The turn runs in a task of its own, so the answer is stored once the model answers."""
    gate = Gate(reply("stored anyway"))
    module = make_module(model=StreamingScriptedProvider([gate]))
    client = await live_client(stack, await serve_live(stack, make_app(module)))
    thread_id = await new_thread(client)
    url = f"/agents/helper/threads/{thread_id}/messages"

    async with asyncio.timeout(HEADERS_WITHIN):
        async with client.stream(
            "POST", url, headers={**ALICE, **SSE}, json={"content": "then leave"}
        ) as response:
            assert response.status_code == 200
    await gate.reached()
    gate.release.set()

    for _ in range(200):  # 10 s at most
        roles = [m["role"] for m in await transcript(client, thread_id)]
        if roles == ["user", "assistant"]:
            break
        await asyncio.sleep(0.05)
    messages = await transcript(client, thread_id)
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "then leave"),
        ("assistant", "stored anyway"),
    ]
