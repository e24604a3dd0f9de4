"""Turns as Server-Sent Events: deltas add up to the answer, tool events, no summary tokens,
errors as events, and a client that leaves does not lose the answer."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import httpx
import pytest

from app.main import fake_page
from bounded_agents.errors import ProviderBadResponse
from bounded_agents.http.sse import accepts_event_stream
from bounded_agents.providers import EchoModel
from bounded_agents.registry import agent, tool
from bounded_agents.testing import Gate, ScriptedProvider, StreamingScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    SSE,
    ModuleFactory,
    assert_error,
    live_client,
    make_app,
    new_thread,
    open_client,
    parse_sse,
    post,
    serve_live,
    sse_events,
    transcript,
)


def _url(thread_id: str) -> str:
    return f"/agents/helper/threads/{thread_id}/messages"


async def _stream(client: httpx.AsyncClient, thread_id: str, content: str) -> httpx.Response:
    return await post(client, thread_id, content, headers={**ALICE, **SSE})


async def test_deltas_concatenate_to_the_final_message(client: httpx.AsyncClient) -> None:
    thread_id = await new_thread(client)
    r = await _stream(client, thread_id, "tell me something long enough to stream in parts")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    names = [name for name, _ in events]
    assert names[-1] == "done" and set(names[:-1]) == {"delta"} and len(names) > 3
    done = events[-1][1]
    assert set(done) == {"run_id", "message", "report"}
    text = "".join(data["text"] for name, data in events if name == "delta")
    assert text == done["message"]["content"]
    stored = await transcript(client, thread_id)
    assert stored[-1]["content"] == text and stored[-1]["run_id"] == done["run_id"]


async def test_a_provider_that_does_not_stream_sends_the_answer_as_one_delta(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module(model=ScriptedProvider([reply("Hi!")]))))
    thread_id = await new_thread(client)
    events = parse_sse((await _stream(client, thread_id, "hello")).text)
    assert [n for n, _ in events] == ["delta", "done"]
    assert events[0][1] == {"text": "Hi!"}
    assert events[1][1]["message"]["content"] == "Hi!"


async def test_a_tool_turn_streams_its_tool_events(client: httpx.AsyncClient) -> None:
    thread_id = await new_thread(client)
    events = parse_sse((await _stream(client, thread_id, "/read_page https://x")).text)
    names = [name for name, _ in events]
    assert names[:2] == ["tool_call", "tool_result"]
    call, result = events[0][1], events[1][1]
    assert call == {"id": call["id"], "name": "read_page", "arguments": {"url": "https://x"}}
    assert result == {
        "call_id": call["id"],
        "name": "read_page",
        "is_error": False,
        "content_chars": len(fake_page("https://x")),
    }
    done = events[-1][1]
    assert done["message"]["tool_calls"][0]["id"] == call["id"]
    deltas = "".join(d["text"] for n, d in events if n == "delta")
    assert deltas == done["message"]["content"]
    assert f"returned {result['content_chars']} characters" in deltas


async def test_summary_tokens_never_reach_the_stream(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    module = make_module(model=EchoModel(), history={"max_messages": 2, "summarize": True})
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    for i in range(3):
        assert (await post(client, thread_id, f"earlier point number {i}")).status_code == 200

    events = parse_sse((await _stream(client, thread_id, "and now?")).text)
    done = events[-1][1]
    assert events[-1][0] == "done"
    # a summary was made in this run...
    assert [c["purpose"] for c in done["report"]["model_calls"]] == ["history_summary", "chat"]
    assert "history_summary" in [row["purpose"] for row in done["report"]["ledger"]]
    # ...and none of it was streamed
    deltas = [d["text"] for n, d in events if n == "delta"]
    streamed = "".join(deltas)
    assert streamed == done["message"]["content"]
    assert "Summary of" not in streamed and "earlier point number 0" not in streamed
    assert all(n in ("delta", "done") for n, _ in events)


async def test_a_failed_turn_ends_the_stream_with_an_error_event(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = StreamingScriptedProvider([ProviderBadResponse("not JSON"), reply("fine")])
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread_id = await new_thread(client)
    events = parse_sse((await _stream(client, thread_id, "hi")).text)
    assert [n for n, _ in events] == ["error"]
    error = events[0][1]
    assert error["error"] == {"code": "provider_bad_response", "message": "not JSON"}
    run = (await client.get(f"/runs/{error['run_id']}", headers=ALICE)).json()
    assert run["status"] == "failed"
    # the next turn works
    again = parse_sse((await _stream(client, thread_id, "again")).text)
    assert again[-1][0] == "done" and again[-1][1]["message"]["content"] == "fine"


async def test_refusals_before_the_run_are_plain_http_errors(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("done"))
    client = await open_client(
        stack, make_app(make_module(model=StreamingScriptedProvider([gate])))
    )
    thread_id = await new_thread(client)
    first = asyncio.create_task(_stream(client, thread_id, "one"))
    await gate.reached()
    assert_error(await _stream(client, thread_id, "two"), 409, "thread_busy")
    assert_error(await _stream(client, thread_id, " "), 422, "validation_error")
    gate.release.set()
    assert parse_sse((await first).text)[-1][0] == "done"


async def test_a_client_that_disconnects_mid_stream_still_gets_the_answer_stored(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = asyncio.Event()

    @agent(name="helper")
    class GatedAgent:
        @tool
        async def read_page(self, url: str) -> str:
            """Read a page, once the test lets it."""
            await gate.wait()
            return fake_page(url)

    url = await serve_live(stack, make_app(make_module(agents=[GatedAgent])))
    client = await live_client(stack, url)
    thread_id = await new_thread(client)

    async with client.stream(
        "POST", _url(thread_id), headers={**ALICE, **SSE}, json={"content": "/read_page https://y"}
    ) as response:
        assert response.status_code == 200
        events = sse_events(response)
        name, data = await anext(events)
        assert (name, data["name"]) == ("tool_call", "read_page")
        await events.aclose()
    # the client is gone; the run is waiting inside its tool
    assert [m["role"] for m in await transcript(client, thread_id)] == ["user"]
    gate.set()

    # The answer is stored one statement before the run is marked completed: wait for both.
    async with asyncio.timeout(10):
        while True:
            messages = await transcript(client, thread_id)
            if messages[-1]["role"] == "assistant":
                run_id = messages[-1]["run_id"]
                run = (await client.get(f"/runs/{run_id}", headers=ALICE)).json()
                if run["status"] != "running":
                    break
            await asyncio.sleep(0.05)
    answer = messages[-1]
    assert "Tool read_page returned" in answer["content"]
    assert answer["tool_results"][0]["call_id"] == data["id"]
    assert run["status"] == "completed"


@pytest.mark.parametrize(
    ("accept", "streams"),
    [
        ("text/event-stream", True),
        ("application/json, text/event-stream;q=0.5", True),
        ("Text/Event-Stream; charset=utf-8", True),
        ("application/json, text/event-stream;q=0", False),
        ("text/event-stream; q=0.000", False),
        ("text/event-stream;q=x", False),
        ("application/json", False),
        ("*/*", False),
        ("", False),
    ],
)
def test_an_accept_header_asks_for_a_stream_only_with_a_q_value_above_0(
    accept: str, streams: bool
) -> None:
    assert accepts_event_stream(accept) is streams


async def test_accept_with_event_stream_at_q0_is_answered_as_json(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """RFC 9110 (12.4.2): a q-value of 0 is "not acceptable"; the route matched the substring
    and streamed to a client that had said it cannot take a stream (attack round 10)."""
    c = await open_client(stack, make_app(make_module()))
    thread_id = await new_thread(c)
    r = await c.post(
        f"/agents/helper/threads/{thread_id}/messages",
        headers={**ALICE, "Accept": "application/json, text/event-stream;q=0"},
        json={"content": "json please"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers["content-type"]
    assert r.json()["message"]["role"] == "assistant"
