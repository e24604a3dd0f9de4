"""`responses.input_items.list` through the official `openai` SDK, on SQLite and PostgreSQL:
each response lists exactly the messages its model was sent (captured from the provider), with
a tool turn, a rolling summary, a failed fold and a refold between model calls; paging, order,
isolation and errors. The app and clients are `test_openai_sdk`'s."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from app.main import fake_page
from bounded_agents.core.messages import Message, ToolCall
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    ModelRequest,
    ModelResponse,
    ReadBound,
    Usage,
)
from bounded_agents.errors import ProviderError
from bounded_agents.providers import EchoModel
from bounded_agents.registry import agent, tool
from bounded_agents.testing import ScriptedProvider, reply
from tests.http.conftest import ModuleFactory
from tests.http.test_openai_sdk import async_client, serve


@pytest.fixture
async def base_url(stack: AsyncExitStack, make_module: ModuleFactory) -> str:
    return await serve(stack, make_module(history={"max_messages": 4}))


@pytest.fixture
async def alice(base_url: str) -> AsyncIterator[AsyncOpenAI]:
    async with async_client(base_url) as client:
        yield client


class RecordingEcho(EchoModel):
    """EchoModel (chat and summaries) that keeps every chat request it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.chats: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "chat":
            self.chats.append(request)
        return await super().complete(request)


def sent_as_items(request: ModelRequest) -> list[tuple[str, ...]]:
    """A chat request's messages as (type, ...) rows in the order sent: what the items of the
    response must say, field by field."""
    rows: list[tuple[str, ...]] = []
    for m in request.messages:
        if m.role == "tool":
            rows.append(("function_call_output", m.tool_call_id or "", m.content))
            continue
        if m.content or not m.tool_calls:
            rows.append(("message", m.role, m.content))
        for c in m.tool_calls:
            rows.append(("function_call", c.id, c.name, json.dumps(c.arguments)))
    return rows


