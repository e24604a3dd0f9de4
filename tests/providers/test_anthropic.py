"""`AnthropicProvider` through the real `anthropic` SDK against a loopback server speaking the
Messages wire format: the request it sends (system apart, tool_use / tool_result blocks, the
cache breakpoints), the usage it books, its stop reasons, retries and a cut stream.

The SDK is a `dev` extra, so `make test` has it: a missing package fails collection here rather
than skipping the provider's tests."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic  # noqa: F401  (required: see the module docstring)
import pytest
from pydantic import SecretStr

from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import (
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolSpec,
    supports_token_counting,
)
from bounded_agents.errors import (
    ConfigError,
    ProviderBadResponse,
    ProviderContextExceeded,
    ProviderError,
    ProviderRateLimited,
)
from bounded_agents.module import model_from_settings
from bounded_agents.providers.anthropic import AnthropicProvider, messages_body
from bounded_agents.settings import Settings
from tests.providers import fake_anthropic as wire
from tests.providers.fake_anthropic import FakeAnthropic
from tests.providers.fake_openai import Reply

RECORDED = Path(__file__).parent / "recorded" / "anthropic_breakpoints.json"
SYSTEM = "You are a careful assistant. " * 120  # ~3,600 chars: past the 1,024-token minimum
SUMMARY = "Summary of earlier turns: the user works on warehouse WH-42. " * 20
LOOKUP = ToolSpec(
    name="lookup",
    description="Look a code up.",
    parameters={"type": "object", "properties": {"code": {"type": "string"}}},
)


_OPEN: list[AnthropicProvider] = []
"""Providers made by `_provider`, closed after each test (the SDK owns its HTTP client)."""


@pytest.fixture(autouse=True)
async def _close_providers() -> AsyncIterator[None]:
    yield
    while _OPEN:
        await _OPEN.pop().aclose()


def _provider(fake: FakeAnthropic, **kwargs: Any) -> AnthropicProvider:
    waits: list[float] = kwargs.pop("waits", [])

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    provider = AnthropicProvider(
        api_key="sk-ant-test",
        model="claude-sonnet-4-5",
        base_url=fake.base_url.removesuffix("/v1"),
        sleep=sleep,
        **kwargs,
    )
    _OPEN.append(provider)
    return provider


def _turns(n: int) -> list[ChatMessage]:
    """A thread's prompt after `n` turns, each a question, a lookup and an answer."""
    messages = [
        ChatMessage(role="system", content=SYSTEM),
        ChatMessage(role="system", content=SUMMARY),
    ]
    for i in range(n):
        messages.append(ChatMessage(role="user", content=f"What is code {i}?"))
        call = ToolCall(id=f"call_{i}", name="lookup", arguments={"code": str(i)})
        messages.append(ChatMessage(role="assistant", content="", tool_calls=[call]))
        messages.append(
            ChatMessage(role="tool", content=f"code {i} is bin {i * 7}", tool_call_id=f"call_{i}")
        )
        messages.append(ChatMessage(role="assistant", content=f"Code {i} is bin {i * 7}."))
    return messages


def _request(n: int) -> ModelRequest:
    return ModelRequest(
        messages=[*_turns(n), ChatMessage(role="user", content=f"And code {n}?")], tools=[LOOKUP]
    )


