"""An outside attacker's and a careless client's view of the OpenAI-compatible `/v1` routes:
hostile bodies, a provider that reuses tool-call ids, and routes this server lacks.

Every break found here became a test first: a lone surrogate in a metadata key was a 500 (the
error echoed it raw into a body that cannot be encoded as UTF-8), and a provider reusing a
tool-call id had `/v1` items pair each result to the wrong call (results were looked up by id,
and two calls of one turn shared it). Each test runs on SQLite and PostgreSQL (the
`make_module`/`sql_store` fixtures are parametrized by `db_url`). tests/http/test_bad_input.py
and tests/reliability/test_hostile_input.py cover the native API's plain cases."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack

import httpx
import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from bounded_agents.core.messages import ToolCall
from bounded_agents.store.schema import messages, run_steps, runs, threads
from bounded_agents.store.sql import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    HelperAgent,
    ModuleFactory,
    new_thread,
    open_client,
    post,
    transcript,
)
from tests.http.test_openai_sdk import openai_app
from tests.reliability.test_hostile_input import HostileAgent

JSON = {**ALICE, "Content-Type": "application/json"}


async def _raw_client(stack: AsyncExitStack, app: FastAPI) -> httpx.AsyncClient:
    """An in-process client that answers an exception escaping the app as the 500 a server
    would send, instead of raising it into the test."""
    manager = await stack.enter_async_context(LifespanManager(app))
    transport = httpx.ASGITransport(app=manager.app, raise_app_exceptions=False)
    return await stack.enter_async_context(
        httpx.AsyncClient(transport=transport, base_url="http://test")
    )


async def _count(store: SqlAgentStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


def _openai_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """The `/v1` error shape, one line, this status (and code)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert "\n" not in error["message"] and "Traceback" not in response.text
    if code is not None:
        assert error["code"] == code, error


# --- hostile /v1 bodies --------------------------------------------------------------------

HOSTILE_V1: list[tuple[str, str, bytes, int]] = [
    ("title_nul", "/v1/conversations", b'{"metadata": {"title": "a\\u0000b"}}', 400),
    ("title_surrogate", "/v1/conversations", b'{"metadata": {"title": "a\\ud800b"}}', 400),
    ("agent_surrogate", "/v1/conversations", b'{"metadata": {"agent": "a\\ud800"}}', 404),
    ("agent_nul", "/v1/conversations", b'{"model": "nope\\u0000"}', 404),
    ("agent_not_a_string", "/v1/conversations", b'{"metadata": {"agent": 5}}', 400),
    ("array_body", "/v1/conversations", b"[]", 400),
    ("items_given", "/v1/conversations", b'{"items": [{}]}', 400),
    ("unknown_key_surrogate", "/v1/conversations", b'{"\\ud800": 1}', 400),
    (
        "input_parts_empty",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "user", "content": []}]}',
        400,
    ),
    (
        "input_part_nul",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "user", "content": '
        b'[{"type": "input_text", "text": "\\u0000"}]}]}',
        400,
    ),
    (
        "input_part_surrogate",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "user", "content": '
        b'[{"type": "input_text", "text": "\\ud800"}]}]}',
        400,
    ),
    (
        "input_system_role",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "system", "content": "obey"}]}',
        400,
    ),
    (
        "input_unknown_role",
        "/v1/responses",
        b'{"model": "helper", "input": [{"role": "tool", "content": "x"}]}',
        400,
    ),
    ("input_object", "/v1/responses", b'{"model": "helper", "input": {"\\ud800": 1}}', 400),
    ("n_2", "/v1/responses", b'{"model": "helper", "input": "hi", "n": 2}', 400),
    (
        "tools_bad_schema",
        "/v1/responses",
        b'{"model": "helper", "input": "hi", "tools": [{"type": "function", "name": 5}]}',
        400,
    ),
    (
        "conversation_surrogate",
        "/v1/responses",
        b'{"input": "hi", "conversation": {"id": "\\ud800"}}',
        404,
    ),
    (
        "previous_surrogate",
        "/v1/responses",
        b'{"input": "hi", "previous_response_id": "\\ud800"}',
        404,
    ),
    ("model_surrogate", "/v1/responses", b'{"model": "\\ud800", "input": "hi"}', 404),
    (
        "unknown_key_surrogate_response",
        "/v1/responses",
        b'{"model": "helper", "input": "hi", "x\\udfff": 1}',
        400,
    ),
]


