"""Idempotent turns: an `Idempotency-Key` makes `POST .../messages` and `POST /v1/responses` safe
to retry, on SQLite and PostgreSQL. A repeat (same actor, thread, key and body) is answered with
the first turn's stored answer and never calls the model; two concurrent requests with one key
make one turn, settled by the database's unique index, and both get its answer; another body
under the key is a 422, another actor's same key is another turn. And a client whose run another
process finished after its lease lapsed gets that answer, not 409 `lease_lost`.

Model calls are counted with `ScriptedProvider`: a call past its script is an AssertionError, so
a second turn would also show as a failed request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from openai import AsyncOpenAI

from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.durable import InlineRuntime
from bounded_agents.errors import ProviderTimeout
from bounded_agents.module import AgentModule
from bounded_agents.store.clock import db_now
from bounded_agents.store.memory import MemoryStore
from bounded_agents.store.schema import messages, runs
from bounded_agents.store.sql import SqlAgentStore
from bounded_agents.testing import Gate, ScriptedProvider, StreamingScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    BOB,
    SSE,
    HelperAgent,
    ModuleFactory,
    assert_error,
    http_settings,
    make_app,
    new_thread,
    open_client,
    parse_sse,
    serve_live,
    transcript,
)
from tests.http.test_openai_sdk import openai_app


def keyed(key: str, headers: Mapping[str, str] = ALICE) -> dict[str, str]:
    return {**headers, "Idempotency-Key": key}


async def post_keyed(
    client: httpx.AsyncClient,
    thread_id: str,
    content: str,
    key: str,
    headers: Mapping[str, str] = ALICE,
    extra: Mapping[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        f"/agents/helper/threads/{thread_id}/messages",
        headers={**keyed(key, headers), **(extra or {})},
        json={"content": content},
    )


async def keyed_runs(store: SqlAgentStore, key: str) -> list[Any]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(runs.c.id, runs.c.status).where(runs.c.idempotency_key == key)
        )
        return list(rows.all())


async def message_count(store: SqlAgentStore) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(messages))).scalar())


# --- the native route ------------------------------------------------------------------------


async def test_a_sequential_repeat_returns_the_stored_answer_without_a_model_call(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    provider = ScriptedProvider([reply("the only answer")])
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread_id = await new_thread(client)

    first = await post_keyed(client, thread_id, "hello", "key-1")
    again = await post_keyed(client, thread_id, "hello", "key-1")

    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()  # the same body: run id, message (seq too), report
    assert first.json()["message"]["content"] == "the only answer"
    assert len(provider.calls) == 1
    assert [m["role"] for m in await transcript(client, thread_id)] == ["user", "assistant"]
    assert [r.status for r in await keyed_runs(sql_store, "key-1")] == ["completed"]


async def test_a_repeat_over_sse_replays_the_answer_as_one_delta_and_done(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = StreamingScriptedProvider([reply("streamed once")])
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread_id = await new_thread(client)

    first = await post_keyed(client, thread_id, "hi", "key-sse", extra=SSE)
    again = await post_keyed(client, thread_id, "hi", "key-sse", extra=SSE)
    as_json = await post_keyed(client, thread_id, "hi", "key-sse")

    events = parse_sse(first.text)
    assert [e for e, _ in events][-1] == "done"
    replayed = parse_sse(again.text)
    assert replayed == [("delta", {"text": "streamed once"}), ("done", events[-1][1])]
    assert as_json.json() == events[-1][1]  # JSON or SSE, the same stored turn
    assert len(provider.calls) == 1


@pytest.mark.parametrize("per_process", [1, 3], ids=["two", "six"])
async def test_concurrent_posts_with_one_key_make_one_model_call_and_all_get_its_answer(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore, per_process: int
) -> None:
    """Two app modules (two processes' journals, each its own model, which answers once) on
    one database, every request sent at once: the unique index lets one run's row in; every
    other request waits for that run and answers its stored answer."""
    gates = [Gate(reply("answer from A")), Gate(reply("answer from B"))]
    providers = [ScriptedProvider([gate]) for gate in gates]
    clients = [
        await open_client(stack, make_app(make_module(model=provider))) for provider in providers
    ]
    thread_id = await new_thread(clients[0])

    requests = [c for c in clients for _ in range(per_process)]
    every = asyncio.gather(
        *(post_keyed(c, thread_id, "once, please", "key-race") for c in requests)
    )
    entered = [asyncio.ensure_future(g.entered.wait()) for g in gates]
    await asyncio.wait(entered, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0.5)  # the other requests reach their insert, and wait
    for gate in gates:
        gate.release.set()
    answers = await every
    for waiter in entered:
        waiter.cancel()

    assert [r.status_code for r in answers] == [200] * len(requests), [r.text for r in answers]
    assert all(r.json() == answers[0].json() for r in answers)
    assert sum(len(p.calls) for p in providers) == 1
    assert len(await keyed_runs(sql_store, "key-race")) == 1
    assert [m["role"] for m in await transcript(clients[0], thread_id)] == ["user", "assistant"]


async def test_a_repeat_while_the_first_runs_past_the_wait_is_409_turn_in_progress(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("slow answer"))
    provider = ScriptedProvider([gate])
    module = make_module(model=provider, settings=http_settings(idempotency_wait_seconds=0))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)

    first = asyncio.create_task(post_keyed(client, thread_id, "q", "key-slow"))
    await gate.reached()
    busy = assert_error(
        await post_keyed(client, thread_id, "q", "key-slow"), 409, "turn_in_progress"
    )
    gate.release.set()
    done = await first
    assert busy["run_id"] == done.json()["run_id"]
    again = await post_keyed(client, thread_id, "q", "key-slow")  # now it has ended
    assert again.json() == done.json()
    assert len(provider.calls) == 1


async def test_the_same_key_with_another_body_is_422_and_runs_nothing(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([reply("first")])
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread_id = await new_thread(client)
    await post_keyed(client, thread_id, "the question", "key-body")

    refused = await post_keyed(client, thread_id, "another question", "key-body")

    assert_error(refused, 422, "idempotency_key_reused")
    assert len(provider.calls) == 1
    assert len(await transcript(client, thread_id)) == 2


async def test_the_same_key_on_another_thread_or_of_another_actor_is_another_turn(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([reply("alice's"), reply("alice's other"), reply("bob's")])
    client = await open_client(stack, make_app(make_module(model=provider)))
    alices, alices_other = await new_thread(client), await new_thread(client)
    bobs = await new_thread(client, BOB)

    a = await post_keyed(client, alices, "q", "shared-key")
    a2 = await post_keyed(client, alices_other, "q", "shared-key")
    b = await post_keyed(client, bobs, "q", "shared-key", BOB)
    bob_on_alices = await post_keyed(client, alices, "q", "shared-key", BOB)

    assert [r.json()["message"]["content"] for r in (a, a2, b)] == [
        "alice's",
        "alice's other",
        "bob's",
    ]
    assert len({r.json()["run_id"] for r in (a, a2, b)}) == 3
    assert_error(bob_on_alices, 404, "thread_not_found")  # nothing of Alice's turn leaks
    assert len(provider.calls) == 3


async def test_a_failed_turn_is_answered_its_failure_again_without_a_model_call(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([ProviderTimeout("the model did not answer")])
    client = await open_client(stack, openai_app(make_module(model=provider)))
    thread_id = await new_thread(client)

    first = assert_error(await post_keyed(client, thread_id, "q", "key-f"), 502, "provider_timeout")
    again = assert_error(await post_keyed(client, thread_id, "q", "key-f"), 502, "provider_timeout")

    streamed = await post_keyed(client, thread_id, "q", "key-f", extra=SSE)
    on_v1 = await client.post(
        "/v1/responses",
        headers=keyed("key-f"),
        json={"conversation": thread_id, "input": "q"},
    )

    assert again == first  # code, message and run id
    assert parse_sse(streamed.text) == [("error", first)]
    assert on_v1.status_code == 422  # the key is the thread's, whichever route sends it
    assert on_v1.json()["error"]["code"] == "idempotency_key_reused"
    assert len(provider.calls) == 1


async def test_v1_a_streamed_repeat_of_a_failed_turn_names_the_first_response(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([ProviderTimeout("the model did not answer")])
    client = await open_client(stack, openai_app(make_module(model=provider)))
    body = {"model": "helper", "input": "q", "stream": True}

    first = parse_sse((await client.post("/v1/responses", headers=keyed("f"), json=body)).text)
    again = parse_sse((await client.post("/v1/responses", headers=keyed("f"), json=body)).text)

    assert [e for e, _ in again] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert again[0][1]["response"]["id"] == first[0][1]["response"]["id"]
    assert again[-1][1]["response"]["error"] == first[-1][1]["response"]["error"]
    assert len(provider.calls) == 1


async def test_a_repeat_is_answered_after_the_journal_is_pruned_and_the_quota_is_spent(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The key lives on the run's row, as long as its report: retention prunes only the
    journal. And a repeat of the turn that spent the quota still gets that turn's answer."""
    provider = ScriptedProvider([reply("costly", prompt_tokens=60, completion_tokens=60)])
    module = make_module(
        model=provider, quota=100, settings=http_settings(journal_retention_seconds=0)
    )
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    first = await post_keyed(client, thread_id, "q", "key-kept")
    assert first.status_code == 200
    assert await module.prune_journal() == 1
    assert_error(await post_keyed(client, thread_id, "q", "another key"), 429, "quota_exceeded")

    again = await post_keyed(client, thread_id, "q", "key-kept")

    assert again.status_code == 200 and again.json() == first.json()
    assert len(provider.calls) == 1


@pytest.mark.parametrize(
    ("key", "why"),
    [("k" * 256, "too long"), ("tab\there", "a control character"), ("caf\xe9", "not ASCII")],
)
async def test_a_bad_key_is_refused_in_each_routes_error_shape(
    stack: AsyncExitStack, make_module: ModuleFactory, key: str, why: str
) -> None:
    provider = ScriptedProvider([])
    module = make_module(model=provider)
    client = await open_client(stack, openai_app(module))
    thread_id = await new_thread(client)
    header = {"Idempotency-Key": key.encode("latin-1")}

    native = await client.post(
        f"/agents/helper/threads/{thread_id}/messages",
        headers={**ALICE, **header},  # type: ignore[dict-item]
        json={"content": "q"},
    )
    compat = await client.post(
        "/v1/responses",
        headers={**ALICE, **header},  # type: ignore[dict-item]
        json={"model": "helper", "input": "q"},
    )

    body = assert_error(native, 422, "validation_error")
    assert "Idempotency-Key" in body["error"]["message"], why
    assert compat.status_code == 400, compat.text
    assert compat.json()["error"]["code"] == "validation_error"
    assert compat.json()["error"]["param"] == "Idempotency-Key"
    assert provider.calls == []
    assert await transcript(client, thread_id) == []


# --- the lease lapse -------------------------------------------------------------------------


async def test_a_client_whose_run_another_process_finished_gets_that_answer_not_409(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """Process A stalls in its model call past the run's lease; process B's sweep takes the
    run over and finishes it. When A wakes, its journal refuses it (`LeaseLost`); its client
    is answered with what B stored."""
    stalled = Gate(reply("A's answer, never stored"))
    module_a = make_module(model=ScriptedProvider([stalled]))
    client = await open_client(stack, make_app(module_a))
    module_b = make_module(model=ScriptedProvider([reply("B's answer")]))
    thread_id = await new_thread(client)

    request = asyncio.create_task(
        client.post(
            f"/agents/helper/threads/{thread_id}/messages", headers=ALICE, json={"content": "q"}
        )
    )
    await stalled.reached()
    async with sql_store.engine.begin() as conn:  # A stops renewing: its lease lapses
        run_id = (
            await conn.execute(
                runs.update()
                .where(runs.c.thread_id == thread_id)
                .values(lease_expires_at=db_now(-1))
                .returning(runs.c.id)
            )
        ).scalar_one()
    assert await module_b.loop.runtime.claim_expired(10) == [run_id]
    taken = await module_b.loop.resume(run_id)
    stalled.release.set()  # A wakes up, and finds its run taken
    answer = await request

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["run_id"] == run_id
    assert body["message"]["content"] == "B's answer" == taken.message.content
    assert body["report"] == taken.report.model_dump(mode="json")
    assert [(m["role"], m["content"]) for m in await transcript(client, thread_id)] == [
        ("user", "q"),
        ("assistant", "B's answer"),
    ]


# --- /v1/responses ---------------------------------------------------------------------------


async def test_v1_a_repeat_without_a_conversation_answers_the_first_response(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """A keyed request that starts a new thread names it after the actor and the key: its
    retry finds that thread, and the key's run in it, instead of starting a second turn."""
    provider = ScriptedProvider([reply("once")])
    client = await open_client(stack, openai_app(make_module(model=provider)))
    body = {"model": "helper", "input": "hello"}

    first = await client.post("/v1/responses", headers=keyed("v1-key"), json=body)
    again = await client.post("/v1/responses", headers=keyed("v1-key"), json=body)
    streamed = await client.post(
        "/v1/responses", headers=keyed("v1-key"), json={**body, "stream": True}
    )
    other_body = await client.post(
        "/v1/responses", headers=keyed("v1-key"), json={**body, "input": "bye"}
    )

    assert first.status_code == again.status_code == 200, again.text
    one, two = first.json(), again.json()
    assert two["id"] == one["id"] and two["conversation"] == one["conversation"]
    assert two["output"] == one["output"] and two["usage"] == one["usage"]
    events = parse_sse(streamed.text)
    completed = events[-1][1]["response"]
    assert events[-1][0] == "response.completed"
    assert completed["id"] == one["id"]
    assert completed["output"][-1]["content"][0]["text"] == "once"
    assert other_body.status_code == 422
    assert other_body.json()["error"]["code"] == "idempotency_key_reused"
    assert len(provider.calls) == 1
    assert await message_count(sql_store) == 2


async def test_v1_another_actors_same_key_is_another_thread_and_turn(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([reply("for alice"), reply("for bob")])
    client = await open_client(stack, openai_app(make_module(model=provider)))
    body = {"model": "helper", "input": "hello"}

    alice = (await client.post("/v1/responses", headers=keyed("same"), json=body)).json()
    bob = (await client.post("/v1/responses", headers=keyed("same", BOB), json=body)).json()

    assert alice["output"][-1]["content"][0]["text"] == "for alice"
    assert bob["output"][-1]["content"][0]["text"] == "for bob"
    assert alice["conversation"] != bob["conversation"] and alice["id"] != bob["id"]
    seen = await client.get(f"/v1/responses/{alice['id']}", headers=BOB)
    assert seen.status_code == 404


async def test_v1_an_sdk_retry_after_a_timeout_gets_the_first_answer_from_one_model_call(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """The issue's case, with the official SDK: its request times out while the model still
    thinks, and it retries with the same Idempotency-Key (the SDK keeps a request's headers
    across its retries). The retry waits for the first turn and answers it."""

    async def slow(_request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(1.5)
        return reply("worth the wait")

    provider = ScriptedProvider([slow])
    module: AgentModule = make_module(model=provider)
    base_url = await serve_live(stack, openai_app(module)) + "/v1"
    sent: list[httpx.Request] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request)

    transport = httpx.AsyncClient(event_hooks={"request": [count]}, trust_env=False)
    async with (
        transport,
        AsyncOpenAI(
            base_url=base_url, api_key="key-a", max_retries=2, timeout=1.0, http_client=transport
        ) as sdk,
    ):
        response = await sdk.responses.create(
            model="helper", input="think hard", extra_headers={"Idempotency-Key": "sdk-retry"}
        )

    assert len(sent) >= 2  # the first request timed out, and the SDK sent it again
    assert {r.headers["Idempotency-Key"] for r in sent} == {"sdk-retry"}
    assert response.output_text == "worth the wait"
    assert len(provider.calls) == 1


# --- without a database ----------------------------------------------------------------------


async def test_in_process_runs_keep_keys_too(stack: AsyncExitStack) -> None:
    """`InlineRuntime` on `MemoryStore` (no SQL journal): a concurrent and a later repeat are
    answered the first turn's answer, from one model call."""
    gate = Gate(reply("in memory"))
    provider = ScriptedProvider([gate])
    module = AgentModule.for_root(
        store=MemoryStore(),
        journal=InlineRuntime(),
        model=provider,
        agents=[HelperAgent],
        history={"max_messages": 20},
        settings=http_settings(),
    )
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)

    first = asyncio.create_task(post_keyed(client, thread_id, "q", "mem-key"))
    await gate.reached()
    second = asyncio.create_task(post_keyed(client, thread_id, "q", "mem-key"))
    await asyncio.sleep(0.2)
    gate.release.set()
    answers = [await first, await second, await post_keyed(client, thread_id, "q", "mem-key")]

    assert [r.status_code for r in answers] == [200, 200, 200]
    assert answers[0].json() == answers[1].json() == answers[2].json()
    assert len(provider.calls) == 1


async def test_a_keyed_retry_naming_the_same_conversation_otherwise_gets_the_first_answer(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """`conversation` is "The conversation that this response belongs to", a string id or
    `{"id": ...}` (OpenAI's `responses.create`); the server reads both, and any case of the
    UUID, as one thread. The fingerprint hashed the raw field, so a retry that spells the same
    conversation otherwise was refused 422 `idempotency_key_reused` instead of answered
    (docs/reliability.md: the fingerprint is of "the body's validated fields", so that "the
    same request sent with other whitespace or key order is the same request"). Attack round
    10."""
    c = await open_client(stack, openai_app(make_module()))
    conversation = (await c.post("/v1/conversations", headers=ALICE, json={})).json()["id"]
    keyed = {**ALICE, "Idempotency-Key": "same-conversation"}
    first = await c.post(
        "/v1/responses", headers=keyed, json={"input": "hi", "conversation": conversation}
    )
    assert first.status_code == 200, first.text
    for spelled in ({"id": conversation}, conversation.upper()):
        retry = await c.post(
            "/v1/responses", headers=keyed, json={"input": "hi", "conversation": spelled}
        )
        assert retry.status_code == 200, (spelled, retry.text)
        assert retry.json()["id"] == first.json()["id"]


async def test_a_keyed_retry_naming_its_previous_response_in_capitals_gets_the_first_answer(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """`previous_response_id` is a run's id, taken in any case: a retry that spells it in
    capitals is the same request (review of attack round 10's conversation fix)."""
    c = await open_client(stack, openai_app(make_module()))
    before = await c.post("/v1/responses", headers=ALICE, json={"model": "helper", "input": "a"})
    previous = before.json()["id"]
    keyed = {**ALICE, "Idempotency-Key": "same-previous"}
    first = await c.post(
        "/v1/responses", headers=keyed, json={"input": "b", "previous_response_id": previous}
    )
    assert first.status_code == 200, first.text
    retry = await c.post(
        "/v1/responses",
        headers=keyed,
        json={"input": "b", "previous_response_id": previous.upper()},
    )
    assert retry.status_code == 200, retry.text
    assert retry.json()["id"] == first.json()["id"]