def _marked(body: dict[str, Any]) -> list[str]:
    """Where the breakpoints are: `system[i]` / `messages[i][j]`."""
    found = [f"system[{i}]" for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for i, turn in enumerate(body["messages"]):
        found += [
            f"messages[{i}][{j}]" for j, b in enumerate(turn["content"]) if "cache_control" in b
        ]
    return found


async def test_a_call_sends_system_apart_tool_blocks_and_breakpoints_and_books_cache_usage(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.enqueue(wire.message("bin 14", input_tokens=20, read=3000, written=400))
    provider = _provider(fake_anthropic)

    response = await provider.complete(_request(2))

    [sent] = fake_anthropic.requests
    assert sent.path == "/v1/messages"
    # the SDK's releases differ on the header (x-api-key up to 1.x, a bearer token in 2.x)
    assert "sk-ant-test" in (
        sent.headers.get("x-api-key"),
        sent.headers.get("authorization", "").removeprefix("Bearer "),
    )
    body = sent.json()
    assert [b["text"] for b in body["system"]] == [SYSTEM, SUMMARY]
    # question, tool_use, tool_result, answer per turn; the next question joins no result
    assert [t["role"] for t in body["messages"]] == ["user", "assistant"] * 4 + ["user"]
    assert body["messages"][1]["content"][0]["type"] == "tool_use"
    assert body["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "call_0",
        "content": "code 0 is bin 0",
    }
    assert body["tools"][0]["input_schema"] == LOOKUP.parameters
    assert len(_marked(body)) == 3
    assert response.content == "bin 14"
    assert response.finish_reason == "stop"
    assert response.usage.prompt_tokens == 20 + 3000 + 400
    assert (response.usage.cached_tokens, response.usage.cache_write_tokens) == (3000, 400)
    assert provider.uncacheable_calls == 0


async def test_the_recorded_request_shows_the_breakpoints(fake_anthropic: FakeAnthropic) -> None:
    """tests/providers/recorded/anthropic_breakpoints.json is the body this request sends:
    breakpoints on the summary (the last system block), on the previous prompt's stable end
    (the assistant's answer before the newest user message) and on the newest message."""
    fake_anthropic.enqueue(wire.message("ok"))
    await _provider(fake_anthropic).complete(_request(2))
    body = fake_anthropic.requests[0].json()
    assert body == json.loads(RECORDED.read_text())
    assert _marked(body) == ["system[1]", "messages[7][0]", "messages[8][0]"]


def test_the_breakpoint_prefix_is_byte_identical_across_the_turns_the_window_extends() -> None:
    """Each turn's request extends the previous one; what the previous request cached (up to
    its last breakpoint) is, byte for byte, the start of the next (markers aside: they do not
    enter the cache key), and the next request's stable breakpoint lies within the 20-block
    lookback of it."""

    def unmarked(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [unmarked(v) for v in value]
        return value

    def flat(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [b for turn in body["messages"] for b in turn["content"]]

    previous: dict[str, Any] | None = None
    for n in range(1, 6):
        # The window extends: the previous request, its answer, then a new user message.
        messages = [*_turns(n - 1), ChatMessage(role="user", content=f"What is code {n - 1}?")]
        body, plan = messages_body(
            ModelRequest(messages=messages, tools=[LOOKUP]),
            model="claude-sonnet-4-5",
            stream=False,
            max_tokens=None,
        )
        assert plan.cacheable
        if previous is not None:
            cached = flat(previous)
            now = flat(body)
            assert (
                json.dumps(unmarked(now[: len(cached)])).encode()
                == json.dumps(unmarked(cached)).encode()
            )
            assert json.dumps(unmarked(body["system"])) == json.dumps(unmarked(previous["system"]))
            stable = next(i for i, b in enumerate(now) if "cache_control" in b)
            assert len(cached) - 1 <= stable < len(cached) - 1 + 20
        previous = body


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("tool_use", "tool_calls"),
        ("end_turn", "stop"),
    ],
)
async def test_stop_reasons_are_the_projects(
    fake_anthropic: FakeAnthropic, stop: str, expected: str
) -> None:
    fake_anthropic.enqueue(wire.message("x", stop_reason=stop))
    response = await _provider(fake_anthropic).complete(_request(0))
    assert response.finish_reason == expected


async def test_a_tool_use_block_is_a_tool_call(fake_anthropic: FakeAnthropic) -> None:
    blocks = [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"code": "7"}},
    ]
    fake_anthropic.enqueue(wire.message(blocks, stop_reason="tool_use"))
    response = await _provider(fake_anthropic).complete(_request(0))
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_1", "lookup", {"code": "7"})
    ]


