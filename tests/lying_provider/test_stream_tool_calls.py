"""Streamed tool calls from servers that do not follow OpenAI's chunk shape to the letter
(attack round 6): Google's endpoint streams each call whole with no `index` (was
`KeyError('index')`), a server may send the arguments as an object (was an unclear 502)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx
import pytest

from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ModuleFactory, new_thread, transcript
from tests.lying_provider.helpers import app_client, provider, sse_turn, wire_call
from tests.providers.fake_openai import FakeOpenAI, Reply, chunk, usage_chunk


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_gemini_style_tool_calls_without_an_index_run(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
) -> None:
    """Google's OpenAI-compatible endpoint streams each tool call whole, with no `index`
    (what the same server answers unstreamed is run)."""
    fake_openai.enqueue(
        Reply.sse(
            [
                chunk(
                    {
                        "role": "assistant",
                        "tool_calls": [
                            wire_call(
                                None,
                                id="function-call-1",
                                function={"name": "read_page", "arguments": '{"url": "a"}'},
                            ),
                        ],
                    }
                ),
                chunk(
                    {
                        "tool_calls": [
                            wire_call(
                                None,
                                id="function-call-2",
                                function={"name": "read_page", "arguments": '{"url": "b"}'},
                            ),
                        ]
                    },
                    finish_reason="stop",
                ),
                usage_chunk(11, 7),
            ]
        ),
        Reply.sse([chunk({"content": "read both"}, finish_reason="stop"), usage_chunk(11, 7)]),
    )
    client = await app_client(stack, make_module, provider(fake_openai, http_client))
    tid = await new_thread(client)
    events = await sse_turn(client, tid, "read a and b")
    assert events[-1][0] == "done", events[-1]
    msgs = await transcript(client, tid)
    assert [c["arguments"] for c in msgs[1]["tool_calls"]] == [{"url": "a"}, {"url": "b"}]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_streamed_arguments_sent_as_an_object_run_as_they_do_unstreamed(
    sql_store: SqlAgentStore,
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
) -> None:
    """Arguments sent as an object (some servers do) are taken streamed as they are
    unstreamed (it was a 502 that said only 'details are in the server log')."""
    fake_openai.enqueue(
        Reply.sse(
            [
                chunk(
                    {
                        "tool_calls": [
                            wire_call(
                                0,
                                id="c1",
                                function={"name": "read_page", "arguments": {"url": "a"}},
                            ),
                        ]
                    },
                    finish_reason="tool_calls",
                ),
                usage_chunk(11, 7),
            ]
        ),
        Reply.sse([chunk({"content": "ok"}, finish_reason="stop"), usage_chunk(11, 7)]),
    )
    client = await app_client(stack, make_module, provider(fake_openai, http_client))
    tid = await new_thread(client)
    events = await sse_turn(client, tid, "read a")
    assert events[-1][0] == "done", events[-1]
    msgs = await transcript(client, tid)
    assert [c["arguments"] for c in msgs[1]["tool_calls"]] == [{"url": "a"}]