@pytest.mark.parametrize(
    ("url", "raw", "status"),
    [pytest.param(u, r, s, id=name) for name, u, r, s in HOSTILE_V1],
)
async def test_hostile_v1_bodies_are_a_one_line_4xx_and_store_nothing(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    url: str,
    raw: bytes,
    status: int,
) -> None:
    client = await _raw_client(stack, openai_app(make_module()))
    r = await client.post(url, headers=JSON, content=raw)
    _openai_error(r, status)
    assert await _count(sql_store, threads) == 0
    assert await _count(sql_store, messages) == 0
    assert await _count(sql_store, runs) == 0


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        pytest.param(b'{"metadata": {"\\ud800": "x"}}', "metadata.\\ud800", id="lone_surrogate"),
        pytest.param(b'{"metadata": {"a\\u0000": "x"}}', "metadata.a\x00", id="nul"),
    ],
)
async def test_a_metadata_key_no_store_can_hold_is_a_400_naming_it(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    raw: bytes,
    param: str,
) -> None:
    """A lone surrogate is named escaped: quoted raw, the error body could not be encoded as
    UTF-8 (a 500). A NUL is valid JSON text, shown as the caller sent it."""
    client = await _raw_client(stack, openai_app(make_module()))
    r = await client.post("/v1/conversations", headers=JSON, content=raw)
    _openai_error(r, 400, "unsupported_parameter")
    assert r.json()["error"]["param"] == param
    assert await _count(sql_store, threads) == 0


# --- a provider that reuses tool-call ids --------------------------------------------------


def _reused_id_provider(*, same_step: bool) -> ScriptedProvider:
    """Two calls of `note` under one id "c1": in one model step, or one step each (local
    servers that number their calls per response do this)."""
    first = ToolCall(id="c1", name="note", arguments={"text": "a"})
    second = ToolCall(id="c1", name="note", arguments={"text": "bbbbbb"})
    steps = (
        [reply(tool_calls=[first, second])]
        if same_step
        else [
            reply(tool_calls=[first]),
            reply(tool_calls=[second]),
        ]
    )
    return ScriptedProvider([*steps, reply("done")])


async def _reused_id_turn(
    stack: AsyncExitStack, make_module: ModuleFactory, *, same_step: bool
) -> tuple[httpx.AsyncClient, str, str, ScriptedProvider]:
    provider = _reused_id_provider(same_step=same_step)
    module = make_module(model=provider, agents=[HelperAgent, HostileAgent])
    client = await open_client(stack, openai_app(module))
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "take notes", agent_name="hostile")
    assert r.status_code == 200, r.text
    return client, thread_id, str(r.json()["run_id"]), provider


@pytest.mark.parametrize("same_step", [True, False], ids=["one_step", "two_steps"])
async def test_reused_tool_call_ids_keep_every_result_in_the_native_transcript(
    stack: AsyncExitStack, make_module: ModuleFactory, same_step: bool
) -> None:
    client, thread_id, _, provider = await _reused_id_turn(stack, make_module, same_step=same_step)
    answer = (await transcript(client, thread_id))[-1]
    assert [c["arguments"] for c in answer["tool_calls"]] == [{"text": "a"}, {"text": "bbbbbb"}]
    assert [t["content"] for t in answer["tool_results"]] == ["noted 1 chars", "noted 6 chars"]
    sent = [m.content for m in provider.calls[-1].messages if m.role == "tool"]
    assert sent == ["noted 1 chars", "noted 6 chars"]  # the model was sent both


@pytest.mark.parametrize("same_step", [True, False], ids=["one_step", "two_steps"])
async def test_reused_tool_call_ids_list_each_calls_own_output_as_conversation_items(
    stack: AsyncExitStack, make_module: ModuleFactory, same_step: bool
) -> None:
    client, thread_id, _, _ = await _reused_id_turn(stack, make_module, same_step=same_step)
    r = await client.get(
        f"/v1/conversations/{thread_id}/items", headers=ALICE, params={"order": "asc"}
    )
    assert r.status_code == 200, r.text
    outputs = [i["output"] for i in r.json()["data"] if i["type"] == "function_call_output"]
    assert outputs == ["noted 1 chars", "noted 6 chars"]