async def test_a_stream_yields_text_deltas_then_the_whole_answer_with_tool_call_and_usage(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.enqueue(
        wire.stream(
            ["Look", "ing."],
            tool=("toolu_2", "lookup", ['{"co', 'de": "9"}']),
            stop_reason="tool_use",
            input_tokens=5,
            read=2000,
            written=100,
            output_tokens=30,
        )
    )
    events = [e async for e in _provider(fake_anthropic).stream(_request(1))]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Look", "ing."]
    [final] = [e for e in events if isinstance(e, ModelResponse)]
    assert final.content == "Looking."
    assert [(c.id, c.arguments) for c in final.tool_calls] == [("toolu_2", {"code": "9"})]
    assert final.finish_reason == "tool_calls"
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (2105, 30)
    assert (final.usage.cached_tokens, final.usage.cache_write_tokens) == (2000, 100)
    assert fake_anthropic.requests[0].json()["stream"] is True


async def test_a_stream_cut_mid_answer_is_never_returned_as_whole(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.enqueue(wire.stream(["Half ", "an answer", " never ends"], cut_after=4))
    events: list[object] = []
    with pytest.raises(ProviderBadResponse):
        async for event in _provider(fake_anthropic).stream(_request(0)):
            events.append(event)
    assert not any(isinstance(e, ModelResponse) for e in events)
    assert len(fake_anthropic.requests) == 1  # begun: not asked again


async def test_overloaded_529_is_retried(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(
        wire.error(529, "overloaded_error", "Overloaded"),
        wire.error(529, "overloaded_error", "Overloaded"),
        wire.message("fine"),
    )
    waits: list[float] = []
    response = await _provider(fake_anthropic, waits=waits).complete(_request(0))
    assert response.content == "fine"
    assert len(fake_anthropic.requests) == 3
    assert waits == [0.5, 1.0]


async def test_a_429_waits_its_retry_after_capped_then_gives_up_as_rate_limited(
    fake_anthropic: FakeAnthropic,
) -> None:
    limited = wire.error(429, "rate_limit_error", "slow down", headers={"retry-after": "7"})
    fake_anthropic.enqueue(limited, limited, limited)
    waits: list[float] = []
    provider = _provider(fake_anthropic, waits=waits, max_retries=2, max_retry_wait=5.0)
    with pytest.raises(ProviderRateLimited, match="slow down"):
        await provider.complete(_request(0))
    assert waits == [5.0, 5.0]
    assert len(fake_anthropic.requests) == 3


async def test_prompt_is_too_long_is_context_exceeded_and_not_retried(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.enqueue(
        wire.error(
            400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
        )
    )
    with pytest.raises(ProviderContextExceeded, match="prompt is too long"):
        await _provider(fake_anthropic).complete(_request(0))
    assert len(fake_anthropic.requests) == 1


async def test_a_prefix_below_the_models_minimum_is_reported_uncacheable(
    fake_anthropic: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    fake_anthropic.enqueue(wire.message("hi"))
    provider = _provider(fake_anthropic)
    short = ModelRequest(
        messages=[
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(role="user", content="hi"),
        ]
    )
    with caplog.at_level(logging.INFO, logger="bounded_agents.providers.anthropic.provider"):
        await provider.complete(short)
    assert provider.uncacheable_calls == 1
    assert provider.last_plan is not None and not provider.last_plan.cacheable
    assert "below claude-sonnet-4-5's minimum cacheable 1024" in caplog.text


async def test_an_error_never_carries_the_api_key(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(wire.error(401, "authentication_error", "invalid x-api-key sk-ant-test"))
    with pytest.raises(ProviderError) as raised:
        await _provider(fake_anthropic).complete(_request(0))
    assert "sk-ant-test" not in str(raised.value)


def test_agent_model_anthropic_builds_the_provider_from_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    settings = Settings(
        model="anthropic",
        anthropic_api_key=SecretStr("sk-ant-set"),
        anthropic_base_url="http://gateway.test",
        anthropic_model="claude-haiku-4-5",
        anthropic_max_tokens=900,
        anthropic_cache=False,
    )
    provider = model_from_settings(settings)
    assert isinstance(provider, AnthropicProvider)
    assert (provider.base_url, provider.model, provider.max_tokens, provider.cache) == (
        "http://gateway.test",
        "claude-haiku-4-5",
        900,
        False,
    )
    with pytest.raises(ConfigError, match="AGENT_ANTHROPIC_API_KEY"):
        model_from_settings(Settings(model="anthropic"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    assert isinstance(model_from_settings(Settings(model="anthropic")), AnthropicProvider)


async def test_count_tokens_asks_the_free_count_endpoint_with_the_calls_own_body(
    fake_anthropic: FakeAnthropic,
) -> None:
    """`TokenCountingProvider`: the real SDK posts the request's system, messages and tools
    (no max_tokens, no cache breakpoints) to `/v1/messages/count_tokens`, and the count it
    answers is returned as is."""
    fake_anthropic.enqueue(Reply.json({"input_tokens": 4321}))
    provider = _provider(fake_anthropic)
    assert supports_token_counting(provider)

    counted = await provider.count_tokens(_request(3))

    assert counted == 4321
    [sent] = fake_anthropic.requests
    assert sent.path == "/v1/messages/count_tokens"
    body = sent.json()
    assert body["model"] == "claude-sonnet-4-5" and "max_tokens" not in body
    assert body["system"][0]["text"] == SYSTEM and body["tools"][0]["name"] == "lookup"
    assert len(body["messages"]) == len(_turns(3)) - 2 + 1  # the turns and the new question
    assert _marked(body) == [], "breakpoints do not change a count"


async def test_a_failed_count_is_the_projects_error(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.enqueue(wire.error(400, "invalid_request_error", "model: unknown"))
    with pytest.raises(ProviderError, match="unknown"):
        await _provider(fake_anthropic).count_tokens(_request(1))
