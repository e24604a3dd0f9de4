"""OpenAICompatibleProvider against the fake server over real loopback HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolSpec,
    Usage,
    supports_streaming,
)
from bounded_agents.errors import (
    ConfigError,
    ProviderBadResponse,
    ProviderContextExceeded,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
)
from bounded_agents.providers import (
    EchoModel,
    OpenAICompatibleProvider,
    provider_from_settings,
    sends_cache_key,
)
from bounded_agents.providers.openai.compat import _retry_after, _wire_message
from tests.providers.fake_openai import (
    FakeOpenAI,
    Reply,
    chunk,
    completion,
    usage_chunk,
    wire_tool_call,
)

KEY = "sk-test-secret-0123456789"
READ_PAGE = ToolSpec(
    name="read_page",
    description="Read a page.",
    parameters={"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
)

MakeProvider = Callable[..., OpenAICompatibleProvider]


class Sleeps:
    """Records backoff waits instead of spending them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def make_provider(
    fake_openai: FakeOpenAI, http_client: httpx.AsyncClient, sleeps: Sleeps
) -> MakeProvider:
    def make(**overrides: Any) -> OpenAICompatibleProvider:
        kwargs: dict[str, Any] = {
            "base_url": fake_openai.base_url,
            "api_key": KEY,
            "model": "fake-model",
            "timeout": 5.0,
            "max_retries": 3,
            "client": http_client,
            "sleep": sleeps,
        }
        kwargs.update(overrides)
        return OpenAICompatibleProvider(**kwargs)

    return make