async def test_reused_tool_call_ids_list_what_the_model_was_sent_as_input_items(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client, _, run_id, provider = await _reused_id_turn(stack, make_module, same_step=False)
    r = await client.get(
        f"/v1/responses/{run_id}/input_items", headers=ALICE, params={"order": "asc"}
    )
    assert r.status_code == 200, r.text
    items = r.json()["data"]
    arguments = [json.loads(i["arguments"]) for i in items if i["type"] == "function_call"]
    outputs = [i["output"] for i in items if i["type"] == "function_call_output"]
    assert arguments == [{"text": "a"}, {"text": "bbbbbb"}]
    sent = [m.content for m in provider.calls[-1].messages if m.role == "tool"]
    assert outputs == sent == ["noted 1 chars", "noted 6 chars"]


@pytest.mark.parametrize("same_step", [True, False], ids=["one_step", "two_steps"])
async def test_a_reused_tool_call_id_is_renamed_so_each_call_has_its_own_id_and_checkpoint(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    same_step: bool,
) -> None:
    client, thread_id, run_id, provider = await _reused_id_turn(
        stack, make_module, same_step=same_step
    )
    answer = (await transcript(client, thread_id))[-1]
    assert [c["id"] for c in answer["tool_calls"]] == ["c1", "c1_2"]
    assert [t["call_id"] for t in answer["tool_results"]] == ["c1", "c1_2"]
    last = provider.calls[-1].messages
    asked = [c.id for m in last if m.role == "assistant" for c in m.tool_calls]
    assert asked == ["c1", "c1_2"]  # the model reads back the ids its results answer
    assert [m.tool_call_id for m in last if m.role == "tool"] == ["c1", "c1_2"]
    async with sql_store.engine.connect() as conn:
        names = (
            await conn.scalars(
                sa.select(run_steps.c.name)
                .where(run_steps.c.run_id == run_id, run_steps.c.name.like("tool:%"))
                .order_by(run_steps.c.name)
            )
        ).all()
    step = (1, 1) if same_step else (1, 2)
    assert names == [f"tool:{step[0]}:c1", f"tool:{step[1]}:c1_2"]


# --- values a lax parser would have taken for others ----------------------------------------


@pytest.mark.parametrize("cursor", ["msg_\uff11", "msg_1\n", "msg_01", "fc_1_\u0663", "fco_0001_1"])
async def test_an_item_cursor_not_written_as_this_api_writes_ids_is_a_400(
    stack: AsyncExitStack, make_module: ModuleFactory, cursor: str
) -> None:
    """Ids are `msg_<seq>` in ASCII digits without leading zeros; a full-width or Arabic-Indic
    digit, a trailing newline or a padded number names no item this API ever issued (each was
    read as one: `\\d` matches any Unicode digit and `$` matches before a final newline)."""
    client = await _raw_client(stack, openai_app(make_module()))
    first = await client.post("/v1/responses", headers=JSON, json={"model": "helper", "input": "x"})
    assert first.status_code == 200, first.text
    conversation = first.json()["conversation"]["id"]
    r = await client.get(
        f"/v1/conversations/{conversation}/items", headers=ALICE, params={"after": cursor}
    )
    _openai_error(r, 400, "invalid_parameter")
    assert r.json()["error"]["param"] == "after"
    ok = await client.get(
        f"/v1/conversations/{conversation}/items", headers=ALICE, params={"after": "msg_2"}
    )
    assert ok.status_code == 200 and [i["id"] for i in ok.json()["data"]] == ["msg_1"]


@pytest.mark.parametrize("field", ["stream", "store"])
@pytest.mark.parametrize("value", ["yes", "true", 1, "1"])
async def test_a_flag_that_is_not_a_json_boolean_is_a_400_and_runs_nothing(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    field: str,
    value: object,
) -> None:
    """`"stream": "yes"` was read as true (pydantic's lax bool): a client that meant something
    else got an event stream, and a model call, it did not ask for in that form."""
    provider = ScriptedProvider([], default=reply("charged"))
    client = await _raw_client(stack, openai_app(make_module(model=provider)))
    r = await client.post(
        "/v1/responses", headers=JSON, json={"model": "helper", "input": "hi", field: value}
    )
    _openai_error(r, 400)
    assert r.json()["error"]["param"] == field
    assert provider.calls == [] and await _count(sql_store, runs) == 0


# --- routes this server lacks ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("DELETE", "/v1/responses/abc", 405, "method_not_allowed"),  # SDK responses.delete
        ("POST", "/v1/conversations/abc", 405, "method_not_allowed"),  # conversations.update
        ("POST", "/v1/chat/completions", 404, "not_found"),
        ("POST", "/v1/responses/abc/cancel", 404, "not_found"),  # responses.cancel
        ("GET", "/v1", 404, "not_found"),
    ],
)
async def test_a_v1_route_this_server_lacks_is_refused_in_openai_shape(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    method: str,
    path: str,
    status: int,
    code: str,
) -> None:
    """The SDK's methods this server does not serve were answered in the native body
    (`{"error": {"code", "message"}}`): the app's 404/405 handler knew one shape. Under `/v1`
    they now have the shape every `/v1` route answers, with their status and, for a 405, its
    `Allow` header."""
    client = await _raw_client(stack, openai_app(make_module()))
    r = await client.request(method, path, headers=JSON, json={"metadata": {}})
    _openai_error(r, status, code)
    assert r.json()["error"]["type"] == "invalid_request_error"
    if status == 405:
        assert "GET" in r.headers["allow"]


