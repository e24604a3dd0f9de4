"""Bad input is a clear 4xx with the JSON error body, never a 500, and never starts a run."""

from __future__ import annotations

import json
import re
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from bounded_agents.errors import ECHO_CHARS
from bounded_agents.http.openai.api import build_openai_router
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    assert_error,
    http_settings,
    make_app,
    new_thread,
    open_client,
    transcript,
)


@pytest.fixture
async def thread_id(client: httpx.AsyncClient) -> str:
    return await new_thread(client)


def _url(thread_id: str, agent: str = "helper") -> str:
    return f"/agents/{agent}/threads/{thread_id}/messages"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"content": ""}, "content must not be empty"),
        ({"content": "   \n\t "}, "content must not be empty"),
        ({"content": 123}, "content"),
        ({"content": None}, "content"),
        ({"content": ["a", "b"]}, "content"),
        ({"content": {"text": "hi"}}, "content"),
        ({}, "content"),
        ({"content": "hi", "role": "system"}, "role"),
        (["content", "hi"], "body"),
        ("hi", "body"),
    ],
    ids=[
        "empty",
        "whitespace",
        "number",
        "null",
        "list",
        "object",
        "missing",
        "extra-field",
        "array-body",
        "string-body",
    ],
)
async def test_invalid_message_bodies_are_422(
    client: httpx.AsyncClient, thread_id: str, body: Any, fragment: str
) -> None:
    r = await client.post(_url(thread_id), headers=ALICE, json=body)
    error = assert_error(r, 422, "validation_error")
    assert fragment in error["error"]["message"]
    assert await transcript(client, thread_id) == []


@pytest.mark.parametrize("raw", [b"{nope", b'{"content": "hi"', b"", b"\xff\xfe"])
async def test_malformed_json_is_400_invalid_json(
    client: httpx.AsyncClient, thread_id: str, raw: bytes
) -> None:
    r = await client.post(
        _url(thread_id), headers={**ALICE, "Content-Type": "application/json"}, content=raw
    )
    if raw == b"":
        assert_error(r, 422, "validation_error")  # no body at all: the field is missing
    else:
        assert_error(r, 400, "invalid_json")
    assert await transcript(client, thread_id) == []


async def test_nul_in_content_is_422_invalid_content(
    client: httpx.AsyncClient, thread_id: str
) -> None:
    r = await client.post(_url(thread_id), headers=ALICE, json={"content": "a\x00b"})
    assert_error(r, 422, "invalid_content")
    assert await transcript(client, thread_id) == []


async def test_a_lone_surrogate_is_422_invalid_content_not_a_500(
    client: httpx.AsyncClient, thread_id: str
) -> None:
    r = await client.post(
        _url(thread_id),
        headers={**ALICE, "Content-Type": "application/json"},
        content=b'{"content": "a\\ud800b"}',
    )
    assert_error(r, 422, "invalid_content")
    assert await transcript(client, thread_id) == []


@pytest.mark.parametrize("before", ["0", "-1", str(2**31), str(10**30), "1.5", "x"])
async def test_out_of_range_paging_is_422_never_500(
    client: httpx.AsyncClient, thread_id: str, before: str
) -> None:
    r = await client.get(f"/threads/{thread_id}/messages?before={before}", headers=ALICE)
    assert_error(r, 422, "validation_error")


async def test_unknown_agent_is_404(client: httpx.AsyncClient, thread_id: str) -> None:
    r = await client.post(_url(thread_id, agent="nobody"), headers=ALICE, json={"content": "hi"})
    assert_error(r, 404, "agent_not_found")


