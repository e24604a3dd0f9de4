"""What a client is answered about a run an erasure reached, on SQLite and PostgreSQL (issue 40,
breaks 3, 8 and 9): a keyed retry of a completed run whose answer was erased is told so at once
(410 `answer_erased`, never 409 `turn_in_progress`, never `x-should-retry: true`); a turn whose
run an erasure failed is a 410 `journal_erased`, not a 500; `input_items` of a run whose user
message was erased is 410 `journal_pruned`, as docs/openai-api.md promises; a keyed `/v1`
retry after its conversation was deleted is a 410 too, not a second turn in a resurrected one."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack

import pytest
import sqlalchemy as sa

from bounded_agents.store.clock import db_now
from bounded_agents.store.schema import erased_threads, runs, threads
from bounded_agents.store.sql import SqlAgentStore
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    SSE,
    ModuleFactory,
    assert_error,
    http_settings,
    make_app,
    new_thread,
    open_client,
    transcript,
)
from tests.http.test_idempotency import keyed, post_keyed
from tests.http.test_openai_sdk import openai_app

WAIT = 20.0
"""AGENT_IDEMPOTENCY_WAIT_SECONDS here: a repeat that waited for it would take this long. Long
enough that half of it (the bound) outlasts a stall of CI's shared machine (2.75 s seen)."""


