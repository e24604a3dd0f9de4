"""`GET /v1/responses/{id}` and keyed retries of `POST /v1/responses` answer the Response the
create call returned (OpenAI: `responses.retrieve` returns the same Response object). Attack
round 10: the retrieve lost `previous_response_id`, and `created_at` was the app's clock on
create but the run's row on a retrieve or a keyed repeat (whole seconds on SQLite)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from bounded_agents.providers import EchoModel
from tests.http.conftest import ALICE, ModuleFactory, open_client, parse_sse
from tests.http.test_openai_sdk import openai_app


async def test_retrieve_keeps_previous_response_id(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    c = await open_client(stack, openai_app(make_module()))
    first = await c.post("/v1/responses", headers=ALICE, json={"model": "helper", "input": "one"})
    assert first.status_code == 200, first.text
    second = await c.post(
        "/v1/responses",
        headers=ALICE,
        json={"previous_response_id": first.json()["id"], "input": "two"},
    )
    assert second.status_code == 200, second.text
    assert second.json()["previous_response_id"] == first.json()["id"]
    streamed = await c.post(
        "/v1/responses",
        headers=ALICE,
        json={"previous_response_id": second.json()["id"], "input": "three", "stream": True},
    )
    completed = next(d for e, d in parse_sse(streamed.text) if e == "response.completed")
    assert completed["response"]["previous_response_id"] == second.json()["id"]

    got = await c.get(f"/v1/responses/{second.json()['id']}", headers=ALICE)
    assert got.status_code == 200, got.text
    assert got.json()["previous_response_id"] == first.json()["id"], got.json()
    got = await c.get(f"/v1/responses/{completed['response']['id']}", headers=ALICE)
    assert got.json()["previous_response_id"] == second.json()["id"], got.json()


async def test_created_at_is_one_value_for_create_retrieve_and_keyed_retry(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    c = await open_client(stack, openai_app(make_module()))
    keyed = {**ALICE, "Idempotency-Key": "created-at-1"}
    body = {"model": "helper", "input": "when?"}
    created = await c.post("/v1/responses", headers=keyed, json=body)
    assert created.status_code == 200, created.text
    retried = await c.post("/v1/responses", headers=keyed, json=body)
    assert retried.status_code == 200, retried.text
    got = await c.get(f"/v1/responses/{created.json()['id']}", headers=ALICE)
    stamps = {
        "create": created.json()["created_at"],
        "keyed retry": retried.json()["created_at"],
        "retrieve": got.json()["created_at"],
    }
    assert len(set(stamps.values())) == 1, stamps
    # and the whole keyed repeat is the first Response (docs/reliability.md, "Idempotency keys")
    assert retried.json() == created.json()


async def test_chained_creates_racing_on_one_thread_keep_one_turn_and_its_chain(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Six creates naming the same previous response at once (one thread): a turn runs, the
    others are 409 `thread_busy`, and every turn's retrieve keeps the chain and the date."""
    c = await open_client(stack, openai_app(make_module(model=EchoModel(delay=0.2))))
    first = await c.post("/v1/responses", headers=ALICE, json={"model": "helper", "input": "a"})
    prev = first.json()["id"]
    bodies = [{"input": f"b{i}", "previous_response_id": prev} for i in range(6)]
    got = await asyncio.gather(*(c.post("/v1/responses", headers=ALICE, json=b) for b in bodies))
    statuses = sorted(r.status_code for r in got)
    for r in got:
        if r.status_code == 200:
            again = await c.get(f"/v1/responses/{r.json()['id']}", headers=ALICE)
            assert again.json()["previous_response_id"] == prev
            assert again.json()["created_at"] == r.json()["created_at"]
    # One turn at a time; a create that comes after the first has ended (a stalled machine)
    # runs a turn of its own, so the count of 200s is at least one, not exactly one.
    assert statuses[0] == 200 and set(statuses) <= {200, 409}, statuses
    assert {r.json()["error"]["code"] for r in got if r.status_code == 409} <= {"thread_busy"}