async def test_an_error_quotes_at_most_the_start_of_a_callers_value(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Found by attack: a 404 for an unknown `model` echoed all 200 KB of it. Every name or id
    a refusal quotes back is cut to its first `ECHO_CHARS` characters, with its length. (In a
    URL the value is 20,000 characters: httpx refuses to send a longer URL.)"""
    module = make_module()
    app = make_app(module)
    app.include_router(build_openai_router(module))
    client = await open_client(stack, app)
    thread = await new_thread(client)
    long, url = "x" * 200_000, "x" * 20_000
    cases: list[tuple[str, str, Any, int]] = [
        ("POST", f"/agents/{url}/threads", {}, len(url)),
        ("GET", f"/threads/{url}", None, len(url)),
        ("GET", f"/runs/{url}", None, len(url)),
        ("GET", f"/v1/conversations/{thread}/items?after={url}", None, len(url)),
        ("GET", f"/v1/models/{url}", None, len(url)),
        ("POST", f"/agents/helper/threads/{thread}/messages", {"content": "a", long: 1}, len(long)),
        ("POST", "/v1/responses", {"model": long, "input": "hi"}, len(long)),
        ("POST", "/v1/responses", {"conversation": long, "input": "hi"}, len(long)),
        ("POST", "/v1/responses", {"previous_response_id": long, "input": "hi"}, len(long)),
        ("POST", "/v1/responses", {"model": "helper", "input": "hi", long: 1}, len(long)),
        ("POST", "/v1/conversations", {"metadata": {"agent": long}}, len(long)),
        ("POST", "/v1/conversations", {"metadata": {"agent": "helper", long: "x"}}, len(long)),
    ]
    for method, path, body, size in cases:
        r = await client.request(method, path, json=body, headers=ALICE)
        where = f"{method} {path[:40]} {str(body)[:40]}"
        assert 400 <= r.status_code < 500, (where, r.status_code)
        assert len(r.content) < 1_000, (where, len(r.content))
        shown = rf"(?<!x)x{{{ECHO_CHARS}}}'?… \({size:,} characters\)"  # quoted, or a param
        assert re.search(shown, r.text), (where, r.text)


@pytest.mark.parametrize("bad", ["not-a-uuid", "1", "00000000-0000-0000-0000", "%20", "..%2F.."])
async def test_non_uuid_ids_are_404_never_500(client: httpx.AsyncClient, bad: str) -> None:
    """A path that still reaches the route is the resource's 404; one that a client normalizes
    elsewhere (`..%2F..`) is the router's plain 404. Never a 500."""
    for path in (f"/threads/{bad}", f"/threads/{bad}/messages", f"/threads/{bad}/window"):
        r = await client.get(path, headers=ALICE)
        assert r.status_code == 404, (path, r.text)
        assert r.json()["error"]["code"] in ("thread_not_found", "not_found")
    r = await client.get(f"/runs/{bad}", headers=ALICE)
    assert r.status_code == 404 and r.json()["error"]["code"] in ("run_not_found", "not_found")
    r = await client.post(_url(bad), headers=ALICE, json={"content": "hi"})
    assert r.status_code == 404 and r.json()["error"]["code"] in ("thread_not_found", "not_found")


async def test_unknown_route_and_wrong_method_use_the_error_body(
    client: httpx.AsyncClient, thread_id: str
) -> None:
    assert_error(await client.get("/no/such/route", headers=ALICE), 404, "not_found")
    r = await client.patch(f"/threads/{thread_id}", headers=ALICE, json={})
    assert_error(r, 405, "method_not_allowed")
    assert "GET" in r.headers["allow"]


# --- size ----------------------------------------------------------------------------------

LIMIT = 1000


@pytest.fixture
async def small(stack: AsyncExitStack, make_module: ModuleFactory) -> httpx.AsyncClient:
    """An app whose content limit is LIMIT bytes."""
    module = make_module(settings=http_settings(max_content_bytes=LIMIT))
    return await open_client(stack, make_app(module))


async def test_content_at_the_limit_is_accepted_and_one_byte_more_is_413(
    small: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(small)
    ok = await small.post(_url(thread_id), headers=ALICE, json={"content": "x" * LIMIT})
    assert ok.status_code == 200, ok.text
    over = await small.post(_url(thread_id), headers=ALICE, json={"content": "x" * (LIMIT + 1)})
    assert_error(over, 413, "content_too_large")
    assert len(await transcript(small, thread_id)) == 2  # the refused message was not stored


async def test_the_limit_counts_utf8_bytes_not_characters(small: httpx.AsyncClient) -> None:
    thread_id = await new_thread(small)
    # 400 characters, 1200 bytes; sent with every character escaped (\\uXXXX, 6 bytes each)
    body = json.dumps({"content": "€" * 400}, ensure_ascii=True)
    r = await small.post(
        _url(thread_id), headers={**ALICE, "Content-Type": "application/json"}, content=body
    )
    assert_error(r, 413, "content_too_large")
    assert "1200 bytes" in r.json()["error"]["message"]
    # the same number of bytes under the limit passes even though its body is 2400 bytes long
    fits = json.dumps({"content": "€" * 333}, ensure_ascii=True)
    ok = await small.post(
        _url(thread_id), headers={**ALICE, "Content-Type": "application/json"}, content=fits
    )
    assert ok.status_code == 200, ok.text


async def test_a_body_too_large_to_hold_valid_content_is_refused_unread(
    small: httpx.AsyncClient,
) -> None:
    thread_id = await new_thread(small)
    padded = '{"content": "hi"' + " " * (8 * LIMIT) + "}"  # tiny content, huge body
    r = await small.post(
        _url(thread_id), headers={**ALICE, "Content-Type": "application/json"}, content=padded
    )
    assert_error(r, 413, "content_too_large")
    assert "request body" in r.json()["error"]["message"]


async def test_a_chunked_body_is_counted_while_read(small: httpx.AsyncClient) -> None:
    thread_id = await new_thread(small)

    async def chunks() -> Any:
        yield b'{"content": "'
        for _ in range(10):
            yield b"y" * LIMIT
        yield b'"}'

    r = await small.post(
        _url(thread_id), headers={**ALICE, "Content-Type": "application/json"}, content=chunks()
    )
    assert_error(r, 413, "content_too_large")

    async def small_chunks() -> Any:
        yield b'{"content": '
        yield b'"chunked hello"}'

    ok = await small.post(
        _url(thread_id),
        headers={**ALICE, "Content-Type": "application/json"},
        content=small_chunks(),
    )
    assert ok.status_code == 200, ok.text
    assert "chunked hello" in ok.json()["message"]["content"]


async def test_a_number_too_long_for_python_to_read_is_400_invalid_json(
    client: httpx.AsyncClient, thread_id: str
) -> None:
    """Python refuses to read integers of over 4300 digits: that body is not JSON we can read,
    the documented 400 `invalid_json`, not an undocumented `bad_request`."""
    raw = b'{"content": "hi", "n": ' + b"9" * 5000 + b"}"
    r = await client.post(
        _url(thread_id), headers={**ALICE, "Content-Type": "application/json"}, content=raw
    )
    assert_error(r, 400, "invalid_json")
    assert await transcript(client, thread_id) == []


async def test_a_tool_command_nested_past_the_json_parser_is_answered_not_a_500(
    client: httpx.AsyncClient, thread_id: str
) -> None:
    """`/read_page [[[...` (100k brackets) made EchoModel's JSON parse raise RecursionError;
    now the text that is not a JSON object is the tool's argument, as for any other text."""
    r = await client.post(
        _url(thread_id), headers=ALICE, json={"content": "/read_page " + "[" * 100_000}
    )
    assert r.status_code == 200, r.text
    assert "Tool read_page returned" in r.json()["message"]["content"]


async def test_a_content_length_that_lies_does_not_lift_the_limit(
    small: httpx.AsyncClient,
) -> None:
    """`Content-Length: 15` on a far longer streamed body: the bytes are counted as they arrive
    and reading stops at the limit (before, the whole body was read, parsed and answered)."""
    thread_id = await new_thread(small)
    sent = 0

    async def padded() -> Any:
        nonlocal sent
        for piece in [b'{"content": "hi"', *[b" " * LIMIT] * 100, b"}"]:
            sent += len(piece)
            yield piece

    r = await small.post(
        _url(thread_id),
        headers={**ALICE, "Content-Type": "application/json", "Content-Length": "15"},
        content=padded(),
    )
    assert_error(r, 413, "content_too_large")
    assert sent < 10 * LIMIT, f"{sent} bytes were read of a body refused at {7 * LIMIT}"
    assert await transcript(small, thread_id) == []