def item_rows(items: list[Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for i in items:
        if i.type == "message":
            (part,) = i.content
            expected_part = "output_text" if i.role == "assistant" else "input_text"
            assert part.type == expected_part, i
            rows.append(("message", i.role, part.text))
        elif i.type == "function_call":
            rows.append(("function_call", i.call_id, i.name, i.arguments))
        else:
            assert i.type == "function_call_output"
            rows.append(("function_call_output", i.call_id, i.output))
    return rows


async def all_items(client: AsyncOpenAI, response_id: str, **params: Any) -> list[Any]:
    return [i async for i in client.responses.input_items.list(response_id, **params)]


async def test_input_items_are_the_last_prompt_of_a_tool_turn_as_sent(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider(
        [
            reply("hi, I read pages"),
            reply(tool_calls=[ToolCall(id="call_7", name="read_page", arguments={"url": "u://a"})]),
            reply("the page says hello"),
        ]
    )
    base_url = await serve(stack, make_module(model=provider))
    async with async_client(base_url) as client:
        first = await client.responses.create(model="helper", input="hello")
        tool_turn = await client.responses.create(previous_response_id=first.id, input="read u://a")
        items = await all_items(client, tool_turn.id, order="asc")
        first_items = await all_items(client, first.id, order="asc")
    provider.assert_consumed()
    assert item_rows(items) == sent_as_items(provider.calls[-1])
    assert [(i.type, getattr(i, "role", None)) for i in items] == [
        ("message", "system"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
    ]
    call, output = items[4], items[5]
    assert (call.call_id, call.name, json.loads(call.arguments)) == (
        "call_7",
        "read_page",
        {"url": "u://a"},
    )
    assert output.call_id == "call_7" and output.output == fake_page("u://a")
    assert item_rows(first_items) == sent_as_items(provider.calls[0])
    assert [i.type for i in first_items] == ["message", "message"]


async def test_input_items_hold_the_summary_as_the_second_system_message(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    """Every turn's items are what its model was sent: those that folded in the turn itself
    (the summary made before the model call) as well as those that read a summary made before."""
    model = RecordingEcho()
    module = make_module(model=model, history={"max_messages": 2, "summarize": True})
    base_url = await serve(stack, module)
    folded_here: list[bool] = []
    async with (
        async_client(base_url) as client,
        httpx.AsyncClient(base_url=base_url.removesuffix("/v1"), trust_env=False) as http,
    ):
        responses = [await client.responses.create(model="helper", input="point number 0")]
        for n in range(1, 5):
            responses.append(
                await client.responses.create(
                    previous_response_id=responses[-1].id, input=f"point number {n}"
                )
            )
        listed = [await all_items(client, r.id, order="asc") for r in responses]
        for r in responses:
            run = await http.get(f"/runs/{r.id}", headers={"Authorization": "Bearer key-a"})
            summary_report = run.json()["summary"]
            folded_here.append(bool(summary_report and summary_report["made"]))
    assert [item_rows(items) for items in listed] == [sent_as_items(c) for c in model.chats]
    assert any(folded_here[1:]), folded_here  # some turn folded before its own model call
    items = listed[-1]
    assert [getattr(i, "role", None) for i in items[:2]] == ["system", "system"]
    summary = items[1].content[0].text
    assert "point number 0" in summary  # folded: the first turn is in the summary only
    assert all("point number 0" not in row[-1] for row in item_rows(items[2:]))
    assert item_rows(items[-1:]) == [("message", "user", "point number 4")]


async def test_input_items_page_with_after_in_both_orders(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    base_url = await serve(stack, make_module(history={"max_messages": 20}))
    async with async_client(base_url) as client:
        response = await client.responses.create(model="helper", input="one")
        response = await client.responses.create(
            previous_response_id=response.id, input="/read_page https://a.b"
        )
        response = await client.responses.create(previous_response_id=response.id, input="three")
        oldest_first = [i.id for i in await all_items(client, response.id, order="asc")]
        newest_first = [i.id for i in await all_items(client, response.id)]
        # system, one, its answer, /read_page, its answer and call, the output, three
        assert len(oldest_first) == 8
        assert newest_first == oldest_first[::-1]
        assert len(set(oldest_first)) == len(oldest_first)

        walked: list[str] = []
        after: str | None = None
        while True:
            extra = {"after": after} if after is not None else {}
            page = await client.responses.input_items.list(
                response.id, limit=1, order="asc", **extra
            )
            assert len(page.data) == 1
            walked.append(page.data[0].id)  # type: ignore[union-attr]
            assert page.first_id == page.last_id == walked[-1]  # type: ignore[attr-defined]
            if not page.has_more:
                break
            after = walked[-1]
        assert walked == oldest_first
        followed = client.responses.input_items.list(response.id, limit=3)
        assert [i.id async for i in followed] == newest_first  # the SDK follows `after`
        again = [i.id for i in await all_items(client, response.id, order="asc")]
        assert again == oldest_first  # stable ids across calls


async def test_input_items_of_another_actor_or_with_a_bad_limit_are_refused(
    base_url: str, alice: AsyncOpenAI
) -> None:
    mine = await alice.responses.create(model="helper", input="private")
    async with async_client(base_url, key="key-b") as bob:
        with pytest.raises(openai.NotFoundError) as caught:
            await bob.responses.input_items.list(mine.id)
        assert caught.value.code == "run_not_found"
        assert caught.value.type == "invalid_request_error"
    for unknown in (str(uuid.uuid4()), "not-a-uuid"):
        with pytest.raises(openai.NotFoundError):
            await alice.responses.input_items.list(unknown)
    for limit in (0, 101):
        with pytest.raises(openai.BadRequestError) as refused:
            await alice.responses.input_items.list(mine.id, limit=limit)
        assert refused.value.param == "limit"
    with pytest.raises(openai.BadRequestError) as foreign:
        await alice.responses.input_items.list(mine.id, after="msg_1")
    assert (foreign.value.code, foreign.value.param) == ("invalid_parameter", "after")
    assert len(await all_items(alice, mine.id, include=["message.input_image.image_url"])) == 2


async def test_the_native_run_links_its_input_items(base_url: str, alice: AsyncOpenAI) -> None:
    response = await alice.responses.create(model="helper", input="where is my prompt")
    root = base_url.removesuffix("/v1")
    async with httpx.AsyncClient(base_url=root, trust_env=False) as http:
        run = await http.get(f"/runs/{response.id}", headers={"Authorization": "Bearer key-a"})
        assert run.status_code == 200
        link = run.json()["input_items_url"]
        assert link == f"/v1/responses/{response.id}/input_items"
        listed = await http.get(
            link, params={"order": "asc"}, headers={"Authorization": "Bearer key-a"}
        )
    assert listed.status_code == 200
    body = listed.json()
    assert body["object"] == "list" and body["has_more"] is False
    assert [i["content"][0]["text"] for i in body["data"]] == [
        "You help with pages.",
        "where is my prompt",
    ]


class KeepAtMost:
    """A refolding policy: keeps everything at load; between model calls, folds all but the
    newest two kept messages once more than `limit` are kept (its own summarizer, no model)."""

    read_bound: ReadBound | None = None

    def __init__(self, limit: int) -> None:
        self.limit = limit

    async def summarize(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(
            text=f"- {len(messages)} messages folded",
            usage=Usage(prompt_tokens=20, completion_tokens=4),
        )

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=list(messages), drop=[])

    def refold_count(self, kept: Sequence[Message], history_tokens: int) -> int:
        return len(kept) - 2 if len(kept) > self.limit else 0


@agent(name="folder", system_prompt="You fold.", history=KeepAtMost(limit=3))
class FoldingAgent:
    @tool
    async def find(self, q: str) -> str:
        """Find q."""
        return f"found {q}"


async def test_input_items_are_the_head_a_refold_between_model_calls_rewrote(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    provider = ScriptedProvider(
        [
            reply("a1"),
            reply("a2"),
            reply(tool_calls=[ToolCall(id="c1", name="find", arguments={"q": "x"})]),
            reply("done"),
        ]
    )
    base_url = await serve(stack, make_module(model=provider, agents=[FoldingAgent]))
    async with async_client(base_url) as client:
        response = await client.responses.create(model="folder", input="q1")
        for text in ("q2", "q3"):
            response = await client.responses.create(previous_response_id=response.id, input=text)
        items = await all_items(client, response.id, order="asc")
    provider.assert_consumed()
    first_call, last_call = sent_as_items(provider.calls[2]), sent_as_items(provider.calls[3])
    assert first_call != last_call[: len(first_call)]  # the refold rewrote the head
    assert item_rows(items) == last_call
    assert item_rows(items[:2]) == [
        ("message", "system", "You fold."),
        ("message", "system", provider.calls[3].messages[1].content),
    ]
    assert "3 messages folded" in items[1].content[0].text  # type: ignore[union-attr]
    assert [r[-1] for r in item_rows(items[2:4])] == ["a2", "q3"]


class SummarizerDown(RecordingEcho):
    """Chat answers; every summary call fails, so each fold a turn owes is left undone."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "history_summary":
            raise ProviderError("provider returned HTTP 503: summarizer overloaded")
        return await super().complete(request)


async def test_input_items_of_a_turn_whose_fold_failed_hold_the_omission_note(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    model = SummarizerDown()
    module = make_module(model=model, history={"max_messages": 2, "summarize": True})
    base_url = await serve(stack, module)
    async with async_client(base_url) as client:
        responses = [await client.responses.create(model="helper", input="point number 0")]
        for n in range(1, 6):
            responses.append(
                await client.responses.create(
                    previous_response_id=responses[-1].id, input=f"point number {n}"
                )
            )
        listed = [await all_items(client, r.id, order="asc") for r in responses]
    assert [item_rows(items) for items in listed] == [sent_as_items(c) for c in model.chats]
    last = item_rows(listed[-1])
    assert last[1][:2] == ("message", "system") and "not in any summary" in last[1][2]
    assert len(last) > 2 + 2  # unsummarized messages ride besides the two kept ones
