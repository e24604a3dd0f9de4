"""A `/v1/responses` request without `conversation` or `previous_response_id` refused for a
spent quota (429 `quota_exceeded`) stores nothing. Found by attack: it created its thread before
the turn checked the quota, so every refused request of an actor over quota stored one more
empty conversation, listed in the inspector and kept forever."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from bounded_agents.http.openai import responses
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ALICE, ModuleFactory, open_client
from tests.http.test_openai_sdk import openai_app


@pytest.mark.parametrize("stream", [False, True])
async def test_a_v1_response_refused_for_a_spent_quota_leaves_no_new_conversation(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore, stream: bool
) -> None:
    client = await open_client(stack, openai_app(make_module(quota=10)))
    spent = await client.post(
        "/v1/responses", headers=ALICE, json={"model": "helper", "input": "spend the quota"}
    )
    assert spent.status_code == 200, spent.text
    threads_before = await sql_store.list_threads("alice", limit=100)

    for _ in range(5):
        refused = await client.post(
            "/v1/responses",
            headers=ALICE,
            json={"model": "helper", "input": "one more", "stream": stream},
        )
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "quota_exceeded"

    threads_after = await sql_store.list_threads("alice", limit=100)
    assert len(threads_after) == len(threads_before), (
        f"{len(threads_after) - len(threads_before)} empty conversations were stored by "
        "5 refused requests"
    )


async def test_a_keyed_v1_response_over_quota_makes_no_conversation_but_repeats_its_answer(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """With an Idempotency-Key: a key that has answered is answered again over quota (its
    retry is no new turn); a fresh key is refused, and its conversation is not made."""
    client = await open_client(stack, openai_app(make_module(quota=10)))
    body = {"model": "helper", "input": "spend the quota"}
    key = {**ALICE, "Idempotency-Key": "first-key"}
    spent = await client.post("/v1/responses", headers=key, json=body)
    assert spent.status_code == 200, spent.text
    threads_before = await sql_store.list_threads("alice", limit=100)

    again = await client.post("/v1/responses", headers=key, json=body)
    fresh = await client.post(
        "/v1/responses", headers={**ALICE, "Idempotency-Key": "fresh-key"}, json=body
    )

    assert again.status_code == 200 and again.json()["id"] == spent.json()["id"], again.text
    assert fresh.status_code == 429 and fresh.json()["error"]["code"] == "quota_exceeded"
    assert len(await sql_store.list_threads("alice", limit=100)) == len(threads_before)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_keyed_v1_retry_over_quota_after_its_conversation_was_deleted_is_410_not_429(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore, stream: bool
) -> None:
    """The key's turn ran and its conversation was deleted: its retry is owed 410
    `answer_erased` (no retry can answer it) whether or not the actor is over quota. It was a
    429 `quota_exceeded` over quota, which tells a client to wait for a quota that would never
    bring the answer back. Nothing is made either way."""
    client = await open_client(stack, openai_app(make_module(quota=10)))
    body = {"model": "helper", "input": "spend the quota"}
    key = {**ALICE, "Idempotency-Key": "deleted-key"}
    spent = await client.post("/v1/responses", headers=key, json=body)
    assert spent.status_code == 200, spent.text
    conversation = spent.json()["conversation"]["id"]
    deleted = await client.delete(f"/v1/conversations/{conversation}", headers=ALICE)
    assert deleted.status_code == 200, deleted.text

    again = await client.post("/v1/responses", headers=key, json={**body, "stream": stream})
    fresh = await client.post(
        "/v1/responses", headers={**ALICE, "Idempotency-Key": "never-used"}, json=body
    )

    assert again.status_code == 410, again.text
    assert again.json()["error"]["code"] == "answer_erased"
    assert again.headers["x-should-retry"] == "false"
    assert fresh.status_code == 429 and fresh.json()["error"]["code"] == "quota_exceeded"
    assert await sql_store.list_threads("alice", limit=100) == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_keyed_v1_retry_whose_conversation_is_deleted_before_its_turn_is_410(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    """Found by attack (3 of 15 rounds): a keyed retry that found its conversation, which was
    deleted before its turn began, got 404 `thread_not_found` naming a `conversation` it
    never sent; a retry after the deletion gets 410 `answer_erased`, and so does this one."""
    client = await open_client(stack, openai_app(make_module()))
    body = {"model": "helper", "input": "hello", "stream": stream}
    key = {**ALICE, "Idempotency-Key": "raced-key"}
    first = await client.post("/v1/responses", headers=key, json={**body, "stream": False})
    assert first.status_code == 200, first.text
    conversation = first.json()["conversation"]["id"]
    found = responses._keyed_thread

    async def found_then_deleted(*args: object, **kwargs: object) -> object:
        thread = await found(*args, **kwargs)  # type: ignore[arg-type]
        deleted = await client.delete(f"/v1/conversations/{conversation}", headers=ALICE)
        assert deleted.status_code == 200, deleted.text
        return thread

    monkeypatch.setattr(responses, "_keyed_thread", found_then_deleted)
    again = await client.post("/v1/responses", headers=key, json=body)

    assert again.status_code == 410, again.text
    assert again.json()["error"]["code"] == "answer_erased"
    assert again.headers.get("x-should-retry") == "false"
    assert await sql_store.get_thread_info(conversation) is None  # nothing made again