async def test_a_keyed_repeat_after_the_answer_was_erased_is_410_answer_erased_at_once(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([reply("the answer")])
    module = make_module(model=provider, settings=http_settings(idempotency_wait_seconds=WAIT))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    first = await post_keyed(client, thread_id, "q", "key-erased")
    assert first.status_code == 200, first.text
    seq = first.json()["message"]["seq"]
    erased = await client.delete(f"/threads/{thread_id}/messages/{seq}", headers=ALICE)
    assert erased.status_code == 204, erased.text

    started = time.monotonic()
    again = await post_keyed(client, thread_id, "q", "key-erased")
    took = time.monotonic() - started

    body = assert_error(again, 410, "answer_erased")
    assert body["run_id"] == first.json()["run_id"]
    assert took < WAIT / 2, took
    streamed = await post_keyed(client, thread_id, "q", "key-erased", extra=SSE)
    assert assert_error(streamed, 410, "answer_erased") == body  # over SSE: the same, at once
    assert len(provider.calls) == 1
    assert [m["role"] for m in await transcript(client, thread_id)] == ["user"]


async def test_v1_a_keyed_repeat_after_the_answer_was_erased_is_410_and_not_retried(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([reply("the answer")])
    module = make_module(model=provider, settings=http_settings(idempotency_wait_seconds=WAIT))
    client = await open_client(stack, openai_app(module))
    body = {"model": "helper", "input": "q"}
    first = await client.post("/v1/responses", headers=keyed("v1-erased"), json=body)
    assert first.status_code == 200, first.text
    conversation = first.json()["conversation"]["id"]
    items = (await client.get(f"/v1/conversations/{conversation}/items", headers=ALICE)).json()
    answer = next(i["id"] for i in items["data"] if i.get("role") == "assistant")
    deleted = await client.delete(f"/v1/conversations/{conversation}/items/{answer}", headers=ALICE)
    assert deleted.status_code == 200, deleted.text

    started = time.monotonic()
    again = await client.post("/v1/responses", headers=keyed("v1-erased"), json=body)
    took = time.monotonic() - started

    assert again.status_code == 410, again.text
    error = again.json()["error"]
    assert (error["code"], error["type"]) == ("answer_erased", "invalid_request_error")
    assert again.json()["response_id"] == first.json()["id"]
    assert again.headers["x-should-retry"] == "false"
    assert took < WAIT / 2, took
    assert len(provider.calls) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_v1_a_keyed_repeat_after_its_conversation_was_deleted_is_410_and_runs_nothing(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore, stream: bool
) -> None:
    """A keyed `/v1/responses` without a conversation starts the thread named after the actor
    and the key; its retry after `DELETE /v1/conversations/{id}` created that thread again, with
    the request in it, and called (and billed) the model a second time. The erased thread's
    id is kept (`erased_threads`), so the retry is told at once that the answer is gone."""
    provider = ScriptedProvider([reply("first")], default=reply("second charge"))
    module = make_module(model=provider, settings=http_settings(idempotency_wait_seconds=WAIT))
    client = await open_client(stack, openai_app(module))
    body = {"model": "helper", "input": "do it once"}
    first = await client.post("/v1/responses", headers=keyed("v1-deleted"), json=body)
    assert first.status_code == 200, first.text
    conversation = first.json()["conversation"]["id"]
    deleted = await client.delete(f"/v1/conversations/{conversation}", headers=ALICE)
    assert deleted.status_code == 200, deleted.text

    again = await client.post(
        "/v1/responses", headers=keyed("v1-deleted"), json={**body, "stream": stream}
    )

    assert again.status_code == 410, again.text
    error = again.json()["error"]
    assert (error["code"], error["type"]) == ("answer_erased", "invalid_request_error")
    assert "\n" not in error["message"]
    assert again.headers["x-should-retry"] == "false"
    assert len(provider.calls) == 1, "the model was called again for a key already answered"
    gone = await client.get(f"/v1/conversations/{conversation}", headers=ALICE)
    assert gone.status_code == 404, gone.text
    async with sql_store.engine.connect() as conn:
        threads_left = await conn.scalar(sa.select(sa.func.count()).select_from(threads))
    assert threads_left == 0, "the deleted conversation was created again"
    other = await client.post("/v1/responses", headers=keyed("v1-new-key"), json=body)
    assert other.status_code == 200, other.text  # a new key is a new turn


async def test_v1_a_keyed_retry_past_the_erased_ids_retention_starts_the_conversation_again(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """The erased thread's id and owner are kept AGENT_ERASED_THREAD_RETENTION_SECONDS, then the
    module's sweep (`prune_erased`) deletes them: the retry that late is a new request, as the
    settings say. Within the retention the same sweep keeps them (the retry is 410)."""
    provider = ScriptedProvider([reply("first"), reply("much later")])
    module = make_module(
        model=provider, settings=http_settings(erased_thread_retention_seconds=3_600)
    )
    client = await open_client(stack, openai_app(module))
    body = {"model": "helper", "input": "do it once"}
    first = await client.post("/v1/responses", headers=keyed("v1-late"), json=body)
    conversation = first.json()["conversation"]["id"]
    deleted = await client.delete(f"/v1/conversations/{conversation}", headers=ALICE)
    assert deleted.status_code == 200, deleted.text

    assert await module.prune_erased() == 0, "within its retention"
    refused = await client.post("/v1/responses", headers=keyed("v1-late"), json=body)
    assert refused.status_code == 410, refused.text
    async with sql_store.engine.begin() as conn:
        await conn.execute(sa.update(erased_threads).values(erased_at=db_now(-3_601)))
    assert await module.prune_erased() == 1
    async with sql_store.engine.connect() as conn:
        assert await conn.scalar(sa.select(sa.func.count()).select_from(erased_threads)) == 0

    late = await client.post("/v1/responses", headers=keyed("v1-late"), json=body)

    assert late.status_code == 200, late.text
    assert late.json()["conversation"]["id"] == conversation
    assert late.json()["output"][0]["content"][0]["text"] == "much later"
    assert len(provider.calls) == 2


async def test_the_periodic_sweep_forgets_erased_ids_past_their_retention(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """The lifespan's sweep (every AGENT_SWEEP_SECONDS) calls `prune_erased`: with a retention
    of 0 the id of a deleted conversation is gone within a few sweeps, without a call by hand."""
    module = make_module(
        model=ScriptedProvider([reply("first")]),
        settings=http_settings(sweep_seconds=0.1, erased_thread_retention_seconds=0),
    )
    client = await open_client(stack, openai_app(module))
    first = await client.post(
        "/v1/responses", headers=keyed("swept"), json={"model": "helper", "input": "hi"}
    )
    conversation = first.json()["conversation"]["id"]
    deleted = await client.delete(f"/v1/conversations/{conversation}", headers=ALICE)
    assert deleted.status_code == 200, deleted.text

    async def kept() -> int:
        async with sql_store.engine.connect() as conn:
            count = await conn.scalar(sa.select(sa.func.count()).select_from(erased_threads))
        return int(count or 0)

    for _ in range(200):  # 10 s at most
        if not await kept():
            break
        await asyncio.sleep(0.05)
    assert await kept() == 0, "no sweep forgot the erased id"


@pytest.mark.parametrize("api", ["native", "v1"])
async def test_a_turn_whose_run_an_erasure_failed_is_410_journal_erased_without_a_traceback(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    caplog: pytest.LogCaptureFixture,
    api: str,
) -> None:
    """The turn stalls in its model call past its lease; an erasure of its thread's message
    fails the lapsed run (`journal_erased`); the turn wakes and its client is told why."""
    stalled = Gate(reply("never stored"))
    module = make_module(model=ScriptedProvider([stalled]))
    client = await open_client(stack, openai_app(module) if api == "v1" else make_app(module))
    thread_id = await new_thread(client)
    if api == "v1":
        send = client.post(
            "/v1/responses",
            headers=ALICE,
            json={"model": "helper", "input": "q", "conversation": thread_id},
        )
    else:
        send = client.post(
            f"/agents/helper/threads/{thread_id}/messages", headers=ALICE, json={"content": "q"}
        )
    request = asyncio.create_task(send)
    await stalled.reached()
    async with sql_store.engine.begin() as conn:  # the turn stops renewing: its lease lapses
        await conn.execute(
            runs.update().where(runs.c.thread_id == thread_id).values(lease_expires_at=db_now(-1))
        )
    erased = await client.delete(f"/threads/{thread_id}/messages/1", headers=ALICE)
    assert erased.status_code == 204, erased.text
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        stalled.release.set()
        answer = await request

    assert answer.status_code == 410, answer.text
    if api == "v1":
        assert answer.json()["error"]["code"] == "journal_erased"
        assert answer.headers["x-should-retry"] == "false"
    else:
        assert_error(answer, 410, "journal_erased")
        assert "erasure" in answer.json()["error"]["message"]
    assert [r for r in caplog.records if r.exc_info] == []


async def test_input_items_of_a_run_whose_user_message_was_erased_are_410_journal_pruned(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, openai_app(make_module()))
    first = await client.post(
        "/v1/responses", headers=ALICE, json={"model": "helper", "input": "a"}
    )
    conversation = first.json()["conversation"]["id"]
    second = await client.post(
        "/v1/responses",
        headers=ALICE,
        json={"model": "helper", "input": "b", "conversation": conversation},
    )
    assert second.status_code == 200, second.text
    erased = await client.delete(f"/threads/{conversation}/messages/1", headers=ALICE)
    assert erased.status_code == 204, erased.text

    for response in (first, second):  # the erased message's run, and another run of the thread
        r = await client.get(f"/v1/responses/{response.json()['id']}/input_items", headers=ALICE)
        assert r.status_code == 410, r.text
        assert r.json()["error"]["code"] == "journal_pruned"
