"""A call that never ends must end the turn (attack round 6: each held its thread for good).

- A stream that never sends `[DONE]`, whether it keeps sending text or only keep-alive
  comments, is cut at `AGENT_MODEL_CALL_TIMEOUT_SECONDS` in all: the run fails as
  `provider_timeout`, the SSE client reads an `error` event, and the thread takes the next turn.
  (The provider's own timeout is per read, and a steady stream never trips it.)
- A stream of large deltas is cut once its text passes `MAX_ANSWER_CHARS`, long before the
  deadline: what a lying server can make the process hold is bounded.
- A tool that never returns is cut at `AGENT_TOOL_TIMEOUT_SECONDS`: the model reads an error
  result and the turn answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import pytest

from bounded_agents.core.turn import constants
from bounded_agents.registry import agent, tool
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ALICE, SSE, ModuleFactory, http_settings, new_thread, post
from tests.lying_provider.endless import Endless, EndlessOpenAI
from tests.lying_provider.helpers import app_client, provider, rows
from tests.providers.fake_openai import (
    FakeOpenAI,
    Reply,
    chunk,
    completion,
    wire_tool_call,
)

DEADLINE = 2.0
"""The whole call's limit the app is given here (the default is 600 s)."""


@pytest.fixture
async def endless() -> AsyncIterator[EndlessOpenAI]:
    server = EndlessOpenAI()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


CONTENT = f"data: {json.dumps(chunk({'content': 'word '}))}\n\n".encode()
KEEPALIVE = b": keep-alive\n\n"
BIG = f"data: {json.dumps(chunk({'content': 'w' * 32768}))}\n\n".encode()


async def _sse_turn(client: httpx.AsyncClient, tid: str) -> str:
    r = await client.post(
        f"/agents/helper/threads/{tid}/messages", headers={**ALICE, **SSE}, json={"content": "hi"}
    )
    return r.text


@pytest.mark.parametrize(("frame", "every"), [(CONTENT, 0.02), (KEEPALIVE, 0.5)])
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_stream_that_never_ends_fails_the_run_at_the_deadline(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    endless: EndlessOpenAI,
    http_client: httpx.AsyncClient,
    frame: bytes,
    every: float,
) -> None:
    endless.enqueue(Endless(frame=frame, every=every))
    model = provider(endless, http_client, timeout=1.0, max_retries=0)
    settings = http_settings(model_call_timeout_seconds=DEADLINE)
    client = await app_client(stack, make_module, model, settings=settings)
    tid = await new_thread(client)
    started = time.monotonic()

    text = await asyncio.wait_for(_sse_turn(client, tid), 20)

    assert DEADLINE <= time.monotonic() - started < DEADLINE + 5
    assert "event: error" in text and "provider_timeout" in text
    assert await rows(sql_store, "SELECT status FROM runs") == [("failed",)]
    endless.enqueue(Reply.json(completion("hello again")))
    assert (await post(client, tid, "still there?")).status_code == 200  # the thread is free


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_stream_of_huge_deltas_is_cut_at_the_answer_cap(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    endless: EndlessOpenAI,
    http_client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("bounded_agents.core.turn.answer.MAX_ANSWER_CHARS", 1_000_000)
    endless.enqueue(Endless(frame=BIG, every=0.002))
    model = provider(endless, http_client, timeout=1.0, max_retries=0)
    client = await app_client(stack, make_module, model)  # the 600 s deadline: not what cuts
    tid = await new_thread(client)

    text = await asyncio.wait_for(_sse_turn(client, tid), 20)

    assert "event: error" in text and "provider_bad_response" in text
    assert endless.sent_frames * 32768 < 4 * 1_000_000  # stopped soon after the cap
    assert constants.MAX_ANSWER_CHARS == 2_000_000  # the real cap, far past any answer


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_an_unstreamed_answer_that_never_ends_is_cut_at_the_body_cap(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    endless: EndlessOpenAI,
    http_client: httpx.AsyncClient,
) -> None:
    """A JSON turn calls the model unstreamed: a body that never ends was read whole until
    the call's deadline (600 s by default); it is refused once it passes `MAX_BODY_BYTES`."""
    endless.enqueue(Endless(frame=b'{"x": "' + b"w" * 32768 + b'", ', every=0.001))
    model = provider(endless, http_client, timeout=1.0, max_retries=0)
    client = await app_client(stack, make_module, model)
    tid = await new_thread(client)
    started = time.monotonic()

    r = await asyncio.wait_for(post(client, tid, "hi"), 30)

    assert r.status_code == 502 and r.json()["error"]["code"] == "provider_bad_response"
    assert "passed 16,000,000 bytes" in r.json()["error"]["message"]
    assert time.monotonic() - started < 25
    assert endless.sent_frames * 32768 < 2 * 16_000_000  # stopped soon after the cap


RELEASE: list[asyncio.Event] = []


@agent(name="helper", system_prompt="tools")
class Hangs:
    @tool
    async def lookup(self, q: str) -> str:
        """Look something up (the backend never answers)."""
        await RELEASE[0].wait()
        return "late"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_hung_tool_is_an_error_result_and_the_turn_answers(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
) -> None:
    RELEASE[:] = [asyncio.Event()]
    fake_openai.enqueue(
        Reply.json(completion(None, [wire_tool_call("c1", "lookup", '{"q": "x"}')])),
        Reply.json(completion("answered without it")),
    )
    settings = http_settings(tool_timeout_seconds=1.0)
    client = await app_client(
        stack, make_module, provider(fake_openai, http_client), agents=[Hangs], settings=settings
    )
    tid = await new_thread(client)

    r = await asyncio.wait_for(post(client, tid, "look it up"), 20)

    assert r.status_code == 200, r.text
    message = r.json()["message"]
    assert message["content"] == "answered without it"
    assert message["tool_results"][0]["is_error"] is True
    assert "did not answer within 1 s" in message["tool_results"][0]["content"]
    sent = fake_openai.requests[-1].json()["messages"][-1]
    assert sent["role"] == "tool" and "did not answer within 1 s" in sent["content"]
    RELEASE[0].set()