def ask(text: str = "hello", tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(messages=[ChatMessage(role="user", content=text)], tools=tools or [])


async def collect(stream: AsyncIterator[TextDelta | ModelResponse]) -> list[Any]:
    return [event async for event in stream]


# --- happy paths -----------------------------------------------------------------------------


async def test_plain_completion(fake_openai: FakeOpenAI, make_provider: MakeProvider) -> None:
    fake_openai.enqueue(Reply.json(completion("Hi there", prompt_tokens=12, completion_tokens=3)))
    provider = make_provider()
    assert isinstance(provider, ModelProvider)
    assert supports_streaming(provider)

    response = await provider.complete(ask())

    assert response == ModelResponse(
        content="Hi there",
        usage=Usage(prompt_tokens=12, completion_tokens=3),
        model="fake-model",
        finish_reason="stop",
    )
    [sent] = fake_openai.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.json() == {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": False,
    }
    fake_openai.assert_consumed()


async def test_max_tokens_is_sent_only_when_set(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    """A cap goes out as `max_tokens` on plain and streamed calls; without one the field is
    absent (test_plain_completion), so the server's own default applies."""
    fake_openai.enqueue(Reply.json(completion("Hi")))
    fake_openai.enqueue(Reply.sse([chunk({"content": "Hi"}), usage_chunk(3, 1)]))
    provider = make_provider(max_tokens=32)

    await provider.complete(ask())
    await collect(provider.stream(ask()))

    assert [r.json()["max_tokens"] for r in fake_openai.requests] == [32, 32]
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        make_provider(max_tokens=0)


async def test_a_threads_calls_carry_one_hashed_prompt_cache_key_and_the_retention(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    """Every call of a thread sends the same `prompt_cache_key`, another thread's differs, the
    thread id itself is in no request, and a request with no thread id sends no key."""
    for _ in range(4):
        fake_openai.enqueue(Reply.json(completion("Hi")))
    provider = make_provider(prompt_cache_key=True, prompt_cache_retention="24h")
    thread = "0b6f2d3c-1f1e-4b7e-9d51-3f1a2b3c4d5e"

    def of(thread_id: str | None) -> ModelRequest:
        return ModelRequest(messages=[ChatMessage(role="user", content="hi")], thread_id=thread_id)

    for request in (of(thread), of(thread), of("another-thread"), of(None)):
        await provider.complete(request)

    bodies = [r.json() for r in fake_openai.requests]
    keys = [b.get("prompt_cache_key") for b in bodies]
    assert keys[0] == keys[1] and keys[0] != keys[2] and keys[3] is None
    assert len(keys[0]) == 34
    assert all(thread not in r.body.decode() for r in fake_openai.requests)
    assert [b["prompt_cache_retention"] for b in bodies] == ["24h"] * 4
    fake_openai.enqueue(Reply.json(completion("Hi")))
    await make_provider().complete(of(thread))  # off by default in the provider
    assert "prompt_cache_key" not in fake_openai.requests[-1].json()


def test_the_cache_key_setting_sends_it_to_openai_only_on_auto() -> None:
    assert sends_cache_key("auto", "https://api.openai.com/v1")
    assert not sends_cache_key("auto", "http://localhost:11434/v1")
    assert sends_cache_key("on", "http://localhost:11434/v1")
    assert not sends_cache_key("off", "https://api.openai.com/v1")


async def test_a_requests_own_max_tokens_replaces_a_configured_cap(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    """The summarizer's call carries its summary's own budget, sent in place of the chat
    answer's cap even when that cap is lower: a summary allowed 3,000 words cut at the chat's
    256 tokens would come back truncated on every fold. With no cap configured none is sent at
    all, since some servers refuse the field (OpenAI's reasoning models want
    `max_completion_tokens`); the loop bounds the answer instead."""
    for _ in range(3):
        fake_openai.enqueue(Reply.json(completion("Hi")))
    capped = ask().model_copy(update={"max_tokens": 20})

    await make_provider(max_tokens=32).complete(capped)
    await make_provider(max_tokens=8).complete(capped)
    await make_provider().complete(capped)

    sent = [r.json() for r in fake_openai.requests]
    assert [body.get("max_tokens") for body in sent] == [20, 20, None]
    assert "max_tokens" not in sent[2]


async def test_request_body_carries_tools_and_the_tool_exchange(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.json(completion("done")))
    call = ToolCall(id="call_abc", name="read_page", arguments={"url": "https://x.test"})
    request = ModelRequest(
        messages=[
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(role="user", content="read it"),
            ChatMessage(role="assistant", content="", tool_calls=[call]),
            ChatMessage(role="tool", content="<html>", tool_call_id="call_abc"),
        ],
        tools=[READ_PAGE],
    )

    await make_provider().complete(request)

    body = fake_openai.requests[0].json()
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "read_page", "arguments": '{"url": "https://x.test"}'},
                }
            ],
        },
        {"role": "tool", "content": "<html>", "tool_call_id": "call_abc"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_page",
                "description": "Read a page.",
                "parameters": READ_PAGE.parameters,
            },
        }
    ]


