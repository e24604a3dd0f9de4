"""Walk EVERY route that takes a thread or run id, found in `app.routes` (so a route added later
is walked too), as another actor and as no actor, against alice's real thread and run.

Bob must get exactly the 404 a nonexistent id gets (same status, headers and body, once the
requested id is blanked out of the message), and nothing of alice's (title, message text, her
name, an id he did not send) may appear in that answer's body or headers. No key, a wrong key
or a non-bearer scheme is 401 on every route. tests/http/test_isolation.py checks the same for
a hand-written list of routes; this one cannot miss a route. (PostgreSQL only.)

The inspector's pages (`/inspect/...`) are walked too: they answer HTML, not the JSON error
body, so for them the status, the `WWW-Authenticate` header, the 404 being identical to a
missing id's and the absence of alice's data are checked, not the body's JSON shape.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel

from bounded_agents.module import AgentModule
from tests.http.conftest import (
    ALICE,
    BOB,
    ModuleFactory,
    assert_error,
    make_app,
    open_client,
    post,
    transcript,
)

pytestmark = pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)

ID_PARAMS = {"thread_id", "run_id"}
"""A route is walked when its path names one of these."""
NO_ACTOR: list[tuple[str, Mapping[str, str]]] = [
    ("none", {}),
    ("wrong", {"Authorization": "Bearer key-z"}),
    ("basic", {"Authorization": "Basic a2V5LWE6"}),
    ("empty-bearer", {"Authorization": "Bearer "}),
    ("alices-key-as-basic", {"Authorization": "Basic key-a"}),
]
_PATH_PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")
_BODY_SAMPLES: dict[Any, Any] = {str: "bob was here", int: 1, bool: True}


@dataclass(frozen=True)
class Walked:
    path: str
    """As the app serves it (an including router's prefix applied)."""
    methods: frozenset[str]
    route: APIRoute


def walked_routes(app: FastAPI) -> list[Walked]:
    """Every API route of the app whose path names a thread or run id.

    FastAPI >= 0.16x keeps an included router as ONE entry of `app.routes`; its routes are
    reached through `fastapi.routing.iter_route_contexts`. Older versions copy them in flat.
    """
    iter_contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    found: list[Walked] = []
    if iter_contexts is not None:
        for ctx in iter_contexts(app.routes):
            if isinstance(ctx.original_route, APIRoute) and ctx.path:
                found.append(Walked(ctx.path, frozenset(ctx.methods or ()), ctx.original_route))
    else:  # pragma: no cover - FastAPI before routers were kept whole
        for r in app.routes:
            if isinstance(r, APIRoute):
                found.append(Walked(r.path, frozenset(r.methods), r))
    return [w for w in found if ID_PARAMS & set(_PATH_PARAM.findall(w.path))]


def _fill(route: Walked, values: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            pytest.fail(f"{route.path}: no value for path parameter {name!r}; teach this test")
        return values[name]

    return _PATH_PARAM.sub(one, route.path)


def _body(walked: Walked) -> Any:
    """A valid body for the route: every required field of its body model filled in."""
    route = walked.route
    if route.body_field is None:
        return None
    model = route.body_field.field_info.annotation
    assert isinstance(model, type) and issubclass(model, BaseModel), (route.path, model)
    body: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            if field.annotation not in _BODY_SAMPLES:
                pytest.fail(f"{route.path}: cannot fill body field {name!r}; teach this test")
            body[name] = _BODY_SAMPLES[field.annotation]
    return body


async def _send(
    client: httpx.AsyncClient,
    route: Walked,
    method: str,
    values: Mapping[str, str],
    headers: Mapping[str, str],
) -> httpx.Response:
    body = _body(route)
    return await client.request(
        method,
        _fill(route, values),
        headers=headers,
        json=body if body is not None else None,
    )


def _blank(text: str, *ids: str) -> str:
    for i in ids:
        text = text.replace(i, "<id>")
    return text


async def test_every_id_route_hides_alices_data_from_bob_and_refuses_no_actor(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    module: AgentModule = make_module()
    app = make_app(module)
    client = await open_client(stack, app)
    routes = walked_routes(app)
    print(f"\nisolation walk: {len(routes)} routes: " + ", ".join(_describe(r) for r in routes))
    assert len(routes) >= 5, [r.path for r in routes]
    assert sum(_is_page(r) for r in routes) == 3, [r.path for r in routes]  # the inspector's

    marker = uuid.uuid4().hex[:12]
    title = f"alice-private-title-{marker}"
    secret = f"alice-private-message-{marker}"
    r = await client.post("/agents/helper/threads", headers=ALICE, json={"title": title})
    assert r.status_code == 201, r.text
    thread_id = r.json()["id"]
    turn = await post(client, thread_id, secret)
    assert turn.status_code == 200, turn.text
    run_id = turn.json()["run_id"]
    answer = turn.json()["message"]["content"]
    assert secret in answer  # EchoModel quotes it: the answer is private too
    # `seq`: her first message (the erasure route names one); it is no secret on its own
    alices = {"agent": "helper", "thread_id": thread_id, "run_id": run_id, "seq": "1"}
    before = await transcript(client, thread_id)

    walked = 0
    for route in routes:
        for method in sorted(route.methods):
            for accept in ("application/json", "text/event-stream"):
                missing = {**alices, "thread_id": str(uuid.uuid4()), "run_id": str(uuid.uuid4())}
                as_bob = await _send(client, route, method, alices, {**BOB, "Accept": accept})
                nowhere = await _send(client, route, method, missing, {**BOB, "Accept": accept})
                where = f"{method} {route.path} (Accept: {accept})"
                assert as_bob.status_code == 404, (where, as_bob.text)
                if not _is_page(route):
                    body = assert_error(as_bob, 404, as_bob.json()["error"]["code"])
                    code = body["error"]["code"]
                    assert code in ("thread_not_found", "run_not_found"), (where, code)
                # identical to a nonexistent id, once each requested id is blanked out
                sent = [alices[p] for p in _PATH_PARAM.findall(route.path) if p in ID_PARAMS]
                sent_missing = [missing[p] for p in _PATH_PARAM.findall(route.path)]
                assert _blank(as_bob.text, *sent) == _blank(nowhere.text, *sent_missing), where
                assert as_bob.headers.multi_items() == nowhere.headers.multi_items(), where
                # nothing of alice's leaks: her data, her name, an id bob did not send
                private = [title, secret, answer, marker, "alice"]
                private += [alices[p] for p in ID_PARAMS if alices[p] not in sent]
                seen = as_bob.text + repr(as_bob.headers.multi_items())
                for value in private:
                    assert value not in seen, (where, value, seen)

                for name, headers in NO_ACTOR:
                    for values in (alices, missing):
                        r = await _send(
                            client, route, method, values, {**headers, "Accept": accept}
                        )
                        if _is_page(route):
                            assert r.status_code == 401, (where, name)
                        else:
                            assert_error(r, 401, "unauthorized")
                        assert r.headers["www-authenticate"] == "Bearer", (where, name)
                        for value in private:
                            assert value not in r.text, (where, name, value)
                walked += 1

    # bob's and the anonymous requests changed nothing of alice's
    assert await transcript(client, thread_id) == before
    # and every walked route does work for alice with the very same path: the 404s above are
    # about ownership, not about a path this test filled in wrongly
    # (the erasures last, the message's before the thread's: each one works once)
    calls = [(route, method) for route in routes for method in sorted(route.methods)]
    calls.sort(key=lambda call: (call[1] == "DELETE", -len(call[0].path)))
    for route, method in calls:
        r = await _send(client, route, method, alices, ALICE)
        assert 200 <= r.status_code < 300, (method, route.path, r.text)
    print(f"isolation walk: {walked} route/method/accept combinations as bob and as no actor")


def _is_page(route: Walked) -> bool:
    """An inspector page: HTML for people, so its errors are pages too."""
    return route.path.startswith("/inspect/")


def _describe(route: Walked) -> str:
    return f"{'/'.join(sorted(route.methods))} {route.path}"
