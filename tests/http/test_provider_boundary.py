"""Whatever a model provider raises is a 502 `provider_error` with a run id and a fixed message,
never a 500: a custom `ModelProvider` cannot turn into an internal error, nor leak what its
exception says. JSON and SSE, chat calls and history summaries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta
from bounded_agents.durable import SqlJournal
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import (
    ALICE,
    SSE,
    ModuleFactory,
    assert_error,
    make_app,
    new_thread,
    open_client,
    parse_sse,
    post,
    transcript,
)

LEAK = "internal detail http://u:hunter2@model/v1"


class Raising:
    """A custom provider with a bug: `complete` and `stream` raise a plain exception."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise KeyError(LEAK)

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        yield TextDelta(text="partial ")
        raise ValueError(LEAK)


@pytest.mark.parametrize(
    "history", [None, {"max_messages": 1, "summarize": True, "fold_messages": 1}]
)
async def test_a_provider_raising_anything_is_a_502_provider_error_with_its_run_id(
    stack: AsyncExitStack,
    make_module: ModuleFactory,
    sql_store: SqlAgentStore,
    caplog: pytest.LogCaptureFixture,
    history: dict[str, object] | None,
) -> None:
    module = make_module(model=Raising(), history=history)
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    before: list[str] = []
    if history is not None:  # something to summarize: the summary's call is the one that fails
        await sql_store.append_messages(
            thread_id,
            [Message(role="user", content="old"), Message(role="assistant", content="answer")],
        )
        before = ["user", "assistant"]
    r = await post(client, thread_id, "hello")
    body = assert_error(r, 502, "provider_error")
    assert LEAK not in r.text and "hunter2" not in r.text
    run = await client.get(f"/runs/{body['run_id']}", headers=ALICE)
    assert run.json()["error"]["code"] == "provider_error" and "hunter2" not in run.text
    record = await SqlJournal(sql_store.engine).get_run(body["run_id"])
    assert record is not None and "hunter2" not in (record.error_message or "")

    r = await client.post(
        f"/agents/helper/threads/{thread_id}/messages",
        headers={**ALICE, **SSE},
        json={"content": "again"},
    )
    events = parse_sse(r.text)
    assert events[-1][0] == "error", events
    assert events[-1][1]["error"]["code"] == "provider_error" and events[-1][1]["run_id"]
    assert "hunter2" not in r.text
    assert any("hunter2" in (rec.exc_text or "") for rec in caplog.records)  # logged, not sent
    roles = [m["role"] for m in await transcript(client, thread_id)]
    assert roles == [*before, "user", "user"]
    failed = [r for r in caplog.records if r.name == "bounded_agents.core.loop" and r.exc_text]
    assert ("summary" in failed[0].getMessage()) == (history is not None)
