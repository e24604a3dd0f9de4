"""HTTP test fixtures: a module on the emptied SQL store (SQLite and PostgreSQL in turn), an
in-process client that runs the lifespan, and a real uvicorn server on a loopback port.

Actors: `ALICE` and `BOB` are bearer headers for the keys in `KEYS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import uvicorn
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from app.main import fake_page
from bounded_agents.core.ports import ModelProvider
from bounded_agents.http import build_router
from bounded_agents.http.errors import install_error_handlers
from bounded_agents.http.sse import iter_sse
from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.registry import agent, tool
from bounded_agents.settings import Settings
from bounded_agents.store.sql import SqlAgentStore

KEYS = "key-a=alice,key-b=bob"
ALICE = {"Authorization": "Bearer key-a"}
BOB = {"Authorization": "Bearer key-b"}
SSE = {"Accept": "text/event-stream"}


@agent(name="helper", system_prompt="You help with pages.")
class HelperAgent:
    @tool
    async def read_page(self, url: str) -> str:
        """Read a page (offline, ~20 KB)."""
        return fake_page(url)


def http_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"api_keys": KEYS, "migrate_on_start": False}
    values.update(overrides)
    return Settings(**values)


ModuleFactory = Callable[..., AgentModule]


@pytest.fixture
def make_module(sql_store: SqlAgentStore) -> ModuleFactory:
    """`make_module(model=..., agents=..., history=..., settings=...)` on the test's store."""

    def make(
        *,
        model: ModelProvider | None = None,
        agents: Sequence[type] = (HelperAgent,),
        history: Mapping[str, Any] | None = None,
        settings: Settings | None = None,
        **options: Any,
    ) -> AgentModule:
        return AgentModule.for_root(
            store=sql_store,
            model=model or EchoModel(),
            agents=agents,
            history=history or {"max_messages": 20},
            settings=settings or http_settings(),
            **options,
        )

    return make


def make_app(module: AgentModule, *, handlers: bool = True) -> FastAPI:
    app = FastAPI(lifespan=module.lifespan)
    app.include_router(build_router(module))
    if handlers:
        install_error_handlers(app)
    return app


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def open_client(stack: AsyncExitStack, app: FastAPI) -> httpx.AsyncClient:
    """An in-process client; the app's lifespan runs around it."""
    manager = await stack.enter_async_context(LifespanManager(app))
    return await stack.enter_async_context(
        httpx.AsyncClient(transport=httpx.ASGITransport(app=manager.app), base_url="http://test")
    )


@pytest.fixture
async def client(stack: AsyncExitStack, make_module: ModuleFactory) -> httpx.AsyncClient:
    """The default app: `helper` on EchoModel, a 20-message window."""
    return await open_client(stack, make_app(make_module()))


class _QuietServer(uvicorn.Server):
    """uvicorn without signal handlers: the test process keeps its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


SERVER_KEEP_ALIVE = 60
"""Seconds uvicorn keeps an idle connection open. Its default (5 s) equals httpx's
`keepalive_expiry`, so a client could send on a connection in the instant the server closed
it, and get `httpx.ReadError` on a POST it never retries (CI saw it once in 250 turns). The
side that reuses connections must give them up first; a proxy in front of the app should be
set the same way (docs/deploy.md)."""


async def serve_live(stack: AsyncExitStack, app: FastAPI, *, access_log: bool = False) -> str:
    """Serve `app` with uvicorn on a free loopback port in this event loop; returns its URL.
    The server (and the app's lifespan) stops when the stack closes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    stack.callback(sock.close)
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=access_log,
        ws="none",
        lifespan="on",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=SERVER_KEEP_ALIVE,
    )
    server = _QuietServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))

    async def stop() -> None:
        server.should_exit = True
        await task

    stack.push_async_callback(stop)
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
    assert server.started, "uvicorn did not start"
    port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def live_client(stack: AsyncExitStack, url: str) -> httpx.AsyncClient:
    return await stack.enter_async_context(
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=10.0)
    )


# --- helpers -------------------------------------------------------------------------------


async def new_thread(
    client: httpx.AsyncClient, headers: Mapping[str, str] = ALICE, agent_name: str = "helper"
) -> str:
    r = await client.post(f"/agents/{agent_name}/threads", headers=headers, json={})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def post(
    client: httpx.AsyncClient,
    thread_id: str,
    content: Any,
    headers: Mapping[str, str] = ALICE,
    agent_name: str = "helper",
) -> httpx.Response:
    return await client.post(
        f"/agents/{agent_name}/threads/{thread_id}/messages",
        headers=headers,
        json={"content": content},
    )


async def transcript(
    client: httpx.AsyncClient, thread_id: str, headers: Mapping[str, str] = ALICE
) -> list[dict[str, Any]]:
    r = await client.get(f"/threads/{thread_id}/messages", headers=headers, params={"limit": 200})
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    return [(event, json.loads(data)) for event, data in iter_sse(text.splitlines())]


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Events as they arrive on a streamed response."""
    block: list[str] = []
    async for line in response.aiter_lines():
        if line:
            block.append(line)
            continue
        for event, data in iter_sse([*block, ""]):
            yield event, json.loads(data)
        block = []


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The response is the JSON error body with this status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) <= {"error", "run_id"}, body
    assert set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body)
