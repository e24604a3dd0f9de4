"""Every thread and run belongs to its actor: another actor gets exactly what a nonexistent id
gets (404), and no actor gets 401 — on every route that takes an id."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from tests.http.conftest import ALICE, BOB, assert_error, new_thread, post

NO_KEY: Mapping[str, str] = {}
WRONG_KEY = {"Authorization": "Bearer key-c"}
NOT_BEARER = {"Authorization": "Basic a2V5LWE6"}


async def _call(
    client: httpx.AsyncClient, route: str, thread_id: str, run_id: str, headers: Mapping[str, str]
) -> httpx.Response:
    if route == "thread":
        return await client.get(f"/threads/{thread_id}", headers=headers)
    if route == "messages":
        return await client.get(f"/threads/{thread_id}/messages", headers=headers)
    if route == "window":
        return await client.get(f"/threads/{thread_id}/window", headers=headers)
    if route == "post":
        return await post(client, thread_id, "let me in", headers=headers)
    if route == "run":
        return await client.get(f"/runs/{run_id}", headers=headers)
    raise AssertionError(route)


ROUTES = ["thread", "messages", "window", "post", "run"]


def _without_ids(body: dict[str, Any], *ids: str) -> dict[str, Any]:
    message = body["error"]["message"]
    for i in ids:
        message = message.replace(i, "<id>")
    return {**body, "error": {**body["error"], "message": message}}


@pytest.fixture
async def alices(client: httpx.AsyncClient) -> tuple[str, str]:
    """Alice's thread with one answered turn, and that turn's run id."""
    thread_id = await new_thread(client, ALICE)
    r = await post(client, thread_id, "hello")
    assert r.status_code == 200
    return thread_id, str(r.json()["run_id"])


@pytest.mark.parametrize("route", ROUTES)
async def test_another_actor_gets_the_same_404_as_a_nonexistent_id(
    client: httpx.AsyncClient, alices: tuple[str, str], route: str
) -> None:
    thread_id, run_id = alices
    code = "run_not_found" if route == "run" else "thread_not_found"
    as_bob = assert_error(await _call(client, route, thread_id, run_id, BOB), 404, code)
    other_thread, other_run = str(uuid.uuid4()), str(uuid.uuid4())
    missing = assert_error(await _call(client, route, other_thread, other_run, BOB), 404, code)
    assert _without_ids(as_bob, thread_id, run_id) == _without_ids(missing, other_thread, other_run)
    # and the owner still gets through
    owner = await _call(client, route, thread_id, run_id, ALICE)
    assert owner.status_code == 200, owner.text


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("headers", [NO_KEY, WRONG_KEY, NOT_BEARER], ids=["none", "wrong", "basic"])
async def test_no_actor_gets_401(
    client: httpx.AsyncClient, alices: tuple[str, str], route: str, headers: Mapping[str, str]
) -> None:
    thread_id, run_id = alices
    r = await _call(client, route, thread_id, run_id, headers)
    assert_error(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"
    # 401 comes first: it tells nothing about whether the id exists
    missing = await _call(client, route, str(uuid.uuid4()), str(uuid.uuid4()), headers)
    assert_error(missing, 401, "unauthorized")


async def test_creating_a_thread_needs_an_actor(client: httpx.AsyncClient) -> None:
    assert_error(await client.post("/agents/helper/threads", json={}), 401, "unauthorized")
    assert_error(await client.post("/agents/nobody/threads", json={}), 401, "unauthorized")


async def test_bobs_refused_post_stores_nothing_in_alices_thread(
    client: httpx.AsyncClient, alices: tuple[str, str]
) -> None:
    thread_id, _ = alices
    assert_error(await post(client, thread_id, "sneaky", headers=BOB), 404, "thread_not_found")
    r = await client.get(f"/threads/{thread_id}/messages", headers=ALICE)
    assert [m["content"] for m in r.json()["messages"] if m["role"] == "user"] == ["hello"]
