"""Races on one thread, through HTTP, on SQLite and PostgreSQL: an erasure racing a turn, posts
racing one turn, an erasure during a stream, a `/v1` stream its client abandoned and then
retried by key, keyed `/v1` requests racing to start one conversation. Each outcome a client
can get is named and checked; none is a 500, a second turn, or a row left without its thread.

Written by an outside attack (every one held); they wait on gates and on the database's own
ordering, never on a sleep, so a loaded machine slows them and changes no outcome."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import httpx
import sqlalchemy as sa

from bounded_agents.core.messages import ToolCall
from bounded_agents.registry import agent, tool
from bounded_agents.store.schema import messages, runs, threads
from bounded_agents.store.sql import SqlAgentStore
from bounded_agents.testing import Gate, ScriptedProvider, StreamingScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    SSE,
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
from tests.http.test_openai_sdk import openai_app


async def _count(store: SqlAgentStore, table: sa.Table, where: Any = None) -> int:
    query = sa.select(sa.func.count()).select_from(table)
    if where is not None:
        query = query.where(where)
    async with store.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


def _seqs(messages_: list[dict[str, Any]]) -> list[int]:
    return [int(m["seq"]) for m in messages_]


# --- races on one thread -------------------------------------------------------------------


async def test_a_thread_erasure_racing_a_turn_answers_both_cleanly_and_leaves_no_orphans(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """Either the turn wins (200, the erasure 409 `thread_busy`, the thread whole) or the
    erasure does (204, nothing of the thread left), the turn then refused (404) or, when it
    ran whole before the erasure took the thread, answered (200) and erased with the rest
    (seen on Citus, where the erasure's first read is slower): never a 500, never a message
    or run row without its thread."""
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
            if turn.status_code != 200:
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


async def test_keyed_repeats_sharing_one_poll_are_answered_then_the_erased_thread_is_404(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """Twenty repeats of one Idempotency-Key wait on its running turn (one shared poll of the
    run, `bounded_agents.outcome`) while the thread's erasure is refused as busy; once the
    turn answers, every repeat is that answer (same run, same text); the thread erased, a late
    repeat is 404 `thread_not_found` (natively the request names the thread; `/v1`'s
    conversation-less keys are the 410 case): never a 500, a second turn, or a waiter left
    hanging."""
    gate = Gate(reply("the one answer"))
    client = await open_client(
        stack, openai_app(make_module(model=ScriptedProvider([gate], default=reply("again"))))
    )
    thread_id = await new_thread(client)
    keyed = {**ALICE, "Idempotency-Key": "storm-1"}
    first = asyncio.create_task(post(client, thread_id, "question", keyed))
    await gate.reached()
    repeats = [asyncio.create_task(post(client, thread_id, "question", keyed)) for _ in range(20)]
    busy = await client.delete(f"/threads/{thread_id}", headers=ALICE)
    assert_error(busy, 409, "thread_busy")
    gate.release.set()
    answered = [await first, *[await r for r in repeats]]
    assert {r.status_code for r in answered} == {200}, [r.text for r in answered]
    assert len({r.json()["run_id"] for r in answered}) == 1
    assert {r.json()["message"]["content"] for r in answered} == {"the one answer"}
    assert await _count(sql_store, runs, runs.c.thread_id == thread_id) == 1
    assert (await client.delete(f"/threads/{thread_id}", headers=ALICE)).status_code == 204
    late = await post(client, thread_id, "question", keyed)
    assert_error(late, 404, "thread_not_found")  # natively the key names a thread that is gone
    assert await _count(sql_store, runs, runs.c.thread_id == thread_id) == 0
