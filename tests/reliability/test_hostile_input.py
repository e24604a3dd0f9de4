"""Hostile input, from the client and from the model: stored and read back verbatim, or refused
with a clear 4xx; never a 500, never a Python error leaking into a response.

Runs on SQLite and PostgreSQL (the `client`/`make_module` fixtures are parametrized by
`db_url`), except where noted. tests/http/test_bad_input.py covers the plain cases (bad field
types, malformed JSON, NUL and lone surrogates in `content`, sizes); this file is the hostile
end: SQL metacharacters, escapes that look like NUL, thousands of tool calls, nesting deep
enough to break a recursive encoder, invalid UTF-8 inside a JSON string.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from bounded_agents.core.messages import MAX_TOOL_ARGUMENT_DEPTH, ToolCall
from bounded_agents.providers import OpenAICompatibleProvider
from bounded_agents.registry import agent, tool
from bounded_agents.store.schema import threads
from bounded_agents.store.sql import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, StreamingScriptedProvider, reply
from tests.factories import nested
from tests.http.conftest import (
    ALICE,
    SSE,
    HelperAgent,
    ModuleFactory,
    assert_error,
    make_app,
    new_thread,
    open_client,
    parse_sse,
    post,
    transcript,
)
from tests.providers.fake_openai import FakeOpenAI, Reply, completion, wire_tool_call

NASTY = [
    "'; DROP TABLE messages; --",
    '"; DROP TABLE threads; --',
    "' OR '1'='1",
    "100% of _all_ rows LIKE '%_%'",
    "%s %(content)s %d {0} {content}",
    "$1 $2::text $$ dollar $$ $tag$ quoted $tag$",
    ":content :thread_id ? ?? @p1",
    "back\\slash \\' \\\" \\\\ \\n \\x00 \\0 C:\\Users\\",
    "\\u0000 is how JSON spells NUL; \\\\u0000 is not NUL either",
    "E'\\x41' U&'\\0041' /* comment */ -- trailing",
    "\r\n\t tabs and CRLF \u2028 \u2029 \ufeff bom \u200b zwsp",
    "émoji 😀 \U0001d518\U0001d52b\U0001d526 中文 עברית",
]
"""Texts a store that interpolated SQL, or a layer that formatted strings, would mangle. None of
them holds a real NUL: `\\u0000` here is six printable characters, and so must be stored."""


@agent(name="hostile", system_prompt="You take notes.")
class HostileAgent:
    @tool
    async def note(self, text: str) -> str:
        """Write a note; answers with its length."""
        return f"noted {len(text)} chars"

    @tool
    async def dump(self, data: dict[str, Any]) -> str:
        """Dump raw bytes, as a tool reading a binary file would."""
        return "bin\x00ary \ud800 out"

    @tool
    async def inspect(self, data: dict[str, Any]) -> str:
        """Describe a JSON document."""
        return f"{len(json.dumps(data))} bytes of JSON"


async def _hostile_client(
    stack: AsyncExitStack, make_module: ModuleFactory, provider: ScriptedProvider
) -> httpx.AsyncClient:
    module = make_module(model=provider, agents=[HelperAgent, HostileAgent])
    return await open_client(stack, make_app(module))


def _no_leak(response: httpx.Response) -> None:
    """Not an internal error (502 names the provider, 503 the database), and no Python
    internals in the body."""
    assert response.status_code != 500, response.text
    for word in ("Traceback", "RecursionError", "maximum recursion", 'File "'):
        assert word not in response.text, response.text[:500]


# --- SQL metacharacters --------------------------------------------------------------------


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
async def test_sql_metacharacters_are_stored_and_read_back_verbatim(
    client: httpx.AsyncClient, text: str
) -> None:
    r = await client.post("/agents/helper/threads", headers=ALICE, json={"title": text})
    assert r.status_code == 201, r.text
    assert r.json()["title"] == text
    thread_id = r.json()["id"]
    got = await client.get(f"/threads/{thread_id}", headers=ALICE)
    assert got.status_code == 200 and got.json()["title"] == text

    turn = await post(client, thread_id, text)
    assert turn.status_code == 200, turn.text
    messages = await transcript(client, thread_id)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == text
    window = await client.get(f"/threads/{thread_id}/window", headers=ALICE)
    assert window.status_code == 200
    assert window.json()["kept"][0]["content"] == text
    # the tables are all still there: another thread and turn work
    other = await new_thread(client)
    assert (await post(client, other, "still here?")).status_code == 200


async def test_metacharacters_in_tool_arguments_and_results_read_back_verbatim(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    calls = [
        ToolCall(id=f"call-{i}", name="note", arguments={"text": text, text: text})
        for i, text in enumerate(NASTY)
    ]
    client = await _hostile_client(
        stack, make_module, ScriptedProvider([reply(tool_calls=calls), reply(NASTY[0])])
    )
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "take notes", agent_name="hostile")
    assert r.status_code == 200, r.text
    answer = (await transcript(client, thread_id))[-1]
    assert answer["content"] == NASTY[0]
    assert [c["arguments"] for c in answer["tool_calls"]] == [c.arguments for c in calls]
    # `note` got one unexpected argument (the text as a key): a tool error the model can read
    assert len(answer["tool_results"]) == len(NASTY)


# --- NUL, and what only looks like it --------------------------------------------------------


async def _count(store: SqlAgentStore, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one())


async def test_nul_in_a_title_is_422_on_both_backends_and_nothing_is_stored(
    client: httpx.AsyncClient, sql_store: SqlAgentStore
) -> None:
    """SQLite could hold it and PostgreSQL cannot: refused alike, as NUL in content is."""
    for title in ("a\x00b", "\x00"):
        r = await client.post("/agents/helper/threads", headers=ALICE, json={"title": title})
        assert_error(r, 422, "invalid_content")
    assert await _count(sql_store, threads) == 0


@pytest.mark.parametrize(
    "raw",
    [b'{"content": "\\u0000"}', b'{"content": "x\\u0000y"}', b'{"content": "\\u0000\\u0000 "}'],
)
async def test_nul_spelled_as_a_json_escape_is_422_and_nothing_is_stored(
    client: httpx.AsyncClient, raw: bytes
) -> None:
    thread_id = await new_thread(client)
    r = await client.post(
        f"/agents/helper/threads/{thread_id}/messages",
        headers={**ALICE, "Content-Type": "application/json"},
        content=raw,
    )
    assert_error(r, 422, "invalid_content")
    assert await transcript(client, thread_id) == []


async def test_a_model_answer_holding_nul_or_a_lone_surrogate_is_stored_with_u_fffd(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Nobody can fix a model's NUL, so it is replaced, not refused: the user gets the answer."""
    provider = ScriptedProvider([reply("bad\x00answer \ud800 end")])
    client = await _hostile_client(stack, make_module, provider)
    thread_id = await new_thread(client)
    r = await post(client, thread_id, "hello")
    assert r.status_code == 200, r.text
    assert r.json()["message"]["content"] == "bad\ufffdanswer \ufffd end"
    stored = await transcript(client, thread_id)
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "hello"),
        ("assistant", "bad\ufffdanswer \ufffd end"),
    ]
    run = await client.get(f"/runs/{r.json()['run_id']}", headers=ALICE)
    assert run.json()["status"] == "completed"