async def test_completion_with_tool_calls_parses_arguments(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(
        Reply.json(
            completion(
                None,
                [
                    wire_tool_call("call_1", "read_page", '{"url": "u"}'),
                    wire_tool_call("call_2", "now", ""),
                ],
            )
        )
    )
    response = await make_provider().complete(ask(tools=[READ_PAGE]))
    assert response.content == ""
    assert response.tool_calls == [
        ToolCall(id="call_1", name="read_page", arguments={"url": "u"}),
        ToolCall(id="call_2", name="now", arguments={}),
    ]


@pytest.mark.parametrize("usage", ["absent", None, {}], ids=["absent", "null", "empty"])
async def test_a_completion_without_usage_is_booked_by_the_estimate_not_as_free(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, usage: Any
) -> None:
    body = completion("Hi there")
    if usage == "absent":
        del body["usage"]
    else:
        body["usage"] = usage
    fake_openai.enqueue(Reply.json(body))

    response = await make_provider().complete(ask("hello"))

    # "hello": ceil(5 / 4) + 4 = 6 in; "Hi there": ceil(8 / 4) + 4 = 6 out, flagged as estimated
    assert response.usage == Usage(prompt_tokens=6, completion_tokens=6, estimated=True)


async def test_cached_prompt_tokens_are_read_where_the_server_reports_them(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    openai = completion("hi", prompt_tokens=2000)
    openai["usage"]["prompt_tokens_details"] = {"cached_tokens": 1920}
    llama_server = completion("hi", prompt_tokens=300)
    llama_server["timings"] = {"cache_n": 256, "prompt_n": 44}
    silent = completion("hi", prompt_tokens=300)
    for body in (openai, llama_server, silent):
        fake_openai.enqueue(Reply.json(body))
    provider = make_provider()
    got = [(await provider.complete(ask("hello"))).usage.cached_tokens for _ in range(3)]
    assert got == [1920, 256, None]

    streamed = usage_chunk(2000, 4)
    streamed["usage"]["prompt_tokens_details"] = {"cached_tokens": 1024}
    fake_openai.enqueue(Reply.sse([chunk({"content": "ok"}), streamed]))
    events = await collect(provider.stream(ask("hello")))
    assert events[-1].usage == Usage(prompt_tokens=2000, completion_tokens=4, cached_tokens=1024)


async def test_a_stream_without_a_usage_chunk_is_booked_by_the_estimate(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(
        Reply.sse([chunk({"content": "Hello, world"}), chunk({}, finish_reason="stop")])
    )

    events = await collect(make_provider().stream(ask("hello")))

    # "Hello, world": ceil(12 / 4) + 4 = 7 out
    assert events[-1].usage == Usage(prompt_tokens=6, completion_tokens=7, estimated=True)


async def test_streamed_text(fake_openai: FakeOpenAI, make_provider: MakeProvider) -> None:
    fake_openai.enqueue(
        Reply.sse(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Hel"}),
                chunk({"content": "lo, "}),
                chunk({"content": "world"}),
                chunk({}, finish_reason="stop"),
                usage_chunk(9, 4),
            ]
        )
    )

    events = await collect(make_provider().stream(ask()))

    assert events[:-1] == [TextDelta(text="Hel"), TextDelta(text="lo, "), TextDelta(text="world")]
    assert events[-1] == ModelResponse(
        content="Hello, world",
        usage=Usage(prompt_tokens=9, completion_tokens=4),
        model="fake-model",
        finish_reason="stop",
    )
    body = fake_openai.requests[0].json()
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert fake_openai.requests[0].headers["accept"] == "text/event-stream"


async def test_streamed_tool_call_split_across_chunks(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    def tool_delta(index: int, **fields: Any) -> dict[str, Any]:
        function = {k: v for k, v in fields.items() if k in ("name", "arguments")}
        delta: dict[str, Any] = {"index": index, "function": function}
        if "id" in fields:
            delta |= {"id": fields["id"], "type": "function"}
        return chunk({"tool_calls": [delta]})

    fake_openai.enqueue(
        Reply.sse(
            [
                chunk({"role": "assistant", "content": None}),
                tool_delta(0, id="call_a", name="read_page", arguments=""),
                tool_delta(0, arguments='{"ur'),
                tool_delta(1, id="call_b", name="read_page", arguments='{"url"'),
                tool_delta(0, arguments='l": "https://a.test"}'),
                tool_delta(1, arguments=': "b"}'),
                chunk({}, finish_reason="tool_calls"),
                usage_chunk(20, 15),
            ]
        )
    )

    events = await collect(make_provider().stream(ask(tools=[READ_PAGE])))

    [final] = events
    assert final == ModelResponse(
        content="",
        tool_calls=[
            ToolCall(id="call_a", name="read_page", arguments={"url": "https://a.test"}),
            ToolCall(id="call_b", name="read_page", arguments={"url": "b"}),
        ],
        usage=Usage(prompt_tokens=20, completion_tokens=15),
        model="fake-model",
        finish_reason="tool_calls",
    )


# --- retries -------------------------------------------------------------------------------


async def test_429_honours_retry_after_then_succeeds(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, sleeps: Sleeps
) -> None:
    fake_openai.enqueue(
        Reply.error(429, "slow down", headers={"Retry-After": "2"}),
        Reply.json(completion("ok")),
    )
    response = await make_provider(backoff_base=0.01).complete(ask())
    assert response.content == "ok"
    assert len(fake_openai.requests) == 2
    assert sleeps.waits == [2.0]


async def test_retry_after_is_capped(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, sleeps: Sleeps
) -> None:
    fake_openai.enqueue(
        Reply.error(429, "slow down", headers={"Retry-After": "3600"}),
        Reply.json(completion("ok")),
    )
    await make_provider(max_retry_wait=1.5).complete(ask())
    assert sleeps.waits == [1.5]


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert _retry_after(httpx.Headers({"Retry-After": "7"})) == 7.0
    assert 25.0 < (_retry_after(httpx.Headers({"Retry-After": soon})) or 0.0) <= 30.0
    assert _retry_after(httpx.Headers({"Retry-After": "soon-ish"})) is None
    assert _retry_after(httpx.Headers()) is None


async def test_429_forever_is_rate_limited(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(*[Reply.error(429, "quota") for _ in range(3)])
    with pytest.raises(ProviderRateLimited, match="HTTP 429: quota"):
        await make_provider(max_retries=2).complete(ask())
    assert len(fake_openai.requests) == 3


async def test_500_twice_then_success_backs_off_exponentially(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, sleeps: Sleeps
) -> None:
    fake_openai.enqueue(
        Reply.error(500, "boom"), Reply.error(502, "boom"), Reply.json(completion("ok"))
    )
    response = await make_provider(backoff_base=0.25).complete(ask())
    assert response.content == "ok"
    assert len(fake_openai.requests) == 3
    assert sleeps.waits == [0.25, 0.5]


async def test_500_forever_fails_after_max_retries(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(*[Reply.error(503, "overloaded") for _ in range(4)])
    with pytest.raises(ProviderError, match="HTTP 503: overloaded") as info:
        await make_provider(max_retries=3).complete(ask())
    assert type(info.value) is ProviderError
    assert len(fake_openai.requests) == 4
    fake_openai.assert_consumed()


async def test_400_fails_at_once_with_the_providers_message(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, sleeps: Sleeps
) -> None:
    fake_openai.enqueue(Reply.error(400, "messages: field required"), Reply.json(completion()))
    with pytest.raises(ProviderError, match="HTTP 400: messages: field required") as info:
        await make_provider().complete(ask())
    assert type(info.value) is ProviderError
    assert len(fake_openai.requests) == 1
    assert sleeps.waits == []


async def test_plain_text_error_body_is_quoted(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.text("model not found", status=404, content_type="text/plain"))
    with pytest.raises(ProviderError, match="HTTP 404: model not found"):
        await make_provider().complete(ask())


async def test_stream_open_is_retried_on_500(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.error(500, "boom"), Reply.sse([chunk({"content": "ok"})]))
    events = await collect(make_provider().stream(ask()))
    assert events[0] == TextDelta(text="ok")
    assert events[-1].content == "ok"
    assert len(fake_openai.requests) == 2


async def test_stream_open_400_fails_at_once(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.error(400, "bad tools"))
    with pytest.raises(ProviderError, match="bad tools"):
        await collect(make_provider().stream(ask()))
    assert len(fake_openai.requests) == 1


# --- bad responses ---------------------------------------------------------------------------


async def test_malformed_json_is_a_bad_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.text('{"choices": [', status=200))
    with pytest.raises(ProviderBadResponse, match="invalid JSON"):
        await make_provider().complete(ask())
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("usage", [{"prompt_tokens": "many"}, {"completion_tokens": 1e400}])
async def test_malformed_usage_is_a_bad_response_not_a_crash(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, usage: dict[str, Any]
) -> None:
    body = completion("hi")
    body["usage"] = usage
    fake_openai.enqueue(Reply.text(json.dumps(body).replace("Infinity", "1e400")))
    with pytest.raises(ProviderBadResponse, match=r"usage|not a chat completion"):
        await make_provider().complete(ask())


async def test_a_streamed_tool_call_with_a_bad_index_is_a_bad_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.sse([chunk({"tool_calls": [{"index": "first", "id": "c"}]})]))
    with pytest.raises(ProviderBadResponse):
        async for _event in make_provider().stream(ask()):
            pass


async def test_missing_choices_is_a_bad_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.json({"id": "x", "object": "chat.completion"}))
    with pytest.raises(ProviderBadResponse, match="not a chat completion"):
        await make_provider().complete(ask())


@pytest.mark.parametrize("arguments", ['{"url": ', '["not", "an", "object"]'])
async def test_bad_tool_arguments_are_a_bad_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, arguments: str
) -> None:
    bad_call = wire_tool_call("c1", "read_page", arguments)
    fake_openai.enqueue(Reply.json(completion(None, [bad_call])))
    with pytest.raises(ProviderBadResponse, match="arguments of tool call 'read_page'"):
        await make_provider().complete(ask(tools=[READ_PAGE]))


async def test_bad_streamed_tool_arguments_are_a_bad_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    delta = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "read_page", "arguments": "{oops"},
    }
    fake_openai.enqueue(Reply.sse([chunk({"tool_calls": [delta]})]))
    with pytest.raises(ProviderBadResponse, match="not valid JSON"):
        await collect(make_provider().stream(ask(tools=[READ_PAGE])))


