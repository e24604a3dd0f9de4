"""Lying answers end as one clear 502 line: the user message kept, nothing partial stored,
the actor's total equal to its ledger, and the next turn works (attack round 6: these held).
A server that ignores `stream: true` and answers whole is read once (it was asked twice: two
calls billed, one booked)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx
import pytest

from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ALICE, SSE, ModuleFactory, new_thread, parse_sse, transcript
from tests.lying_provider.helpers import app_client, provider, rows
from tests.providers.fake_openai import (
    FakeOpenAI,
    Reply,
    chunk,
    completion,
    usage_chunk,
    wire_tool_call,
)

CASES = {
    "invalid JSON arguments": Reply.json(
        completion(None, [wire_tool_call("c1", "read_page", '{"url": "a"')])
    ),
    "length mid tool call": Reply.sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read_page", "arguments": '{"ur'},
                        }
                    ]
                }
            ),
            chunk({}, finish_reason="length"),
            usage_chunk(11, 7),
        ]
    ),
    "cut mid tool call": Reply.sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read_page", "arguments": '{"ur'},
                        }
                    ]
                }
            ),
        ],
        cut=True,
    ),
    "error chunk after text": Reply.sse(
        [
            chunk({"content": "half an answ"}),
            {"error": {"message": "overloaded"}},
        ]
    ),
    "usage 2e9": Reply.sse(
        [chunk({"content": "hi"}, finish_reason="stop"), usage_chunk(2_000_000_000, 1)]
    ),
    "no name": Reply.json(completion(None, [wire_tool_call("c1", "", "{}")])),
}


STREAMED = {"length mid tool call", "cut mid tool call", "error chunk after text", "usage 2e9"}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_lying_answer_fails_cleanly(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
    case: str,
) -> None:
    stream = case in STREAMED
    fake_openai.enqueue(CASES[case])
    client = await app_client(
        stack, make_module, provider(fake_openai, http_client), quota=1_000_000
    )
    tid = await new_thread(client)
    headers = {**ALICE, **SSE} if stream else ALICE
    r = await client.post(
        f"/agents/helper/threads/{tid}/messages", headers=headers, json={"content": "q"}
    )
    if stream:
        events = parse_sse(r.text)
        assert events[-1][0] == "error", events
        error = events[-1][1]["error"]
    else:
        assert r.status_code == 502, r.text
        error = r.json()["error"]
    assert error["code"].startswith("provider"), error
    assert "\n" not in error["message"] and len(error["message"]) < 1200, error
    msgs = await transcript(client, tid)
    assert [(m["role"], m["content"]) for m in msgs] == [("user", "q")]
    booked = await rows(sql_store, "SELECT prompt_tokens + completion_tokens FROM ledger")
    total = await rows(sql_store, "SELECT tokens FROM actor_usage")
    assert sum(int(b) for (b,) in booked) == sum(int(t) for (t,) in total), (booked, total)
    fake_openai.enqueue(
        Reply.json(completion("fine"))
        if not stream
        else Reply.sse([chunk({"content": "fine"}, finish_reason="stop"), usage_chunk(3, 4)])
    )
    r = await client.post(
        f"/agents/helper/threads/{tid}/messages", headers=headers, json={"content": "again"}
    )
    assert r.status_code == 200, r.text
    assert "event: error" not in r.text, r.text


@pytest.mark.parametrize("stream", [False, True])
async def test_a_retried_call_is_booked_once(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
    stream: bool,
) -> None:
    ok = (
        Reply.sse([chunk({"content": "fine"}, finish_reason="stop"), usage_chunk(11, 7)])
        if stream
        else Reply.json(completion("fine"))
    )
    fake_openai.enqueue(
        Reply.error(500, "a"), Reply.error(429, "b", headers={"Retry-After": "0"}), ok
    )
    client = await app_client(
        stack, make_module, provider(fake_openai, http_client), quota=1_000_000
    )
    tid = await new_thread(client)
    headers = {**ALICE, **SSE} if stream else ALICE
    r = await client.post(
        f"/agents/helper/threads/{tid}/messages", headers=headers, json={"content": "q"}
    )
    assert r.status_code == 200
    booked = await rows(sql_store, "SELECT prompt_tokens, completion_tokens FROM ledger")
    total = await rows(sql_store, "SELECT tokens FROM actor_usage")
    assert [(int(a), int(b)) for a, b in booked] == [(11, 7)]
    assert [int(t) for (t,) in total] == [18]
    assert len(fake_openai.requests) == 3


async def test_a_server_that_answers_a_stream_request_whole_is_called_once(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
) -> None:
    """A proxy that ignores `stream: true` and sends the whole completion as JSON: that
    answer (paid for) is the answer; asking again pays twice and books once."""
    fake_openai.enqueue(Reply.json(completion("whole")), Reply.json(completion("second")))
    client = await app_client(stack, make_module, provider(fake_openai, http_client))
    tid = await new_thread(client)
    r = await client.post(
        f"/agents/helper/threads/{tid}/messages", headers={**ALICE, **SSE}, json={"content": "q"}
    )
    events = parse_sse(r.text)
    assert events[-1][0] == "done"
    assert events[-1][1]["message"]["content"] == "whole"
    assert len(fake_openai.requests) == 1, (
        f"{len(fake_openai.requests)} model calls for one step; answer "
        f"{events[-1][1]['message']['content']!r}; ledger "
        f"{await rows(sql_store, 'SELECT prompt_tokens, completion_tokens FROM ledger')}"
    )
