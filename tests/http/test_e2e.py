"""End to end over real HTTP: uvicorn on a loopback port, PostgreSQL behind it."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from app.main import AssistantAgent
from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.store.sql import SqlAgentStore
from tests.conftest import empty_database
from tests.http.conftest import (
    ALICE,
    BOB,
    SSE,
    http_settings,
    live_client,
    make_app,
    serve_live,
    sse_events,
    transcript,
)


@pytest.mark.postgres
async def test_a_streamed_conversation_on_postgres_over_http(
    stack: AsyncExitStack, postgres_url: str
) -> None:
    store = SqlAgentStore.from_url(postgres_url)
    stack.push_async_callback(store.dispose)
    await empty_database(store.engine)
    module = AgentModule.for_root(
        store=store,
        model=EchoModel(),
        agents=[AssistantAgent],
        history={"max_messages": 4},
        settings=http_settings(),
    )
    client = await live_client(stack, await serve_live(stack, make_app(module)))

    assert (await client.get("/healthz")).json() == {"status": "ok"}
    created = await client.post("/agents/assistant/threads", headers=ALICE, json={"title": "e2e"})
    assert created.status_code == 201
    thread_id = created.json()["id"]

    turns = ["hello over real HTTP", "/read_page https://example.org/e2e", "thanks"]
    answers = []
    for content in turns:
        async with client.stream(
            "POST",
            f"/agents/assistant/threads/{thread_id}/messages",
            headers={**ALICE, **SSE},
            json={"content": content},
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = [event async for event in sse_events(response)]
        name, done = events[-1]
        assert name == "done", events[-1]
        deltas = "".join(d["text"] for n, d in events if n == "delta")
        assert deltas == done["message"]["content"]
        if content.startswith("/read_page"):
            assert [n for n, _ in events[:2]] == ["tool_call", "tool_result"]
        answers.append(done)

    messages = await transcript(client, thread_id)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert [m["content"] for m in messages[::2]] == turns
    assert [m["content"] for m in messages[1::2]] == [a["message"]["content"] for a in answers]
    assert messages[3]["tool_results"][0]["content"].startswith("# https://example.org/e2e")

    # the last turn read only the window's rows, not the 20 KB tool exchange's whole history
    report = (await client.get(f"/runs/{answers[-1]['run_id']}", headers=ALICE)).json()
    assert (report["read_bound"], report["rows_read"]) == (4, 4)
    # how much of the previous prompt the last turn's one chat call repeated (a sliding window
    # kept only the system prompt in common), and that EchoModel reports no cached tokens
    assert report["prompt_cache"]["calls"] == report["prompt_cache"]["compared"] == 1
    assert report["model_calls"][-1]["prefix_reused_messages"] == 1
    assert report["prompt_cache"]["cached_tokens"] is None
    window = (await client.get(f"/threads/{thread_id}/window", headers=ALICE)).json()
    # The next turn's own message takes one of the 4 places: 3 existing messages ride.
    assert [m["seq"] for m in window["kept"]] == [4, 5, 6]
    assert [m["seq"] for m in window["dropped"]] == [3]
    assert (await client.get(f"/threads/{thread_id}", headers=BOB)).status_code == 404
