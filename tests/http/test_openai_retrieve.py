"""`GET /v1/responses/{id}` and keyed retries of `POST /v1/responses` answer the Response the
create call returned (OpenAI: `responses.retrieve` returns the same Response object). Attack
round 10: the retrieve lost `previous_response_id`, and `created_at` was the app's clock on
create but the run's row on a retrieve or a keyed repeat (whole seconds on SQLite)."""

from __future__ import annotations

from contextlib import AsyncExitStack

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