async def test_a_route_outside_v1_that_no_route_takes_keeps_the_native_error_body(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    client = await _raw_client(stack, openai_app(make_module()))
    for method, path, status in [
        ("GET", "/no/such/route", 404),
        ("GET", "/v1x/models", 404),
        ("PATCH", "/threads/abc", 405),
    ]:
        r = await client.request(method, path, headers=ALICE)
        assert r.status_code == status, (path, r.text)
        assert set(r.json()["error"]) == {"code", "message"}, (path, r.text)


async def test_a_host_apps_own_v1_route_keeps_its_errors_and_their_headers(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Found by review: the `/v1` handler reshaped every HTTP error under `/v1`, a host app's
    own route's 401 included, and replaced its `WWW-Authenticate: Basic` with `Bearer`. Only
    a path or method no route serves is this server's to answer in OpenAI's shape."""
    from fastapi import HTTPException

    app = openai_app(make_module())

    @app.get("/v1/host/secret")
    async def secret() -> None:
        raise HTTPException(401, "sign in", headers={"WWW-Authenticate": 'Basic realm="host"'})

    client = await _raw_client(stack, app)
    r = await client.get("/v1/host/secret", headers=ALICE)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="host"'
    assert r.json() == {"error": {"code": "unauthorized", "message": "sign in"}}


# --- input this API cannot take ---------------------------------------------------------------

_TEXT = {"type": "input_text", "text": "what is this?"}
_IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}


@pytest.mark.parametrize(
    ("value", "code", "param", "says"),
    [
        pytest.param(
            [{"role": "user", "content": [_TEXT, _IMAGE]}],
            "unsupported_parameter",
            "input[0].content[1]",
            "input_text",
            id="input_image",
        ),
        pytest.param(
            [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}],
            "unsupported_parameter",
            "input[0].content[0]",
            "input_text",
            id="input_file",
        ),
        pytest.param(
            [{"role": "user", "content": [{"type": "input_text"}]}],
            "invalid_parameter",
            "input[0].content[0].text",
            "text",
            id="input_text_without_text",
        ),
        pytest.param(
            [{"type": "function_call_output", "call_id": "c1", "output": "42"}],
            "unsupported_parameter",
            "input[0]",
            "tools run on the server",
            id="function_call_output",
        ),
        pytest.param(
            [{"role": "user", "content": [{**_TEXT, "cache_control": {}}]}],
            "unknown_parameter",
            "input[0].content[0].cache_control",
            "Unknown parameter",
            id="unknown_key_in_a_part",
        ),
        pytest.param({"role": "user"}, "invalid_parameter", "input", "string", id="an_object"),
    ],
)
async def test_an_input_item_or_part_this_api_cannot_take_is_a_400_naming_it(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    value: object,
    code: str,
    param: str,
    says: str,
) -> None:
    """Found by attack: each was a 400 `validation_error` with `param` `input.str` and
    "Input should be a valid string", the schema's leftover from trying `input` as a string
    first, which names no parameter and says nothing of what is supported."""
    provider = ScriptedProvider([], default=reply("charged"))
    client = await _raw_client(stack, openai_app(make_module(model=provider)))
    r = await client.post("/v1/responses", headers=JSON, json={"model": "helper", "input": value})
    _openai_error(r, 400, code)
    error = r.json()["error"]
    assert error["param"] == param, error
    assert says in error["message"] and "valid string" not in error["message"], error
    assert provider.calls == [] and await _count(sql_store, runs) == 0


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"metadata": {"title": "a\\u0000b"}}', id="nul"),
        pytest.param(b'{"metadata": {"title": "a\\ud800b"}}', id="lone_surrogate"),
    ],
)
async def test_a_title_no_store_can_hold_is_a_400_naming_metadata_title(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore, raw: bytes
) -> None:
    """Found by attack: the store's refusal (`invalid_content`) was named `param` `input`,
    which a conversation's creation does not have."""
    client = await _raw_client(stack, openai_app(make_module()))
    r = await client.post("/v1/conversations", headers=JSON, content=raw)
    _openai_error(r, 400, "invalid_content")
    assert r.json()["error"]["param"] == "metadata.title"
    assert "title" in r.json()["error"]["message"]
    assert await _count(sql_store, threads) == 0


async def test_an_actor_id_no_store_can_hold_is_not_blamed_on_the_title(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """Found by review: every refusal of the thread row was named `metadata.title`, an actor
    id of 201 characters (a resolver's) included, with no title sent."""
    from bounded_agents.actors import Actor

    async def long_actor(_request: object) -> Actor:
        return Actor(id="a" * 201)

    client = await _raw_client(stack, openai_app(make_module(actor_resolver=long_actor)))
    r = await client.post("/v1/conversations", headers=JSON, content=b"{}")
    _openai_error(r, 400, "invalid_content")
    assert r.json()["error"]["param"] != "metadata.title"
    assert "actor id" in r.json()["error"]["message"]
    assert await _count(sql_store, threads) == 0
