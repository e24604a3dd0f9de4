"""Turns as JSON: the answer and its report, one turn per thread at a time, provider failures,
and `GET /runs/{id}`."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import httpx

from bounded_agents.errors import ProviderRateLimited, ProviderTimeout
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    assert_error,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)


async def test_a_turn_answers_with_run_id_message_and_report(client: httpx.AsyncClient) -> None:
    thread_id = await new_thread(client)
    r = await post(client, thread_id, "hello there")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"run_id", "message", "report"}
    assert body["message"]["role"] == "assistant"
    assert body["message"]["content"] == 'Echo (saw 2 messages): "hello there"'
    assert body["message"]["run_id"] == body["run_id"] == body["report"]["run_id"]
    assert body["report"]["status"] == "completed"
    assert [m["content"] for m in await transcript(client, thread_id)] == [
        "hello there",
        body["message"]["content"],
    ]


async def test_get_run_returns_its_report(client: httpx.AsyncClient) -> None:
    thread_id = await new_thread(client)
    await post(client, thread_id, "first")
    answered = (await post(client, thread_id, "/read_page https://example.org/a")).json()
    r = await client.get(f"/runs/{answered['run_id']}", headers=ALICE)
    assert r.status_code == 200
    run = r.json()
    assert run["run_id"] == answered["run_id"]
    assert run["status"] == "completed" and run["error"] is None
    assert (run["thread_id"], run["agent"]) == (thread_id, "helper")
    assert run["read_bound"] == 20
    assert run["rows_read"] == 3  # two earlier messages + this turn's user message
    assert run["bytes_read"] > 0
    assert run["journal_bytes"]["load:thread"] > 0
    assert any(name.startswith("tool:") for name in run["journal_bytes"])
    # the page the tool read is journaled once, in its own step
    tool_bytes = sum(v for k, v in run["journal_bytes"].items() if k.startswith("tool:"))
    assert tool_bytes > 20_000
    assert [c["purpose"] for c in run["model_calls"]] == ["chat", "chat"]
    assert all(c["prompt_tokens"] > 0 for c in run["model_calls"])
    assert [row["purpose"] for row in run["ledger"]] == ["chat", "chat"]
    assert [row["model"] for row in run["ledger"]] == ["echo", "echo"]
    assert run["input_items_url"] == f"/v1/responses/{answered['run_id']}/input_items"
    linked = ("thread_id", "agent", "error", "input_items_url")
    assert run == {**answered["report"], **{k: run[k] for k in linked}}


async def test_two_turns_at_once_on_one_thread_one_runs_one_gets_409(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("the one answer"))
    provider = ScriptedProvider([gate])
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread_id = await new_thread(client)

    first = asyncio.create_task(post(client, thread_id, "first"))
    await gate.reached()  # the first turn is in flight
    second = await post(client, thread_id, "second")
    busy = assert_error(second, 409, "thread_busy")
    assert "run_id" not in busy
    gate.release.set()
    done = await first
    assert done.status_code == 200 and done.json()["message"]["content"] == "the one answer"

    messages = await transcript(client, thread_id)
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "first"),
        ("assistant", "the one answer"),
    ]
    provider.assert_consumed()
    # and the thread takes the next turn normally
    provider.script.append(reply("next"))
    assert (await post(client, thread_id, "third")).status_code == 200


async def test_provider_failure_is_502_with_its_code_and_the_run_id(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([ProviderTimeout("the model did not answer in 60 s"), reply("ok")])
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread_id = await new_thread(client)

    r = await post(client, thread_id, "please answer")
    body = assert_error(r, 502, "provider_timeout")
    assert body["error"]["message"] == "the model did not answer in 60 s"
    run_id = body["run_id"]

    # the user's message stays; no partial answer was written
    assert [(m["role"], m["content"]) for m in await transcript(client, thread_id)] == [
        ("user", "please answer")
    ]
    run = (await client.get(f"/runs/{run_id}", headers=ALICE)).json()
    assert run["status"] == "failed"
    assert run["error"] == {"code": "provider_timeout", "message": body["error"]["message"]}

    # the thread takes the next turn normally
    ok = await post(client, thread_id, "try again")
    assert ok.status_code == 200 and ok.json()["message"]["content"] == "ok"
    roles = [m["role"] for m in await transcript(client, thread_id)]
    assert roles == ["user", "user", "assistant"]


async def test_every_provider_error_is_502_and_an_unexpected_one_too_without_details(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider(
        [ProviderRateLimited("slow down"), RuntimeError("secret connection string")]
    )
    client = await open_client(stack, make_app(make_module(model=provider)))
    thread_id = await new_thread(client)
    limited = assert_error(await post(client, thread_id, "a"), 502, "provider_rate_limited")
    assert limited["run_id"]
    crashed = assert_error(await post(client, thread_id, "b"), 502, "provider_error")
    assert "secret" not in crashed["error"]["message"] and crashed["run_id"]
    assert "secret" not in (await client.get(f"/runs/{crashed['run_id']}", headers=ALICE)).text


async def test_quota_exceeded_is_429_before_any_work(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider([reply("spent", prompt_tokens=50, completion_tokens=50)])
    client = await open_client(stack, make_app(make_module(model=provider, quota=100)))
    thread_id = await new_thread(client)
    assert (await post(client, thread_id, "spend it")).status_code == 200
    assert_error(await post(client, thread_id, "more"), 429, "quota_exceeded")
    assert len(await transcript(client, thread_id)) == 2
    provider.assert_consumed()


async def test_a_running_run_reports_running_with_an_empty_report(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    gate = Gate(reply("late"))
    module = make_module(model=ScriptedProvider([gate]))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    turn = asyncio.create_task(post(client, thread_id, "wait"))
    await gate.reached()
    run_ids = [m["run_id"] for m in await transcript(client, thread_id)]
    r = await client.get(f"/runs/{run_ids[0]}", headers=ALICE)
    assert r.status_code == 200
    run = r.json()
    assert run["status"] == "running"
    assert (run["rows_read"], run["model_calls"], run["ledger"]) == (0, [], [])
    gate.release.set()
    assert (await turn).status_code == 200
    assert (await client.get(f"/runs/{run_ids[0]}", headers=ALICE)).json()["status"] == "completed"