async def test_stream_cut_mid_way_is_a_bad_response_and_not_retried(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(
        Reply.sse([chunk({"content": "Hel"}), chunk({"content": "lo"})], cut=True),
        Reply.sse([chunk({"content": "never sent"})]),
    )
    seen: list[Any] = []
    with pytest.raises(ProviderBadResponse, match="cut off"):
        async for event in make_provider().stream(ask()):
            seen.append(event)
    assert seen == [TextDelta(text="Hel"), TextDelta(text="lo")]
    assert len(fake_openai.requests) == 1


async def test_stream_ending_without_done_is_a_bad_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.sse([chunk({"content": "Hel"})], done=False))
    with pytest.raises(ProviderBadResponse, match=r"before its \[DONE\]"):
        await collect(make_provider().stream(ask()))


async def test_stream_with_malformed_chunk_is_a_bad_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.sse([chunk({"content": "a"}), "{not json"]))
    with pytest.raises(ProviderBadResponse, match="invalid JSON"):
        await collect(make_provider().stream(ask()))


async def test_error_event_mid_stream_is_a_provider_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.sse([{"error": {"message": "model crashed"}}]))
    with pytest.raises(ProviderError, match="model crashed"):
        await collect(make_provider().stream(ask()))


CONTEXT_EXCEEDED = (
    "This model's maximum context length is 2048 tokens. However, you requested 5036 tokens "
    "(5031 in the messages, 5 in the completion). Please reduce the length of the messages."
)
"""What llama-cpp-python's server answers an over-long prompt unstreamed (its own words)."""


