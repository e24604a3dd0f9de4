"""No integer a client sends in a path or query string is answered as an outage.

A paging number past what the database's integer columns hold used to reach the SQL: PostgreSQL
refused it (int32 or int64 overflow, a 503 `store_error` that SDKs retry and alerting reads as
an outage), SQLite's driver raised `OverflowError` (a 500 with a traceback in the log). Each
route must range-check its integers into a 4xx in its own error shape instead.

The parameters are read from the OpenAPI schema of the whole app as `app.main.create_app`
builds it (native routes and /v1), and from the schema of the inspector's own router, which
the published one leaves out: a route added later is walked without editing this file. Every
integer parameter gets each of `HOSTILE`; so does every string parameter whose documented
examples embed a number (an item id such as `msg_12`), with the number swapped for each of
them. Other required parameters get alice's real agent, thread and run, so the request reaches
the database. Both backends.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from app.main import create_app
from bounded_agents.http.inspector import build_inspector_router
from bounded_agents.settings import Settings
from bounded_agents.store.sql import SqlAgentStore
from tests.conftest import empty_database

HOSTILE = ("0", "-1", str(2**31 - 1), str(2**31), str(2**63), str(10**20))
"""The brief's numbers, and the largest seq: `after=msg_2147483647` once read past it."""
AUTH = {"Authorization": "Bearer k"}
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Probe:
    """One request: `param` of `method path` set to `value` (the rest real or left out)."""

    method: str
    path: str
    where: str
    param: str
    value: str

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.where}:{self.param}={self.value}"


def walked_schemas(app: FastAPI) -> list[dict[str, Any]]:
    """The app's published OpenAPI schema, and the inspector's, which it leaves out: the
    inspector's own router, its routes put in a schema of their own."""
    module = app.state.agent_module
    hidden = []
    for route in build_inspector_router(module, "/inspect").routes:
        if isinstance(route, APIRoute):
            route = copy.copy(route)
            route.include_in_schema = True
        hidden.append(route)
    inspector = get_openapi(title="inspector", version="0", routes=hidden)
    return [app.openapi(), inspector]


def _is_integer(schema: dict[str, Any]) -> bool:
    options = schema.get("anyOf", [schema])
    return any(option.get("type") == "integer" for option in options)


def _examples(param: dict[str, Any]) -> list[str]:
    schema = param.get("schema", {})
    found = [*param.get("examples", []), *schema.get("examples", [])]
    for option in schema.get("anyOf", []):
        found.extend(option.get("examples", []))
    return [e for e in found if isinstance(e, str)]


def _with_numbers(example: str) -> Iterator[str]:
    """`example` with each number in it, one at a time, replaced by each hostile value."""
    for match in _DIGITS.finditer(example):
        for value in HOSTILE:
            yield example[: match.start()] + value + example[match.end() :]


def probes(schemas: list[dict[str, Any]]) -> list[Probe]:
    out: dict[Probe, None] = {}  # ordered, and a route in both schemas is walked once
    paths = [item for schema in schemas for item in schema["paths"].items()]
    for path, operations in paths:
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                if param["in"] not in ("path", "query"):
                    continue
                if _is_integer(param.get("schema", {})):
                    values: list[str] = list(HOSTILE)
                else:
                    values = [v for e in _examples(param) for v in _with_numbers(e)]
                if values and "requestBody" in operation:
                    # A body this walk cannot build would fail validation and hide the route.
                    raise AssertionError(f"{method} {path}: teach this walk a valid body")
                for v in values:
                    out[Probe(method.upper(), path, param["in"], param["name"], v)] = None
    return list(out)


def _schema_app() -> FastAPI:
    return create_app(Settings(database_url="sqlite+aiosqlite:///never-opened.db"))


PROBES = probes(walked_schemas(_schema_app()))


