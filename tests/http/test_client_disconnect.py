"""A client that closes its connection before its request body is complete: a routine drop
(a lost network, a Ctrl-C, a proxy's timeout), not a bug of ours.

Found by attack: `Content-Length: 100`, part of the body, then close. The body's read raised
starlette's `ClientDisconnect` and the route answered it as an unhandled error, logging ERROR
with a full traceback per request, on every route with a body (native, `/v1`) and on the
inspector's sign-in. Now it is one INFO line, a 499 nobody reads, and nothing stored. Each test
runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager

from bounded_agents.http.route import CLIENT_CLOSED_REQUEST
from bounded_agents.store.schema import messages, runs, threads
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ModuleFactory, live_client, new_thread, open_client, serve_live
from tests.http.test_openai_sdk import openai_app

PARTIAL = b'{"content":'
"""The first 11 bytes of a body announced as 100."""

JSON_TYPE = (b"content-type", b"application/json")
FORM_TYPE = (b"content-type", b"application/x-www-form-urlencoded")


async def _count(store: SqlAgentStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


def _no_error_logged(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert loud == [], [(r.name, r.levelname, r.getMessage()) for r in loud]
    assert any(
        r.name == "bounded_agents.http" and "disconnected" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


async def _post_and_disconnect(app: Any, path: str, content_type: tuple[bytes, bytes]) -> int:
    """POST `path` through the ASGI interface with `Content-Length: 100`, send `PARTIAL` and
    then the disconnect a server reports when the client closes; returns the status sent."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"test"),
            (b"authorization", b"Bearer key-a"),
            (b"content-length", b"100"),
            content_type,
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("test", 80),
    }
    incoming = [{"type": "http.request", "body": PARTIAL, "more_body": True}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(next(m["status"] for m in sent if m["type"] == "http.response.start"))


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        pytest.param("/agents/helper/threads/{thread}/messages", JSON_TYPE, id="native_turn"),
        pytest.param("/agents/helper/threads", JSON_TYPE, id="native_new_thread"),
        pytest.param("/v1/responses", JSON_TYPE, id="v1_responses"),
        pytest.param("/v1/conversations", JSON_TYPE, id="v1_conversations"),
        pytest.param("/inspect/login", FORM_TYPE, id="inspector_login"),
    ],
)
async def test_a_client_gone_mid_body_is_one_info_line_a_499_and_stores_nothing(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    caplog: pytest.LogCaptureFixture,
    path: str,
    content_type: tuple[bytes, bytes],
) -> None:
    app = openai_app(make_module())
    client = await open_client(stack, app)
    thread_id = await new_thread(client)
    manager = await stack.enter_async_context(LifespanManager(app))
    caplog.clear()
    caplog.set_level(logging.INFO)

    status = await _post_and_disconnect(manager.app, path.format(thread=thread_id), content_type)

    assert status == CLIENT_CLOSED_REQUEST
    _no_error_logged(caplog)
    assert await _count(sql_store, threads) == 1  # the one made above
    assert await _count(sql_store, messages) == 0
    assert await _count(sql_store, runs) == 0


async def test_a_raw_socket_closed_mid_body_logs_no_error_on_a_live_server(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The attack as sent: uvicorn on loopback, a socket that sends the headers and part of
    the body, then closes, on the native turn route, `/v1/responses` and a new thread."""
    url = await serve_live(stack, openai_app(make_module()))
    thread_id = await new_thread(await live_client(stack, url))
    caplog.clear()
    caplog.set_level(logging.INFO)
    split = urlsplit(url)
    for path in (
        f"/agents/helper/threads/{thread_id}/messages",
        "/v1/responses",
        "/agents/helper/threads",
    ):
        _reader, writer = await asyncio.open_connection(split.hostname, split.port)
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: 100\r\n\r\n".encode()
            + PARTIAL
        )
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()
        await writer.wait_closed()
    for _ in range(100):  # the server handles the close in this event loop
        if sum("disconnected" in r.getMessage() for r in caplog.records) >= 3:
            break
        await asyncio.sleep(0.02)
    _no_error_logged(caplog)
    assert sum("disconnected" in r.getMessage() for r in caplog.records) == 3
    assert await _count(sql_store, threads) == 1
    assert await _count(sql_store, messages) == 0