def _empty_stream() -> Reply:
    """A 200 event stream that ends with no event at all: what llama-cpp-python's server sends
    for an over-long prompt when asked to stream (the reason goes to its log only)."""
    return Reply(headers={"Content-Type": "text/event-stream"}, chunks=())


async def test_an_empty_stream_surfaces_the_servers_own_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    """It said "stream ended before its [DONE] marker"; the server's reason is asked for."""
    fake_openai.enqueue(_empty_stream(), Reply.error(400, CONTEXT_EXCEEDED))
    with pytest.raises(ProviderError, match="maximum context length is 2048") as caught:
        await collect(make_provider().stream(ask("word " * 5000)))
    assert not isinstance(caught.value, ProviderBadResponse)
    streamed, unstreamed = fake_openai.requests
    assert streamed.json()["stream"] is True and unstreamed.json()["stream"] is False
    assert unstreamed.json()["messages"] == streamed.json()["messages"]


async def test_an_empty_stream_then_an_unstreamed_answer_is_that_answer(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(_empty_stream(), Reply.json(completion("Hello")))
    events = await collect(make_provider().stream(ask()))
    assert events[0] == TextDelta(text="Hello")
    assert isinstance(events[1], ModelResponse) and events[1].content == "Hello"
    assert len(fake_openai.requests) == 2


async def test_a_llama_cpp_error_line_is_the_servers_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    """llama.cpp's own server sends a failure after the 200 as an `error:` line, not `data:`."""
    line = json.dumps(
        {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
        }
    )
    fake_openai.enqueue(
        Reply(
            headers={"Content-Type": "text/event-stream"}, chunks=(f"error: {line}\n\n".encode(),)
        )
    )
    with pytest.raises(ProviderError, match="exceeds the available context size"):
        await collect(make_provider().stream(ask()))
    assert len(fake_openai.requests) == 1


# --- timeouts --------------------------------------------------------------------------------


async def test_timeout_is_retried_then_provider_timeout(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply(delay=2.0), Reply(delay=2.0))
    with pytest.raises(ProviderTimeout, match=r"within 0.5s"):
        await make_provider(timeout=0.5, max_retries=1).complete(ask())
    assert len(fake_openai.requests) == 2


async def test_timeout_then_success(fake_openai: FakeOpenAI, make_provider: MakeProvider) -> None:
    fake_openai.enqueue(Reply(delay=2.0), Reply.json(completion("late but fine")))
    response = await make_provider(timeout=0.5).complete(ask())
    assert response.content == "late but fine"


async def test_stream_open_timeout_is_provider_timeout(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply(delay=2.0))
    with pytest.raises(ProviderTimeout):
        await collect(make_provider(timeout=0.5, max_retries=0).stream(ask()))


# --- auth, ownership, configuration ---------------------------------------------------------


async def test_authorization_header_only_with_a_key(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.json(completion()), Reply.json(completion()))
    await make_provider(api_key=KEY).complete(ask())
    await make_provider(api_key=None).complete(ask())
    with_key, without_key = fake_openai.requests
    assert with_key.headers["authorization"] == f"Bearer {KEY}"
    assert "authorization" not in without_key.headers


async def test_api_key_never_appears_in_errors_or_repr(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.enqueue(*[Reply.error(500, "boom") for _ in range(2)])
    provider = make_provider(max_retries=1)
    with pytest.raises(ProviderError) as info:
        await provider.complete(ask())
    assert KEY not in str(info.value)
    assert KEY not in repr(provider)
    assert caplog.records, "a retry is logged"
    assert all(KEY not in r.getMessage() for r in caplog.records)


async def test_owned_client_is_closed_by_aclose(fake_openai: FakeOpenAI) -> None:
    fake_openai.enqueue(Reply.json(completion("own client")))
    provider = OpenAICompatibleProvider(
        base_url=fake_openai.base_url + "/", api_key=None, model="m", timeout=5.0
    )
    async with provider:
        response = await provider.complete(ask())
    assert response.content == "own client"
    assert provider._client.is_closed


async def test_injected_client_is_left_open(
    make_provider: MakeProvider, http_client: httpx.AsyncClient
) -> None:
    await make_provider().aclose()
    assert not http_client.is_closed


async def test_provider_from_settings() -> None:
    assert isinstance(provider_from_settings("echo", None, None, None, 60.0), EchoModel)
    provider = provider_from_settings("OpenAI", "http://localhost:11434/v1/", None, "llama3", 9.0)
    assert isinstance(provider, OpenAICompatibleProvider)
    assert provider.url == "http://localhost:11434/v1/chat/completions"
    assert (provider.model, provider.timeout, provider.max_tokens) == ("llama3", 9.0, None)
    await provider.aclose()
    default = provider_from_settings("openai", None, "k", "gpt-4o-mini", 60.0, max_tokens=64)
    assert isinstance(default, OpenAICompatibleProvider)
    assert default.max_tokens == 64
    assert default.url == "https://api.openai.com/v1/chat/completions"
    await default.aclose()
    with pytest.raises(ConfigError, match="needs a model name"):
        provider_from_settings("openai", None, None, None, 60.0)
    with pytest.raises(ConfigError, match="unknown model kind 'gemini'"):
        provider_from_settings("gemini", None, None, "m", 60.0)


def test_wire_arguments_are_json_strings() -> None:
    """The tool-call arguments sent back are a JSON string, as OpenAI requires."""
    call = ToolCall(id="c", name="n", arguments={"a": [1, 2]})
    wire = _wire_message(ChatMessage(role="assistant", content="x", tool_calls=[call]))
    assert json.loads(wire["tool_calls"][0]["function"]["arguments"]) == {"a": [1, 2]}
    assert wire["content"] == "x"


async def test_abandoned_stream_closes_its_response(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(
        Reply.sse([chunk({"content": "a"}), chunk({"content": "b"})]), Reply.json(completion("x"))
    )
    provider = make_provider()
    stream = provider.stream(ask())
    assert await anext(stream) == TextDelta(text="a")
    await stream.aclose()  # type: ignore[attr-defined]
    assert (await provider.complete(ask())).content == "x"


async def test_the_cap_goes_in_max_completion_tokens_when_asked(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    """OpenAI's reasoning models refuse `max_tokens`: with `max_completion_tokens` chosen the
    cap (and the summarizer's lower one) goes there, and `max_tokens` is never sent."""
    fake_openai.enqueue(Reply.json(completion("Hi")))
    fake_openai.enqueue(Reply.json(completion("Hi")))
    provider = make_provider(max_tokens=32, max_tokens_field="max_completion_tokens")

    await provider.complete(ask())
    await provider.complete(ask().model_copy(update={"max_tokens": 20}))

    sent = [r.json() for r in fake_openai.requests]
    assert [body["max_completion_tokens"] for body in sent] == [32, 20]
    assert all("max_tokens" not in body for body in sent)
    with pytest.raises(ValueError, match="max_tokens_field must be one of"):
        make_provider(max_tokens_field="max_output_tokens")


async def test_the_finish_reason_is_read_so_a_cut_off_answer_is_known(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    """A summary stopped by its token cap must not be stored as whole: the loop can only
    refuse it if the provider says so (`finish_reason: length`), also for a reasoning model's
    `content: null`."""
    fake_openai.enqueue(Reply.json(completion("half a sum", finish_reason="length")))
    fake_openai.enqueue(Reply.json(completion(None, finish_reason="length")))
    fake_openai.enqueue(Reply.json(completion("ok", finish_reason=None)))
    provider = make_provider()
    got = [await provider.complete(ask()) for _ in range(3)]
    assert [(r.content, r.finish_reason) for r in got] == [
        ("half a sum", "length"),
        ("", "length"),
        ("ok", None),
    ]


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "too long", "code": "context_length_exceeded"}},
        {"error": {"message": "Requested tokens (2100) exceed context window of 2048"}},
        {"error": "This model's maximum context length is 4096 tokens"},
    ],
)
async def test_a_prompt_over_the_context_is_its_own_final_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, body: dict[str, Any]
) -> None:
    """Resending it cannot succeed, so it is not retried; a fold splits its chunk on it."""
    fake_openai.enqueue(Reply.json(body, status=400))
    with pytest.raises(ProviderContextExceeded):
        await make_provider(max_retries=3).complete(ask())
    assert len(fake_openai.requests) == 1


async def test_any_other_400_stays_a_plain_provider_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_openai.enqueue(Reply.json({"error": {"message": "bad role"}}, status=400))
    with pytest.raises(ProviderError) as caught:
        await make_provider().complete(ask())
    assert not isinstance(caught.value, ProviderContextExceeded)