def test_the_walk_covers_every_route_kind() -> None:
    """The walk is not empty where it matters: native, /v1 (ids too), and the hidden inspector."""
    walked = {(p.path, p.param) for p in PROBES}
    assert {
        ("/threads/{thread_id}/messages", "before"),
        ("/threads/{thread_id}/messages", "limit"),
        ("/v1/conversations/{conversation_id}/items", "limit"),
        ("/v1/conversations/{conversation_id}/items", "after"),
        ("/inspect/", "page"),
        ("/inspect/threads/{thread_id}", "before"),
        ("/inspect/threads/{thread_id}/timeline", "before"),
    } <= walked
    assert "msg_2147483648" in {p.value for p in PROBES if p.param == "after"}


@pytest.fixture
async def alices(db_url: str, stack: AsyncExitStack) -> tuple[httpx.AsyncClient, dict[str, str]]:
    """The full app on an emptied database, alice holding a thread with one turn: the client
    and the values that fill each route's other path parameters."""
    store = SqlAgentStore.from_url(db_url)
    await empty_database(store.engine)
    await store.dispose()
    app = create_app(Settings(database_url=db_url, api_keys="k=alice", migrate_on_start=False))
    manager = await stack.enter_async_context(LifespanManager(app))
    # A route that raises is counted as the 500 a server answers, not re-raised into the test.
    transport = httpx.ASGITransport(app=manager.app, raise_app_exceptions=False)
    client = await stack.enter_async_context(
        httpx.AsyncClient(transport=transport, base_url="http://test")
    )
    created = await client.post("/agents/assistant/threads", headers=AUTH, json={})
    thread = created.json()["id"]
    turn = await client.post(
        f"/agents/assistant/threads/{thread}/messages", headers=AUTH, json={"content": "hi"}
    )
    assert turn.status_code == 200, turn.text
    run = turn.json()["run_id"]
    real = {"agent": "assistant", "model": "assistant", "run_id": run, "response_id": run}
    return client, {**real, "thread_id": thread, "conversation_id": thread}


def _url(probe: Probe, real: dict[str, str]) -> tuple[str, dict[str, str]]:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if probe.where == "path" and name == probe.param:
            return probe.value
        assert name in real, f"{probe}: no real value for path parameter {name!r}"
        return real[name]

    path = re.sub(r"\{(\w+)\}", fill, probe.path)
    return path, ({probe.param: probe.value} if probe.where == "query" else {})


def _shape_problem(probe: Probe, response: httpx.Response) -> str | None:
    """Whether a refusal is in the route's own error body: OpenAI's under /v1, a page in the
    inspector, the project's `{"error": {"code", "message"}}` elsewhere."""
    kind = response.headers.get("content-type", "")
    if probe.path.startswith("/inspect"):
        return None if kind.startswith("text/html") else f"{kind}: {response.text[:200]}"
    if not kind.startswith("application/json"):
        return f"{kind}: {response.text[:200]}"
    error = response.json().get("error")
    if probe.path.startswith("/v1"):
        fields = {"message", "type", "param", "code"}
        if isinstance(error, dict) and set(error) == fields:
            return None if error["type"] == "invalid_request_error" else str(error)
    elif isinstance(error, dict) and set(error) == {"code", "message"}:
        return None
    return response.text[:200]


async def test_no_integer_parameter_answers_a_server_error(
    alices: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    client, real = alices
    statuses: dict[str, int] = {}
    wrong_shape: dict[str, str] = {}
    for probe in PROBES:
        path, query = _url(probe, real)
        response = await client.request(probe.method, path, params=query, headers=AUTH)
        statuses[str(probe)] = response.status_code
        if 400 <= response.status_code < 500:
            problem = _shape_problem(probe, response)
            if problem is not None:
                wrong_shape[str(probe)] = problem
    server_errors = {p: s for p, s in statuses.items() if s >= 500}
    assert not server_errors, "\n".join(f"{s} {p}" for p, s in server_errors.items())
    assert not wrong_shape, "\n".join(f"{p}: {w}" for p, w in wrong_shape.items())
    print(f"\n{len(statuses)} probes, 0 server errors; statuses {sorted(set(statuses.values()))}")