async def test_nul_and_lone_surrogates_in_tool_calls_and_results_are_stored_with_u_fffd(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    call = ToolCall(
        id="c\x00", name="dump", arguments={"data": {"k\x00": ["v\udc00", {"deep": "\x00"}]}}
    )
    provider = ScriptedProvider([reply(tool_calls=[call]), reply("done")])
    client = await _hostile_client(stack, make_module, provider)
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "dump it", agent_name="hostile")
    assert r.status_code == 200, r.text
    answer = (await transcript(client, thread_id))[-1]
    assert answer["tool_calls"] == [
        {
            "id": "c\ufffd",
            "name": "dump",
            "arguments": {"data": {"k\ufffd": ["v\ufffd", {"deep": "\ufffd"}]}},
        }
    ]
    assert [t["content"] for t in answer["tool_results"]] == ["bin\ufffdary \ufffd out"]
    assert answer["tool_results"][0]["call_id"] == "c\ufffd"


async def test_a_streamed_delta_holding_a_lone_surrogate_reaches_the_client_as_u_fffd(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = StreamingScriptedProvider([reply("ab\ud800cd\x00")])
    client = await _hostile_client(stack, make_module, provider)
    thread_id = await new_thread(client)
    r = await post(client, thread_id, "stream", headers={**ALICE, **SSE})
    assert r.status_code == 200
    events = parse_sse(r.text)
    assert events[-1][0] == "done", events[-1]
    deltas = "".join(data["text"] for name, data in events if name == "delta")
    assert deltas == "ab\ufffdcd\ufffd" == events[-1][1]["message"]["content"]


async def test_a_surrogate_pair_split_across_stream_pieces_is_stored_whole(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Deltas are cleaned piece by piece, the answer whole: the stream shows two U+FFFD where
    the server split the pair, the stored answer the character (what docs/reliability.md says).
    """
    # Two UTF-16 code units as a JSON parser hands them over; pieces of 2: "a\ud83d", "\ude00"
    provider = StreamingScriptedProvider([reply("a\ud83d\ude00")])
    client = await _hostile_client(stack, make_module, provider)
    thread_id = await new_thread(client)
    r = await post(client, thread_id, "stream", headers={**ALICE, **SSE})
    events = parse_sse(r.text)
    assert [data["text"] for name, data in events if name == "delta"] == ["a\ufffd", "\ufffd"]
    assert events[-1][1]["message"]["content"] == "a\U0001f600"
    assert (await transcript(client, thread_id))[-1]["content"] == "a\U0001f600"


# --- many tool calls ---------------------------------------------------------------------------

MANY = 500


async def test_a_model_asking_for_hundreds_of_tool_calls_completes_and_reads_back(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    calls = [ToolCall(id=f"c{i}", name="note", arguments={"text": f"n{i}"}) for i in range(MANY)]
    provider = ScriptedProvider([reply(tool_calls=calls), reply("all noted"), reply("second turn")])
    client = await _hostile_client(stack, make_module, provider)
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "note everything", agent_name="hostile")
    assert r.status_code == 200, r.text
    assert r.json()["message"]["content"] == "all noted"
    assert len(r.json()["message"]["tool_results"]) == MANY
    # the second model call saw every result, each paired with its call
    tool_messages = [m for m in provider.calls[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == [c.id for c in calls]

    stored = (await transcript(client, thread_id))[-1]
    assert [c["id"] for c in stored["tool_calls"]] == [c.id for c in calls]
    assert [t["call_id"] for t in stored["tool_results"]] == [c.id for c in calls]
    assert all(not t["is_error"] for t in stored["tool_results"])
    assert stored["tool_results"][7]["content"] == "noted 2 chars"
    # the thread with its huge exchange still answers the next turn
    r2 = await post(client, thread_id, "and now?", agent_name="hostile")
    assert r2.status_code == 200 and r2.json()["message"]["content"] == "second turn"
    provider.assert_consumed()


async def test_hundreds_of_calls_to_unknown_tools_are_tool_errors_not_a_500(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    calls = [ToolCall(id=f"x{i}", name=f"no_such_tool_{i}", arguments={}) for i in range(MANY)]
    client = await _hostile_client(
        stack, make_module, ScriptedProvider([reply(tool_calls=calls), reply("ok")])
    )
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "go", agent_name="hostile")
    assert r.status_code == 200, r.text
    stored = (await transcript(client, thread_id))[-1]
    assert len(stored["tool_results"]) == MANY
    assert all(t["is_error"] for t in stored["tool_results"])


# --- deep nesting ------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [50, MAX_TOOL_ARGUMENT_DEPTH - 2, 200, 1000, 5000])
async def test_deeply_nested_tool_arguments_from_the_model_never_500(
    stack: AsyncExitStack, make_module: ModuleFactory, depth: int
) -> None:
    """Up to the limit the arguments are stored and read back whole; beyond it the model's
    answer is a bad provider response (502), not an internal error, and not a stored message
    that no later read could decode (pydantic writes ~250 levels but reads only ~200)."""
    call = ToolCall(id="deep", name="inspect", arguments={"data": nested(depth)})
    provider = ScriptedProvider([reply(tool_calls=[call])], default=reply("fine"))
    client = await _hostile_client(stack, make_module, provider)
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "inspect this", agent_name="hostile")
    _no_leak(r)
    messages = await transcript(client, thread_id)
    if depth + 2 <= MAX_TOOL_ARGUMENT_DEPTH:
        assert r.status_code == 200, r.text
        answer = messages[-1]
        assert answer["tool_calls"][0]["arguments"] == {"data": nested(depth)}
        assert answer["tool_results"][0]["is_error"] is False
    else:
        error = assert_error(r, 502, "provider_bad_response")
        assert "nest deeper than" in error["error"]["message"]
        assert [m["role"] for m in messages] == ["user"]  # no half answer
        run = await client.get(f"/runs/{error['run_id']}", headers=ALICE)
        _no_leak(run)
        assert run.status_code == 200 and run.json()["status"] == "failed"
    # the thread is not poisoned: it reads back and takes the next turn
    window = await client.get(f"/threads/{thread_id}/window", headers=ALICE)
    assert window.status_code == 200, window.text
    nxt = await post(client, thread_id, "hello again", agent_name="hostile")
    assert nxt.status_code == 200, nxt.text
    assert nxt.json()["message"]["content"] == "fine"


@pytest.mark.parametrize("depth", [200, 5000])
async def test_deeply_nested_arguments_through_the_openai_adapter_never_500(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    fake_openai: FakeOpenAI,
    http_client: httpx.AsyncClient,
    depth: int,
) -> None:
    """The same through the wire: arguments arrive as a JSON string, which the adapter parses
    (5000 levels is past Python's own recursion limit for `json.loads`)."""
    arguments = '{"data": ' + '{"a": ' * depth + "1" + "}" * depth + "}"
    fake_openai.enqueue(
        Reply.json(completion(None, [wire_tool_call("deep", "inspect", arguments)])),
        Reply.json(completion("fine")),
    )
    provider = OpenAICompatibleProvider(
        base_url=fake_openai.base_url,
        api_key="sk-test",
        model="fake-model",
        timeout=5.0,
        max_retries=0,
        client=http_client,
    )
    module = make_module(model=provider, agents=[HostileAgent])
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client, agent_name="hostile")
    r = await post(client, thread_id, "inspect this", agent_name="hostile")
    _no_leak(r)
    assert_error(r, 502, "provider_bad_response")
    assert [m["role"] for m in await transcript(client, thread_id)] == ["user"]
    nxt = await post(client, thread_id, "hello again", agent_name="hostile")
    assert nxt.status_code == 200 and nxt.json()["message"]["content"] == "fine", nxt.text
    fake_openai.assert_consumed()


PARSE_ERRORS = ("invalid_json", "validation_error")
"""A body the JSON parser refuses or gives up on (invalid UTF-8 inside a string, nesting past
the recursion limit) is 400 `invalid_json`; one that parses but does not fit the schema is 422
`validation_error`."""


async def _raw_post(client: httpx.AsyncClient, url: str, raw: bytes) -> httpx.Response:
    return await client.post(
        url, headers={**ALICE, "Content-Type": "application/json"}, content=raw
    )


@pytest.mark.parametrize("depth", [1000, 100_000])
@pytest.mark.parametrize("bracket", [b"[", b'{"a":'], ids=["array", "object"])
async def test_deeply_nested_request_bodies_are_4xx(
    client: httpx.AsyncClient, depth: int, bracket: bytes
) -> None:
    thread_id = await new_thread(client)
    closer = b"]" if bracket == b"[" else b"}"
    deep = bracket * depth + b"1" + closer * depth
    for url in (f"/agents/helper/threads/{thread_id}/messages", "/agents/helper/threads"):
        for raw in (b'{"content": ' + deep + b"}", b'{"title": "t", "x": ' + deep + b"}", deep):
            r = await _raw_post(client, url, raw)
            _no_leak(r)
            assert 400 <= r.status_code < 500, (url, r.status_code, r.text[:300])
            assert r.json()["error"]["code"] in PARSE_ERRORS
            if depth > 10_000:  # past the parser's recursion limit: not JSON it can read
                assert_error(r, 400, "invalid_json")
    assert await transcript(client, thread_id) == []


# --- invalid UTF-8 -----------------------------------------------------------------------------

BAD_UTF8 = [
    b'{"content": "\xff\xfe"}',
    b'{"content": "ok \xc3"}',  # truncated two-byte sequence
    b'{"content": "\xc0\xaf"}',  # overlong encoding of "/"
    b'{"content": "\xf4\x90\x80\x80"}',  # beyond U+10FFFF
    b'{"content": "latin-1 caf\xe9"}',
]


@pytest.mark.parametrize("raw", BAD_UTF8, ids=range(len(BAD_UTF8)))
async def test_invalid_utf8_inside_a_json_string_is_a_clear_4xx(
    client: httpx.AsyncClient, raw: bytes
) -> None:
    thread_id = await new_thread(client)
    r = await _raw_post(client, f"/agents/helper/threads/{thread_id}/messages", raw)
    assert_error(r, 400, "invalid_json")
    assert "not UTF-8" in r.json()["error"]["message"]
    assert await transcript(client, thread_id) == []

    title = raw.replace(b'"content"', b'"title"')
    r = await _raw_post(client, "/agents/helper/threads", title)
    assert_error(r, 400, "invalid_json")


async def test_a_surrogate_encoded_as_utf8_is_refused_as_invalid_content(
    client: httpx.AsyncClient,
) -> None:
    """CESU-8: Python's JSON parser lets it through (`surrogatepass`) as a lone surrogate,
    which no store can hold; the store's own check names it."""
    thread_id = await new_thread(client)
    raw = b'{"content": "\xed\xa0\x80"}'
    r = await _raw_post(client, f"/agents/helper/threads/{thread_id}/messages", raw)
    assert_error(r, 422, "invalid_content")
    assert "surrogate" in r.json()["error"]["message"]
    assert await transcript(client, thread_id) == []


# --- titles ------------------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["x", "€", "😀"])
async def test_a_title_of_500_characters_fits_and_501_is_422(
    client: httpx.AsyncClient, char: str
) -> None:
    """The limit counts characters, whatever their UTF-8 size (PostgreSQL varchar(500) too)."""
    ok = await client.post("/agents/helper/threads", headers=ALICE, json={"title": char * 500})
    assert ok.status_code == 201, ok.text
    got = await client.get(f"/threads/{ok.json()['id']}", headers=ALICE)
    assert got.json()["title"] == char * 500
    over = await client.post("/agents/helper/threads", headers=ALICE, json={"title": char * 501})
    error = assert_error(over, 422, "validation_error")
    assert "title" in error["error"]["message"]


async def test_a_lone_surrogate_in_a_title_is_4xx(client: httpx.AsyncClient) -> None:
    r = await _raw_post(client, "/agents/helper/threads", b'{"title": "a\\udc80b"}')
    _no_leak(r)
    assert r.status_code == 422, r.text
