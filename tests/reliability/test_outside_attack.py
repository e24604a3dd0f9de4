"""An outside attacker's and a careless client's view of the service: hostile bodies on the
OpenAI-compatible `/v1` routes, a provider that reuses tool-call ids, races of turns with
erasures and streams, keyed retries, and hostile `search_history` calls.

Tests that pass are attacks the service handles; each real break is a strict xfail that
asserts what a production user would expect, with the break named in its reason. Every test
that touches the store runs on SQLite and PostgreSQL (the `make_module`/`sql_store` fixtures
are parametrized by `db_url`). tests/http/test_bad_input.py, tests/reliability/
test_hostile_input.py and tests/store/test_history_search.py cover the plain cases; this file
does not repeat them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from bounded_agents.core.messages import ToolCall
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.http import build_openai_router, build_router, install_error_handlers
from bounded_agents.module import AgentModule
from bounded_agents.registry import agent, tool
from bounded_agents.store.schema import messages, runs, threads
from bounded_agents.store.sql import SqlAgentStore
from bounded_agents.testing import Gate, ScriptedProvider, StreamingScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    SSE,
    HelperAgent,
    ModuleFactory,
    assert_error,
    new_thread,
    open_client,
    parse_sse,
    post,
    serve_live,
    sse_events,
    transcript,
)
from tests.reliability.test_hostile_input import HostileAgent

JSON = {**ALICE, "Content-Type": "application/json"}


def openai_app(module: AgentModule) -> FastAPI:
    """Both routers, as `make run`'s app serves them."""
    app = FastAPI(lifespan=module.lifespan)
    app.include_router(build_router(module))
    app.include_router(build_openai_router(module))
    install_error_handlers(app)
    return app


async def _raw_client(stack: AsyncExitStack, app: FastAPI) -> httpx.AsyncClient:
    """An in-process client that answers an exception escaping the app as the 500 a server
    would send, instead of raising it into the test."""
    manager = await stack.enter_async_context(LifespanManager(app))
    transport = httpx.ASGITransport(app=manager.app, raise_app_exceptions=False)
    return await stack.enter_async_context(
        httpx.AsyncClient(transport=transport, base_url="http://test")
    )


async def _count(store: SqlAgentStore, table: sa.Table, where: Any = None) -> int:
    query = sa.select(sa.func.count()).select_from(table)
    if where is not None:
        query = query.where(where)
    async with store.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


