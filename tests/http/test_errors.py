"""The one error mapping: the table, the router on its own in a host app, the catch-all 500,
and health checks."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
from fastapi import FastAPI

from bounded_agents import errors as e
from bounded_agents.durable import InlineRuntime
from bounded_agents.http import build_router
from bounded_agents.http.errors import STATUS_BY_CODE, Unauthorized, status_for
from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    assert_error,
    http_settings,
    make_app,
    new_thread,
    open_client,
    post,
)


def _leaves(cls: type[e.AgentError]) -> list[type[e.AgentError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _leaves(sub))]


def test_every_error_in_the_tree_has_a_status() -> None:
    for cls in _leaves(e.AgentError):
        # A failed run, and a run's recorded failure, answer with the code they carry.
        if cls in (e.AgentError, e.RunFailed, e.RecordedFailure):
            continue
        if not cls.__module__.startswith("app."):
            continue
        assert cls.code in STATUS_BY_CODE, f"{cls.__name__} ({cls.code}) has no status"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (e.AgentNotFound("x"), 404),
        (e.ThreadNotFound("x"), 404),
        (e.ThreadBusy("x"), 409),
        (e.QuotaExceeded("a", 2, 1), 429),
        (e.ContentTooLarge(2, 1), 413),
        (e.InvalidContent("nul"), 422),
        (e.StoreError("down"), 503),
        (e.ProviderTimeout("slow"), 502),
        (e.ConfigError("oops"), 500),
        (Unauthorized(), 401),
        (e.RunFailed("r", e.ProviderBadResponse("bad")), 502),
        (e.RunFailed("r", e.StoreError("down")), 503),
        (e.RunFailed("r", RuntimeError("boom")), 500),
        (e.RunFailed("r", e.RecordedFailure("provider_timeout", "slow")), 502),
        (e.RunFailed("r", e.RecordedFailure("a_code_of_a_later_version", "?")), 500),
        (e.TurnInProgress("r"), 409),
        (e.IdempotencyKeyReused("r"), 422),
        (RuntimeError("boom"), 500),
    ],
)
def test_status_for(error: BaseException, status: int) -> None:
    assert status_for(error) == status


def test_a_users_own_error_takes_its_nearest_listed_base_status() -> None:
    class UpstreamQuota(e.ProviderError):
        code = "upstream_quota"

    assert status_for(UpstreamQuota("no")) == 502
    assert status_for(type("Odd", (e.AgentError,), {"code": "odd"})("?")) == 500


async def test_the_router_keeps_its_contract_in_a_host_app_without_our_handlers(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    module = make_module()
    host = FastAPI(lifespan=module.lifespan)
    host.include_router(build_router(module), prefix="/agents-api")

    @host.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    client = await open_client(stack, host)
    assert (await client.get("/hello")).json() == {"hello": "world"}
    r = await client.post("/agents-api/agents/helper/threads", headers=ALICE, json={})
    assert r.status_code == 201
    thread_id = r.json()["id"]
    base = f"/agents-api/agents/helper/threads/{thread_id}/messages"
    assert_error(await client.post(base, json={"content": "hi"}), 401, "unauthorized")
    assert_error(
        await client.post(base, headers=ALICE, json={"content": ""}), 422, "validation_error"
    )
    assert_error(
        await client.post(base, headers={**ALICE, "content-type": "application/json"}, content="{"),
        400,
        "invalid_json",
    )
    assert_error(
        await client.get("/agents-api/threads/not-a-uuid", headers=ALICE), 404, "thread_not_found"
    )
    assert (await client.post(base, headers=ALICE, json={"content": "hi"})).status_code == 200
    # the host's own 404 stays the host's
    assert (await client.get("/nowhere")).json() == {"detail": "Not Found"}


async def test_an_unexpected_error_is_500_logged_and_not_leaked(
    stack: AsyncExitStack, make_module: ModuleFactory, caplog: pytest.LogCaptureFixture
) -> None:
    module = make_module()

    async def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("password=hunter2")

    module.loop.owned_thread = explode  # type: ignore[assignment,method-assign]
    client = await open_client(stack, make_app(module))
    r = await client.get("/threads/00000000-0000-4000-8000-000000000000", headers=ALICE)
    body = assert_error(r, 500, "internal_error")
    assert body["error"]["message"] == "internal error"
    assert "hunter2" not in r.text
    assert any("hunter2" in (rec.exc_text or "") for rec in caplog.records)


async def test_healthz_is_ok_and_503_when_the_store_is_down(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await open_client(stack, make_app(make_module()))
    assert (await client.get("/healthz")).json() == {"status": "ok"}

    down = SqlAgentStore.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    stack.push_async_callback(down.dispose)
    module = AgentModule.for_root(
        store=down,
        journal=InlineRuntime(),  # so start-up does not need the database
        model=EchoModel(),
        settings=http_settings(),
        history={"max_messages": 2},
    )
    sick = await open_client(stack, make_app(module))
    assert_error(await sick.get("/healthz"), 503, "store_error")
    # a request that needs the database is a 503 too, not a 500
    thread = await sick.get("/threads/00000000-0000-4000-8000-000000000000", headers=ALICE)
    assert_error(thread, 503, "store_error")


async def test_local_mode_is_actor_local(stack: AsyncExitStack, make_module: ModuleFactory) -> None:
    module = make_module(settings=http_settings(api_keys=None))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client, headers={})
    assert (await post(client, thread_id, "hi", headers={})).status_code == 200
    assert (await client.get(f"/threads/{thread_id}", headers=ALICE)).status_code == 200
