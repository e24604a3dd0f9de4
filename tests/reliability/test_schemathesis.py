"""Property-based fuzzing of the whole HTTP API from its own OpenAPI schema (schemathesis 4.x).

The app is `app.main.create_app` (agent `assistant`, EchoModel) on a temporary SQLite database
(SQLite on purpose: the point is the HTTP contract, and the backends are compared elsewhere),
with one API key, `k` = alice. Schemathesis generates valid and invalid requests for every
operation (its examples, coverage and fuzzing phases; at most `MAX_EXAMPLES` fuzzed examples
per operation, derandomized so a run is reproducible) and sends them in-process over ASGI with
alice's key. Every other example aims at the real agent and alice's real thread and run
instead of random ids, so the fuzzed bodies and query strings reach an agent and a thread that
exist, not only the 404 path.

Each response must not be a server error (`not_a_server_error`), must use a documented status
and content type, and must match its documented schema (headers included).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.main import create_app
from bounded_agents.module import AgentModule
from bounded_agents.settings import Settings

MAX_EXAMPLES = 50
AUTH = {"Authorization": "Bearer k"}
REAL = {"agent", "thread_id", "run_id", "response_id"}
"""Path parameters that every other example sets to alice's real agent, thread and run (a
response is a run: `/v1/responses/{response_id}` and its input items are fuzzed on it too)."""
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


class Tally:
    """What was sent and answered, per operation; printed (and checked) at the end."""

    def __init__(self) -> None:
        self.cases: Counter[str] = Counter()
        self.statuses: dict[str, Counter[int]] = {}
        self.real_ids: Counter[str] = Counter()

    def record(self, label: str, status: int, real: bool) -> None:
        self.cases[label] += 1
        self.statuses.setdefault(label, Counter())[status] += 1
        self.real_ids[label] += real


@pytest.fixture(scope="module")
def alices(tmp_path_factory: pytest.TempPathFactory) -> tuple[FastAPI, str, str]:
    """The app on a fresh, migrated SQLite database holding alice's thread with one turn:
    (app, thread id, run id). Seeded in an event loop of its own, by a separate app instance;
    schemathesis then runs the app (and its lifespan) on its own event loop thread."""
    path = tmp_path_factory.mktemp("schemathesis") / "agent.db"
    config = Settings(
        database_url=f"sqlite+aiosqlite:///{path}", api_keys="k=alice", migrate_on_start=True
    )

    async def seed() -> tuple[str, str]:
        app = create_app(config)
        module = app.state.agent_module
        assert isinstance(module, AgentModule)
        async with module.lifespan(app):
            thread = await module.store.create_thread(actor_id="alice", agent="assistant")
            result = await module.run_turn(
                agent="assistant", thread_id=thread.id, actor_id="alice", content="hello"
            )
        return thread.id, result.run_id

    thread_id, run_id = asyncio.run(seed())
    return create_app(config), thread_id, run_id


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    counts = Tally()
    yield counts
    print(f"\nschemathesis: {sum(counts.cases.values())} requests")
    for label in sorted(counts.cases):
        print(
            f"  {label}: {counts.cases[label]} cases ({counts.real_ids[label]} on real ids), "
            f"statuses {dict(sorted(counts.statuses[label].items()))}"
        )


def _schema() -> schemathesis.BaseSchema:
    """The schema, read from an app that is never started (its engine never connects): tests
    are generated at collection, and the database they run against is made per module."""
    app = create_app(Settings(database_url="sqlite+aiosqlite:///never-opened.db"))
    schema = schemathesis.openapi.from_dict(app.openapi())
    schema.app = app  # makes schemathesis call in-process over ASGI; each call names its app
    return schema


schema = _schema()


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@schema.parametrize()
def test_no_operation_answers_a_server_error(
    case: schemathesis.Case, alices: tuple[FastAPI, str, str], tally: Tally
) -> None:
    app, thread_id, run_id = alices
    params = case.path_parameters or {}
    real = bool(REAL & set(params)) and tally.cases[case.operation.label] % 2 == 1
    if real:
        reals = {"agent": "assistant", "thread_id": thread_id, "run_id": run_id}
        for name, value in [*reals.items(), ("response_id", run_id)]:
            if name in params:
                params[name] = value
    response = case.call(headers=AUTH, app=app)
    tally.record(case.operation.label, response.status_code, bool(real))
    assert response.status_code < 500, (case.as_curl_command(), response.text)
    case.validate_response(response, checks=CHECKS, headers=AUTH)
