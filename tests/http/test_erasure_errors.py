"""Erasure reaches a failed run's error text, on SQLite and PostgreSQL: a provider that refuses
a turn with a 400 quoting its input (as validating servers do) leaves the input in
`runs.error_message`, which `/runs/{id}`, `/v1/responses/{id}` and the inspector show; erasing
the message redacts it (issue 40, break 2)."""

from __future__ import annotations

import json
import uuid
from contextlib import AsyncExitStack

import httpx

from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.providers.openai.failures import status_failure
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import ALICE, ModuleFactory, new_thread, open_client, post
from tests.http.erasure import RecordingEcho, marker_hits
from tests.http.test_openai_sdk import openai_app


class EchoingRefusal(RecordingEcho):
    """Refuses any chat turn whose user message says `refuse`, as a validating server does:
    HTTP 400 whose error message quotes the offending input. Other turns are answered without
    quoting the user (`RecordingEcho`)."""

    def _respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content
        if request.purpose == "chat" and "refuse" in last:
            body = {"error": {"message": f"Invalid content: {last!r}", "type": "invalid_request"}}
            raise status_failure(400, httpx.Headers(), json.dumps(body).encode())
        return super()._respond(request)


def _views(run_id: str) -> dict[str, str]:
    return {
        "run": f"/runs/{run_id}",
        "response": f"/v1/responses/{run_id}",
        "inspector": f"/inspect/runs/{run_id}",
    }


async def test_a_provider_s_echo_of_an_erased_message_leaves_the_failed_run_s_error(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    client = await open_client(stack, openai_app(make_module(model=EchoingRefusal())))
    marker = f"MARK{uuid.uuid4().hex}"
    thread = await new_thread(client)
    r = await post(client, thread, f"refuse {marker}")
    assert r.status_code == 502, r.text
    run_id = r.json()["run_id"]
    assert marker in r.json()["error"]["message"]  # the sender is told what the provider said
    assert "runs.error_message" in await marker_hits(sql_store, marker)
    for name, path in _views(run_id).items():
        shown = await client.get(path, headers=ALICE)
        assert shown.status_code == 200, (name, shown.text)
        assert marker in shown.text, name

    r = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
    assert r.status_code == 204, r.text

    assert await marker_hits(sql_store, marker) == []
    for name, path in _views(run_id).items():
        shown = await client.get(path, headers=ALICE)
        assert shown.status_code == 200, (name, shown.text)
        assert marker not in shown.text, name
    run = (await client.get(f"/runs/{run_id}", headers=ALICE)).json()
    assert run["status"] == "failed"
    assert run["error"]["code"] == "provider_error"
    # what is not the provider's text stays: the status it answered
    assert run["error"]["message"].startswith("provider returned HTTP 400"), run["error"]


async def test_a_later_failed_run_quoting_the_erased_message_is_redacted_too(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    """The provider's echo may quote any message its prompt held, not only the run's own."""

    class QuotesTheThread(EchoingRefusal):
        def _respond(self, request: ModelRequest) -> ModelResponse:
            if request.purpose == "chat" and "refuse" in request.messages[-1].content:
                text = " | ".join(m.content for m in request.messages)
                body = {"error": {"message": f"bad input: {text}"}}
                raise status_failure(400, httpx.Headers(), json.dumps(body).encode())
            return super()._respond(request)

    client = await open_client(stack, openai_app(make_module(model=QuotesTheThread())))
    marker = f"MARK{uuid.uuid4().hex}"
    thread = await new_thread(client)
    assert (await post(client, thread, f"remember {marker}")).status_code == 200
    r = await post(client, thread, "refuse now")
    assert r.status_code == 502, r.text
    assert marker in r.json()["error"]["message"]

    r = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
    assert r.status_code == 204, r.text

    assert await marker_hits(sql_store, marker) == []
