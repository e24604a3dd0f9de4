"""The official `openai` SDK, unchanged, against the app served by uvicorn on loopback, on
SQLite and PostgreSQL: conversations, responses (plain and streamed), the transcript as items,
actor isolation and errors. The sync client runs in a worker thread, since the server shares
this test's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI, OpenAI

from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.errors import ProviderTimeout
from bounded_agents.http import build_router
from bounded_agents.http.errors import install_error_handlers
from bounded_agents.http.openai.api import build_openai_router
from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.registry import agent
from tests.http.conftest import HelperAgent, ModuleFactory, serve_live


@agent(name="other", system_prompt="Another agent.")
class OtherAgent:
    pass


def openai_app(module: AgentModule) -> FastAPI:
    app = FastAPI(lifespan=module.lifespan)
    app.include_router(build_router(module))
    app.include_router(build_openai_router(module))
    install_error_handlers(app)
    return app


async def serve(stack: AsyncExitStack, module: AgentModule) -> str:
    return await serve_live(stack, openai_app(module)) + "/v1"


def async_client(base_url: str, key: str = "key-a") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)


@pytest.fixture
async def base_url(stack: AsyncExitStack, make_module: ModuleFactory) -> str:
    return await serve(stack, make_module(history={"max_messages": 4}))


@pytest.fixture
async def alice(base_url: str) -> AsyncIterator[AsyncOpenAI]:
    async with async_client(base_url) as client:
        yield client


async def test_a_conversation_with_the_async_client(alice: AsyncOpenAI) -> None:
    conversation = await alice.conversations.create(metadata={"agent": "helper", "title": "t"})
    assert conversation.object == "conversation"
    assert conversation.metadata == {"agent": "helper", "title": "t"}
    assert (await alice.conversations.retrieve(conversation.id)).id == conversation.id

    first = await alice.responses.create(
        model="helper", conversation=conversation.id, input="hello over the SDK"
    )
    assert first.status == "completed"
    assert first.output_text == 'Echo (saw 2 messages): "hello over the SDK"'
    assert first.conversation is not None and first.conversation.id == conversation.id
    assert first.usage is not None and first.usage.input_tokens > 0
    assert first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens

    retrieved = await alice.responses.retrieve(first.id)
    assert retrieved.output_text == first.output_text
    assert retrieved.usage == first.usage

    # a tool turn, as message items (the SDK's input shape)
    tool_turn = await alice.responses.create(
        conversation={"id": conversation.id},
        input=[{"role": "user", "content": "/read_page https://example.org/sdk"}],
    )
    assert [o.type for o in tool_turn.output] == ["function_call", "message"]
    call = tool_turn.output[0]
    assert call.type == "function_call" and call.name == "read_page"
    assert "returned" in tool_turn.output_text

    items = [i async for i in alice.conversations.items.list(conversation.id, order="asc")]
    assert [(i.type, getattr(i, "role", None)) for i in items] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
    ]
    output = items[4]
    assert output.type == "function_call_output" and isinstance(output.output, str)
    assert len(output.output) > 10_000 and output.call_id == call.call_id
    assert items[5].id == tool_turn.output[1].id  # one id for one stored message

    newest_first = [i.id async for i in alice.conversations.items.list(conversation.id)]
    assert newest_first == [i.id for i in reversed(items)]


async def test_items_page_in_both_orders(alice: AsyncOpenAI) -> None:
    first = await alice.responses.create(model="helper", input="one")
    assert first.conversation is not None
    conversation_id = first.conversation.id
    await alice.responses.create(previous_response_id=first.id, input="/read_page https://a.b")
    await alice.responses.create(previous_response_id=first.id, input="three")
    everything = [i.id async for i in alice.conversations.items.list(conversation_id, order="asc")]
    assert len(everything) == 8

    for order, expected in (("asc", everything), ("desc", everything[::-1])):
        page = await alice.conversations.items.list(conversation_id, order=order, limit=3)
        assert page.has_more
        seen = [i.id async for i in page]  # the SDK follows `after` to the end
        assert seen == expected


async def test_an_item_cursor_past_the_last_possible_seq_is_a_400(alice: AsyncOpenAI) -> None:
    """Item ids carry a seq; one past the 32-bit column is refused before any SQL (it was a
    503 on PostgreSQL), and the largest seq there can be is still a cursor like any other."""
    first = await alice.responses.create(model="helper", input="one")
    assert first.conversation is not None
    conversation_id = first.conversation.id
    for cursor in ("msg_2147483648", "fc_9999999999_0", "fco_2147483648_1"):
        with pytest.raises(openai.BadRequestError) as refused:
            await alice.conversations.items.list(conversation_id, after=cursor)
        assert (refused.value.code, refused.value.param) == ("invalid_parameter", "after")
    newest_first = alice.conversations.items.list(conversation_id, after="msg_2147483647")
    assert len([i.id async for i in newest_first]) == 2  # everything is before it
    oldest_first = alice.conversations.items.list(
        conversation_id, after="msg_2147483647", order="asc"
    )
    assert [i.id async for i in oldest_first] == []  # nothing is after it


async def test_previous_response_id_continues_that_thread(alice: AsyncOpenAI) -> None:
    first = await alice.responses.create(model="helper", input="start a thread")
    second = await alice.responses.create(previous_response_id=first.id, input="and go on")
    assert first.conversation is not None and second.conversation is not None
    assert second.conversation.id == first.conversation.id
    assert second.previous_response_id == first.id
    assert second.output_text.startswith("Echo (saw 4 messages)")


async def test_the_history_stays_bounded(
    stack: AsyncExitStack, base_url: str, alice: AsyncOpenAI
) -> None:
    response = await alice.responses.create(model="helper", input="turn 0")
    for n in range(1, 6):
        response = await alice.responses.create(previous_response_id=response.id, input=f"turn {n}")
    assert response.output_text.startswith("Echo (saw 5 messages)")  # system + 4 kept
    root = base_url.removesuffix("/v1")
    async with httpx.AsyncClient(base_url=root, trust_env=False) as http:
        run = await http.get(f"/runs/{response.id}", headers={"Authorization": "Bearer key-a"})
    assert run.status_code == 200
    assert run.json()["rows_read"] == 4  # the bounded read, not the 12-message thread


async def test_streaming_with_the_async_client(alice: AsyncOpenAI) -> None:
    stream = await alice.responses.create(
        model="helper", input="stream this answer please", stream=True
    )
    events = [event async for event in stream]
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == deltas
    assert completed.response.usage is not None and completed.response.usage.output_tokens > 0
    assert completed.response.id == events[0].response.id  # type: ignore[union-attr]

    retrieved = await alice.responses.retrieve(completed.response.id)
    assert retrieved.output_text == deltas
    assert retrieved.output[-1].id == completed.response.output[-1].id


async def test_the_stream_helper_accumulates_a_tool_turn(alice: AsyncOpenAI) -> None:
    async with alice.responses.stream(
        model="helper", input="/read_page https://example.org/stream"
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert "response.output_item.added" in kinds
    assert [o.type for o in final.output] == ["function_call", "message"]
    assert "returned" in final.output_text


async def test_the_sync_client_plain_and_streamed(base_url: str) -> None:
    def run() -> tuple[str, str, list[str]]:
        with OpenAI(base_url=base_url, api_key="key-a", max_retries=0) as client:
            conversation = client.conversations.create(metadata={"agent": "helper"})
            answer = client.responses.create(
                model="helper", conversation=conversation.id, input="from a sync client"
            )
            with client.responses.create(
                model="helper", conversation=conversation.id, input="streamed", stream=True
            ) as stream:
                kinds = [event.type for event in stream]
            items = list(client.conversations.items.list(conversation.id, order="asc"))
            return answer.output_text, items[-1].id, kinds

    text, last_item, kinds = await asyncio.to_thread(run)
    assert text == 'Echo (saw 2 messages): "from a sync client"'
    assert last_item == "msg_4"
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


async def test_actors_see_only_their_own(base_url: str, alice: AsyncOpenAI) -> None:
    mine = await alice.responses.create(model="helper", input="private")
    assert mine.conversation is not None
    async with async_client(base_url, key="key-b") as bob:
        with pytest.raises(openai.NotFoundError) as caught:
            await bob.conversations.retrieve(mine.conversation.id)
        assert caught.value.code == "thread_not_found"
        assert caught.value.param == "conversation"
        with pytest.raises(openai.NotFoundError):
            await bob.conversations.items.list(mine.conversation.id)
        with pytest.raises(openai.NotFoundError):
            await bob.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError) as caught:
            await bob.responses.create(previous_response_id=mine.id, input="let me in")
        assert caught.value.param == "previous_response_id"
        with pytest.raises(openai.NotFoundError):
            await bob.responses.create(conversation=mine.conversation.id, input="let me in")
    async with async_client(base_url, key="wrong") as nobody:
        with pytest.raises(openai.AuthenticationError) as denied:
            await nobody.models.list()
        assert denied.value.body == {
            "message": "a valid API key is required (Authorization: Bearer <key>)",
            "type": "invalid_request_error",
            "param": None,
            "code": "unauthorized",
        }


async def test_errors_in_the_openai_shape(alice: AsyncOpenAI) -> None:
    cases: list[tuple[dict[str, Any], type[openai.APIStatusError], str, str | None]] = [
        ({"model": "nobody", "input": "hi"}, openai.NotFoundError, "agent_not_found", "model"),
        ({"input": "hi"}, openai.BadRequestError, "invalid_parameter", "model"),
        (
            {"model": "helper", "input": "hi", "temperature": 0.5},
            openai.BadRequestError,
            "unsupported_parameter",
            "temperature",
        ),
        (
            {"model": "helper", "input": "hi", "extra_body": {"bogus": 1}},
            openai.BadRequestError,
            "unknown_parameter",
            "bogus",
        ),
        ({"model": "helper", "input": "   "}, openai.BadRequestError, "invalid_parameter", "input"),
        (
            {"model": "helper", "input": "a\x00b"},
            openai.BadRequestError,
            "invalid_content",
            "input",
        ),
        (
            {"model": "helper", "conversation": "not-a-uuid", "input": "hi"},
            openai.NotFoundError,
            "thread_not_found",
            "conversation",
        ),
    ]
    for kwargs, error, code, param in cases:
        with pytest.raises(error) as caught:
            await alice.responses.create(**kwargs)
        assert (caught.value.code, caught.value.param) == (code, param), kwargs
        assert caught.value.type == "invalid_request_error"

    other = await alice.conversations.create(metadata={"agent": "helper"})
    with pytest.raises(openai.BadRequestError) as wrong_model:
        await alice.responses.create(model="other", conversation=other.id, input="hi")
    assert wrong_model.value.param == "model"
    with pytest.raises(openai.BadRequestError) as extra:
        await alice.conversations.create(metadata={"agent": "helper", "colour": "red"})
    assert extra.value.code == "unsupported_parameter"


async def test_prompt_cache_parameters_are_accepted_and_change_nothing(alice: AsyncOpenAI) -> None:
    """`prompt_cache_key` and `prompt_cache_retention` only route a provider's cache: this
    server's history decides the prompt, so both are accepted (an SDK user's code sets them
    by default in some frameworks) rather than refused as unknown."""
    made = await alice.responses.create(
        model="helper", input="hi", prompt_cache_key="thread-7", prompt_cache_retention="24h"
    )
    assert made.status == "completed"


class FailingModel(EchoModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ProviderTimeout("the model did not answer in time")

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        raise ProviderTimeout("the model did not answer in time")
        yield  # pragma: no cover


async def test_a_failed_turn_is_not_retried_and_can_be_retrieved(
    stack: AsyncExitStack, make_module: ModuleFactory
) -> None:
    base_url = await serve(stack, make_module(model=FailingModel()))
    async with AsyncOpenAI(base_url=base_url, api_key="key-a") as client:  # default retries
        with pytest.raises(openai.InternalServerError) as caught:
            await client.responses.create(model="helper", input="will fail")
        response = caught.value.response
        assert response.status_code == 502
        assert response.headers["x-should-retry"] == "false"
        assert caught.value.code == "provider_timeout"
        run_id = response.json()["response_id"]
        failed = await client.responses.retrieve(run_id)
        assert failed.status == "failed"
        assert failed.error is not None and failed.error.code == "server_error"
        assert failed.error.type == "provider_timeout"  # type: ignore[attr-defined]
        items = [i async for i in client.conversations.items.list(failed.conversation.id)]  # type: ignore[union-attr]
        assert len(items) == 1  # one user message: the SDK did not send it again

        stream = await client.responses.create(model="helper", input="fail streaming", stream=True)
        events = [event async for event in stream]
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    error, failed_event = events[-2], events[-1]
    assert error.type == "error" and error.code == "provider_timeout"
    assert failed_event.type == "response.failed"
    assert failed_event.response.status == "failed"


async def test_models_are_the_agents(stack: AsyncExitStack, make_module: ModuleFactory) -> None:
    base_url = await serve(stack, make_module(agents=[HelperAgent, OtherAgent]))
    async with async_client(base_url) as client:
        assert sorted([m.id async for m in client.models.list()]) == ["helper", "other"]
        assert (await client.models.retrieve("other")).id == "other"
        with pytest.raises(openai.BadRequestError) as which:
            await client.conversations.create()  # two agents: which one?
        assert which.value.param == "metadata.agent"
        via_model = await client.conversations.create(extra_body={"model": "other"})
        assert via_model.metadata == {"agent": "other"}
