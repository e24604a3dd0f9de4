"""An app on the test's store whose model is the fake OpenAI-compatible server."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import httpx
import sqlalchemy as sa

from bounded_agents.providers import OpenAICompatibleProvider
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ALICE, SSE, ModuleFactory, make_app, open_client, parse_sse
from tests.providers.fake_openai import FakeOpenAI


def provider(server: FakeOpenAI, client: httpx.AsyncClient, **kw: Any) -> OpenAICompatibleProvider:
    async def no_sleep(seconds: float) -> None:
        return None

    options: dict[str, Any] = {"timeout": 1.0, "max_retries": 2, "sleep": no_sleep}
    options.update(kw)
    return OpenAICompatibleProvider(
        base_url=server.base_url, api_key="sk-test", model="fake-model", client=client, **options
    )


async def app_client(
    stack: AsyncExitStack, make_module: ModuleFactory, model: Any, **kw: Any
) -> httpx.AsyncClient:
    return await open_client(stack, make_app(make_module(model=model, **kw)))


async def rows(store: SqlAgentStore, sql: str, **params: Any) -> list[Any]:
    async with store.engine.connect() as conn:
        return list((await conn.execute(sa.text(sql), params)).all())


async def sse_turn(client: httpx.AsyncClient, tid: str, content: str) -> list[tuple[str, Any]]:
    """One native SSE turn of the `helper` agent, its events parsed (a 200 asserted)."""
    r = await client.post(
        f"/agents/helper/threads/{tid}/messages",
        headers={**ALICE, **SSE},
        json={"content": content},
    )
    assert r.status_code == 200, r.text
    return parse_sse(r.text)


def wire_call(index: int | None, **fields: Any) -> dict[str, Any]:
    """A streamed tool-call delta, with `index` left out when None (as Google's endpoint)."""
    call: dict[str, Any] = {"type": "function", **fields}
    if index is not None:
        call["index"] = index
    return call