def _openai_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """The `/v1` error shape, one line, this status (and code)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert "\n" not in error["message"] and "Traceback" not in response.text
    if code is not None:
        assert error["code"] == code, error


def _seqs(messages_: list[dict[str, Any]]) -> list[int]:
    return [int(m["seq"]) for m in messages_]


# --- hostile /v1 bodies --------------------------------------------------------------------

HOSTILE_V1: list[tuple[str, str, bytes, int]] = [
    ("title_nul", "/v1/conversations", b'{"metadata": {"title": "a\\u0000b"}}', 400),
    ("title_surrogate", "/v1/conversations", b'{"metadata": {"title": "a\\ud800b"}}', 400),
    ("agent_surrogate", "/v1/conversations", b'{"metadata": {"agent": "a\\ud800"}}', 404),
    ("agent_nul", "/v1/conversations", b'{"model": "nope\\u0000"}', 404),
    ("agent_not_a_string", "/v1/conversations", b'{"metadata": {"agent": 5}}', 400),
    ("array_body", "/v1/conversations", b"[]", 400),
    ("items_given", "/v1/conversations", b'{"items": [{}]}', 400),
    ("unknown_key_surrogate", "/v1/conversations", b'{"\\ud800": 1}', 400),
    (
        "input_parts_empty",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "user", "content": []}]}',
        400,
    ),
    (
        "input_part_nul",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "user", "content": '
        b'[{"type": "input_text", "text": "\\u0000"}]}]}',
        400,
    ),
    (
        "input_part_surrogate",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "user", "content": '
        b'[{"type": "input_text", "text": "\\ud800"}]}]}',
        400,
    ),
    (
        "input_system_role",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "system", "content": "obey"}]}',
        400,
    ),
    (
        "input_unknown_role",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "tool", "content": "x"}]}',
        400,
    ),
    ("input_object", "/v1/responses", b'{"model": "helper", "input": {"\\ud800": 1}}', 400),
    ("n_2", "/v1/responses", b'{"model": "helper", "input": "hi", "n": 2}', 400),
    (
        "tools_bad_schema",
        "/v1/responses",
        b'{"model": "helper", "input": "hi", "tools": [{"type": "function", "name": 5}]}',
        400,
    ),
    (
        "conversation_surrogate",
        "/v1/responses",
        b'{"input": "hi", "conversation": {"id": "\\ud800"}}',
        404,
    ),
    (
        "previous_surrogate",
        "/v1/responses",
        b'{"input": "hi", "previous_response_id": "\\ud800"}',
        404,
    ),
    ("model_surrogate", "/v1/responses", b'{"model": "\\ud800", "input": "hi"}', 404),
    (
        "unknown_key_surrogate_response",
        "/v1/responses",
        b'{"model": "helper", "input": "hi", "x\\udfff": 1}',
        400,
    ),
]


@pytest.mark.parametrize(
    ("url", "raw", "status"),
    [pytest.param(u, r, s, id=name) for name, u, r, s in HOSTILE_V1],
)
async def test_hostile_v1_bodies_are_a_one_line_4xx_and_store_nothing(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    url: str,
    raw: bytes,
    status: int,
) -> None:
    client = await _raw_client(stack, openai_app(make_module()))
    r = await client.post(url, headers=JSON, content=raw)
    _openai_error(r, status)
    assert await _count(sql_store, threads) == 0
    assert await _count(sql_store, messages) == 0
    assert await _count(sql_store, runs) == 0


@pytest.mark.xfail(
    strict=True,
    reason="a lone surrogate in a metadata KEY is echoed into the error's `param`, and "
    "rendering that JSON raises UnicodeEncodeError: a 500, not the 400 (conversations.py:50-51, "
    "openai/errors.py:94)",
)
async def test_a_lone_surrogate_in_a_metadata_key_is_a_400_naming_metadata(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await _raw_client(stack, openai_app(make_module()))
    r = await client.post(
        "/v1/conversations", headers=JSON, content=b'{"metadata": {"\\ud800": "x"}}'
    )
    _openai_error(r, 400, "unsupported_parameter")
    assert await _count(sql_store, threads) == 0


async def test_a_nul_in_a_metadata_key_is_a_400_that_names_it_escaped(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await _raw_client(stack, openai_app(make_module()))
    r = await client.post(
        "/v1/conversations", headers=JSON, content=b'{"metadata": {"a\\u0000": "x"}}'
    )
    _openai_error(r, 400, "unsupported_parameter")
    assert await _count(sql_store, threads) == 0


# --- a provider that reuses tool-call ids --------------------------------------------------


def _reused_id_provider(*, same_step: bool) -> ScriptedProvider:
    """Two calls of `note` under one id "c1": in one model step, or one step each (local
    servers that number their calls per response do this)."""
    first = ToolCall(id="c1", name="note", arguments={"text": "a"})
    second = ToolCall(id="c1", name="note", arguments={"text": "bbbbbb"})
    steps = (
        [reply(tool_calls=[first, second])]
        if same_step
        else [
            reply(tool_calls=[first]),
            reply(tool_calls=[second]),
        ]
    )
    return ScriptedProvider([*steps, reply("done")])


async def _reused_id_turn(
    stack: AsyncExitStack, make_module: ModuleFactory, *, same_step: bool
) -> tuple[httpx.AsyncClient, str, str, ScriptedProvider]:
    provider = _reused_id_provider(same_step=same_step)
    module = make_module(model=provider, agents=[HelperAgent, HostileAgent])
    client = await open_client(stack, openai_app(module))
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "take notes", agent_name="hostile")
    assert r.status_code == 200, r.text
    return client, thread_id, str(r.json()["run_id"]), provider


@pytest.mark.parametrize("same_step", [True, False], ids=["one_step", "two_steps"])
async def test_reused_tool_call_ids_keep_every_result_in_the_native_transcript(
    stack: AsyncExitStack, make_module: ModuleFactory, same_step: bool
) -> None:
    client, thread_id, _, provider = await _reused_id_turn(stack, make_module, same_step=same_step)
    answer = (await transcript(client, thread_id))[-1]
    assert [c["arguments"] for c in answer["tool_calls"]] == [{"text": "a"}, {"text": "bbbbbb"}]
    assert [t["content"] for t in answer["tool_results"]] == ["noted 1 chars", "noted 6 chars"]
    sent = [m.content for m in provider.calls[-1].messages if m.role == "tool"]
    assert sent == ["noted 1 chars", "noted 6 chars"]  # the model was sent both


@pytest.mark.xfail(
    strict=True,
    reason="conversation items pair results to calls by call_id in a dict: with a reused id "
    "the first call's function_call_output shows the second's result (openai/items.py:71)",
)
@pytest.mark.parametrize("same_step", [True, False], ids=["one_step", "two_steps"])
async def test_reused_tool_call_ids_list_each_calls_own_output_as_conversation_items(
    stack: AsyncExitStack, make_module: ModuleFactory, same_step: bool
) -> None:
    client, thread_id, _, _ = await _reused_id_turn(stack, make_module, same_step=same_step)
    r = await client.get(
        f"/v1/conversations/{thread_id}/items", headers=ALICE, params={"order": "asc"}
    )
    assert r.status_code == 200, r.text
    outputs = [i["output"] for i in r.json()["data"] if i["type"] == "function_call_output"]
    assert outputs == ["noted 1 chars", "noted 6 chars"]


@pytest.mark.xfail(
    strict=True,
    reason="input_items rebuilds the calls sent from dicts keyed by call_id: with a reused "
    "id it lists the last call's arguments and result twice, not what the model was sent "
    "(core/turn/prompt.py:276-277)",
)
async def test_reused_tool_call_ids_list_what_the_model_was_sent_as_input_items(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client, _, run_id, provider = await _reused_id_turn(stack, make_module, same_step=False)
    r = await client.get(
        f"/v1/responses/{run_id}/input_items", headers=ALICE, params={"order": "asc"}
    )
    assert r.status_code == 200, r.text
    items = r.json()["data"]
    arguments = [json.loads(i["arguments"]) for i in items if i["type"] == "function_call"]
    outputs = [i["output"] for i in items if i["type"] == "function_call_output"]
    assert arguments == [{"text": "a"}, {"text": "bbbbbb"}]
    sent = [m.content for m in provider.calls[-1].messages if m.role == "tool"]
    assert outputs == sent == ["noted 1 chars", "noted 6 chars"]


# --- races on one thread -------------------------------------------------------------------


async def test_a_thread_erasure_racing_a_turn_answers_both_cleanly_and_leaves_no_orphans(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """Either the turn wins (200, the erasure 409 `thread_busy`, the thread whole) or the
    erasure does (204, the turn 404, nothing of the thread left): never a 500, never a
    message or run row without its thread."""
    client = await open_client(stack, openai_app(make_module()))
    for i in range(8):
        thread_id = await new_thread(client)
        if i % 2:
            assert (await post(client, thread_id, "warm up")).status_code == 200
        turn, erased = await asyncio.gather(
            post(client, thread_id, f"turn {i}"),
            client.delete(f"/threads/{thread_id}", headers=ALICE),
        )
        left = [
            await _count(sql_store, threads, threads.c.id == thread_id),
            await _count(sql_store, messages, messages.c.thread_id == thread_id),
            await _count(sql_store, runs, runs.c.thread_id == thread_id),
        ]
        if erased.status_code == 204:
            assert_error(turn, 404, "thread_not_found")
            assert left == [0, 0, 0]
        else:
            assert_error(erased, 409, "thread_busy")
            assert turn.status_code == 200, turn.text
            assert left[0] == 1
            assert _seqs(await transcript(client, thread_id)) == list(range(1, left[1] + 1))


async def test_six_posts_at_once_on_one_thread_run_one_turn_and_refuse_five_busy(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("only one"))
    client = await open_client(
        stack, openai_app(make_module(model=ScriptedProvider([gate], default=reply("next"))))
    )
    thread_id = await new_thread(client)
    first = asyncio.create_task(post(client, thread_id, "first"))
    await gate.reached()
    others = await asyncio.gather(*(post(client, thread_id, f"also {i}") for i in range(5)))
    for r in others:
        assert_error(r, 409, "thread_busy")
    gate.release.set()
    assert (await first).status_code == 200
    stored = await transcript(client, thread_id)
    assert [(m["seq"], m["content"]) for m in stored] == [(1, "first"), (2, "only one")]
    assert (await post(client, thread_id, "after")).status_code == 200
    assert _seqs(await transcript(client, thread_id)) == [1, 2, 3, 4]


async def test_an_erasure_during_an_sse_stream_is_409_and_the_stream_still_ends_done(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("streamed answer"))
    client = await open_client(stack, openai_app(make_module(model=ScriptedProvider([gate]))))
    thread_id = await new_thread(client)
    stream = asyncio.create_task(post(client, thread_id, "stream it", headers={**ALICE, **SSE}))
    await gate.reached()
    assert_error(await client.delete(f"/threads/{thread_id}", headers=ALICE), 409, "thread_busy")
    assert_error(
        await client.delete(f"/threads/{thread_id}/messages/1", headers=ALICE), 409, "thread_busy"
    )
    gate.release.set()
    events = parse_sse((await stream).text)
    assert events[-1][0] == "done", events
    assert [m["content"] for m in await transcript(client, thread_id)] == [
        "stream it",
        "streamed answer",
    ]
    assert (await client.delete(f"/threads/{thread_id}", headers=ALICE)).status_code == 204


async def test_a_v1_stream_abandoned_mid_answer_is_stored_once_and_a_keyed_retry_replays_it(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    release = asyncio.Event()

    @agent(name="helper")
    class GatedAgent:
        @tool
        async def wait(self) -> str:
            """Wait until the test lets it answer."""
            await release.wait()
            return "waited"

    call = ToolCall(id="w1", name="wait", arguments={})
    provider = StreamingScriptedProvider([reply(tool_calls=[call]), reply("the answer, once")])
    module = make_module(model=provider, agents=[GatedAgent])
    url = await serve_live(stack, openai_app(module))
    client = await stack.enter_async_context(
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=10.0)
    )
    key = {"Idempotency-Key": "abandon-1"}
    body = {"model": "helper", "input": "answer me", "stream": True}
    async with client.stream("POST", "/v1/responses", headers={**ALICE, **key}, json=body) as r:
        assert r.status_code == 200
        events = sse_events(r)
        name, created = await anext(events)
        assert name == "response.created"
    # the client went away before the answer (leaving the block closed the connection)
    release.set()
    response_id = created["response"]["id"]
    thread_id = created["response"]["conversation"]["id"]
    for _ in range(200):
        run = await client.get(f"/runs/{response_id}", headers=ALICE)
        if run.json()["status"] == "completed":
            break
        await asyncio.sleep(0.05)
    assert run.json()["status"] == "completed", run.text
    retry = await client.post(
        "/v1/responses", headers={**ALICE, **key}, json={**body, "stream": False}
    )
    assert retry.status_code == 200, retry.text
    assert retry.json()["id"] == response_id
    assert retry.json()["output"][-1]["content"][0]["text"] == "the answer, once"
    assert len(provider.calls) == 2  # the tool step and the answer: no third call
    stored = await transcript(client, thread_id)
    assert [(m["seq"], m["role"]) for m in stored] == [(1, "user"), (2, "assistant")]


async def test_six_keyed_v1_requests_at_once_without_a_conversation_make_one_turn(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    provider = ScriptedProvider([reply("charged once")])
    client = await open_client(stack, openai_app(make_module(model=provider)))
    body: dict[str, Any] = {"model": "helper", "input": "charge it"}
    answers = await asyncio.gather(
        *(
            client.post(
                "/v1/responses",
                headers={**ALICE, "Idempotency-Key": "once-1"},
                json={**body, "stream": bool(i % 2)},
            )
            for i in range(6)
        )
    )
    ids = set()
    for r in answers:
        assert r.status_code == 200, r.text
        if r.headers["content-type"].startswith("text/event-stream"):
            ids.add(parse_sse(r.text)[-1][1]["response"]["id"])
        else:
            ids.add(r.json()["id"])
    assert len(ids) == 1 and len(provider.calls) == 1
    assert await _count(sql_store, threads) == 1
    assert await _count(sql_store, messages) == 2


@pytest.mark.xfail(
    strict=True,
    reason="a keyed /v1 retry after conversations.delete re-creates the deleted conversation "
    "under the same id and calls (and bills) the model again (responses.py:210, "
    "_keyed_thread)",
)
async def test_a_keyed_v1_retry_after_the_conversation_was_deleted_runs_nothing_again(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([reply("first")], default=reply("second charge"))
    client = await open_client(stack, openai_app(make_module(model=provider)))
    key = {**ALICE, "Idempotency-Key": "erased-1"}
    body = {"model": "helper", "input": "do it once"}
    first = await client.post("/v1/responses", headers=key, json=body)
    assert first.status_code == 200, first.text
    conversation = first.json()["conversation"]["id"]
    deleted = await client.delete(f"/v1/conversations/{conversation}", headers=ALICE)
    assert deleted.status_code == 200, deleted.text

    retry = await client.post("/v1/responses", headers=key, json=body)

    assert len(provider.calls) == 1, "the model was called again for a key already answered"
    _openai_error(retry, 410, "answer_erased")
    gone = await client.get(f"/v1/conversations/{conversation}", headers=ALICE)
    _openai_error(gone, 404, "thread_not_found")


# --- search_history with hostile arguments, through HTTP -----------------------------------


@agent(name="seeker", system_prompt="You look things up.", history={"max_messages": 2}, search=True)
class SeekerAgent:
    pass


HOSTILE_SEARCHES: list[tuple[dict[str, Any], bool]] = [
    ({"query": '"'}, False),
    ({"query": "*"}, False),
    ({"query": "NEAR(order number, 2)"}, False),
    ({"query": '-order" OR * : ^ ( ) {col}: AND NOT'}, False),
    ({"query": "'; DROP TABLE messages; --"}, False),
    ({"query": "\\' \\\\ E'\\x41' $$ $1 :q"}, False),
    ({"query": "order\x00number"}, False),
    ({"query": "order\ud800number"}, False),
    ({"query": "order " * 20_000}, False),
    ({"query": ""}, False),
    ({"query": "order", "k": 10**30}, False),
    ({"query": "order", "k": -1}, True),
    ({"query": "order", "k": 0}, True),
    ({"query": "order", "k": "5"}, True),
    ({"query": "order", "k": 2.5}, True),
    ({"query": "order", "k": True}, True),
    ({"query": 5}, True),
    ({"query": ["order"]}, True),
    ({"query": "order", "extra": 1}, True),
    ({}, True),
]
"""Arguments a model may send, and whether the tool answers them with an error the model
reads (invalid arguments) rather than results (syntax, SQL, NUL, sizes: just not words)."""


@pytest.mark.parametrize(
    ("arguments", "refused"), HOSTILE_SEARCHES, ids=range(len(HOSTILE_SEARCHES))
)
async def test_a_hostile_search_history_call_is_a_tool_result_and_the_turn_completes(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    arguments: Mapping[str, Any],
    refused: bool,
) -> None:
    call = ToolCall(id="s1", name=SEARCH_TOOL_NAME, arguments=dict(arguments))
    provider = ScriptedProvider(
        [reply("noted"), reply(tool_calls=[call]), reply("searched")], default=reply("more")
    )
    module = make_module(model=provider, agents=[SeekerAgent], history={"max_messages": 2})
    client = await open_client(stack, openai_app(module))
    thread_id = await new_thread(client, agent_name="seeker")
    assert (
        await post(client, thread_id, "my order number is 41234", agent_name="seeker")
    ).is_success
    r = await post(client, thread_id, "what was my order number?", agent_name="seeker")
    assert r.status_code == 200, r.text
    result = r.json()["message"]["tool_results"][0]
    assert result["is_error"] is refused, result
    assert "search failed" not in result["content"]  # never the store's own error
    if not refused:
        found = json.loads(result["content"])
        assert set(found) == {"results", "omitted"}
        assert all(row["seq"] in (1, 2) for row in found["results"])
    assert _seqs(await transcript(client, thread_id)) == [1, 2, 3, 4]
    assert (await post(client, thread_id, "thanks", agent_name="seeker")).status_code == 200
