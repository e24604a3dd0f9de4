"""Request bodies that are not UTF-8 JSON, on the native and the `/v1` turn routes."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from tests.http.conftest import ALICE, ModuleFactory, new_thread, open_client, transcript
from tests.http.test_openai_sdk import openai_app

JSON = {**ALICE, "Content-Type": "application/json"}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
async def test_a_utf16_or_utf32_json_body_is_400_invalid_json_and_runs_no_turn(
    stack: AsyncExitStack, make_module: ModuleFactory, encoding: str
) -> None:
    """RFC 8259 section 8.1: JSON exchanged between systems MUST be UTF-8; the project's own
    error table (docs/http-api.md) answers a body that is "not UTF-8" with 400 invalid_json.
    Python's `json.loads(bytes)` sniffs UTF-16/32 and reads it: a turn ran (attack round 10)."""
    c = await open_client(stack, openai_app(make_module()))
    thread_id = await new_thread(c)
    raw = '{"content": "sent as UTF-16"}'.encode(encoding)
    r = await c.post(f"/agents/helper/threads/{thread_id}/messages", headers=JSON, content=raw)
    assert r.status_code == 400, (r.status_code, r.text[:200])
    assert r.json()["error"]["code"] == "invalid_json"
    assert await transcript(c, thread_id) == []

    raw = '{"model": "helper", "input": "sent as UTF-16"}'.encode(encoding)
    r = await c.post("/v1/responses", headers=JSON, content=raw)
    assert r.status_code == 400, (r.status_code, r.text[:200])
    assert r.json()["error"]["code"] == "invalid_json"


UNREADABLE = {
    "not-utf8": b'{"model": "helper", "input": "caf\xe9"}',
    "deep": b'{"model": "helper", "input": "x", "user": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "long-number": b'{"model": "helper", "input": "x", "user": ' + b"1" * 5000 + b"}",
}


@pytest.mark.parametrize("name", list(UNREADABLE))
async def test_v1_answers_an_unreadable_body_with_invalid_json_as_the_native_api_does(
    stack: AsyncExitStack, make_module: ModuleFactory, name: str
) -> None:
    """docs/openai-api.md: `/v1` answers "with this project's stable `code`"; the native route
    answers these bodies 400 `invalid_json` with the reason. `/v1` said `http_error`, "There
    was an error parsing the body" (attack round 10)."""
    c = await open_client(stack, openai_app(make_module()))
    r = await c.post("/v1/responses", headers=JSON, content=UNREADABLE[name])
    assert r.status_code == 400, r.text[:200]
    error = r.json()["error"]
    assert error["code"] == "invalid_json", error
    assert error["type"] == "invalid_request_error"
