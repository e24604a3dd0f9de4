"""The Anthropic provider against a server that lies: every failure is the project's own
provider error (ProviderBadResponse), and a call whose usage is missing is booked by the
estimate, never as 0 tokens (docs/reliability.md, "Ledger"). Found by attack: missing usage was
booked as 0 tokens, and a malformed stream or a 200 that is no JSON escaped as a raw
KeyError, TypeError or JSONDecodeError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.errors import ProviderBadResponse
from bounded_agents.providers.anthropic import AnthropicProvider
from tests.providers.fake_anthropic import FakeAnthropic, message
from tests.providers.fake_openai import Reply


@pytest.fixture
async def fake(fake_anthropic: FakeAnthropic) -> FakeAnthropic:
    return fake_anthropic


@pytest.fixture
async def provider(claude: AnthropicProvider) -> AnthropicProvider:
    return claude


def _frames(events: list[tuple[str, Any]]) -> Reply:
    return Reply(
        headers={"Content-Type": "text/event-stream"},
        chunks=tuple(
            f"event: {n}\ndata: {d if isinstance(d, str) else json.dumps(d)}\n\n".encode()
            for n, d in events
        ),
    )


_START_NO_USAGE = (
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
        },
    },
)
_START = (
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    },
)
_TEXT_BLOCK = (
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
)
_STOP = ("message_stop", {"type": "message_stop"})

REQUEST = ModelRequest(
    messages=[ChatMessage(role="user", content="Tell me about order ORD-1 " * 40)]
)


def _text_stream(start: tuple[str, Any], text: str) -> Reply:
    """A whole stream answering `text` in one block, opened by `start` (its usage, or none),
    whose `message_delta` reports no usage."""
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }
    return _frames(
        [
            start,
            _TEXT_BLOCK,
            ("content_block_delta", delta),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            _STOP,
        ]
    )


async def _drain(provider: AnthropicProvider) -> ModelResponse:
    events = [e async for e in provider.stream(REQUEST)]
    [final] = [e for e in events if isinstance(e, ModelResponse)]
    return final


async def test_a_stream_without_any_usage_is_booked_by_the_estimate_not_as_zero_tokens(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    text = "A long answer about the order. " * 20
    fake.enqueue(_text_stream(_START_NO_USAGE, text))
    final = await _drain(provider)
    assert final.content == text
    # Either refused as a bad response or estimated, as the OpenAI-compatible provider does.
    assert final.usage.prompt_tokens > 0 and final.usage.completion_tokens > 0, final.usage
    assert final.usage.estimated, final.usage


async def test_an_unstreamed_answer_with_an_empty_usage_object_is_not_booked_as_zero_tokens(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.enqueue(
        Reply.json(
            {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [{"type": "text", "text": "An answer of some length. " * 20}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {},
            }
        )
    )
    try:
        final = await provider.complete(REQUEST)
    except ProviderBadResponse:
        return  # refusing it is right too
    assert final.usage.prompt_tokens > 0 and final.usage.completion_tokens > 0, final.usage
    assert final.usage.estimated, final.usage


async def test_invalid_json_in_a_stream_event_is_a_provider_bad_response(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.enqueue(_frames([_START, _TEXT_BLOCK, ("content_block_delta", "{not json")]))
    with pytest.raises(ProviderBadResponse):
        await _drain(provider)


async def test_a_delta_for_a_block_never_started_is_a_provider_bad_response(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.enqueue(
        _frames(
            [
                _START,
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 5,
                        "delta": {"type": "text_delta", "text": "x"},
                    },
                ),
                _STOP,
            ]
        )
    )
    with pytest.raises(ProviderBadResponse):
        await _drain(provider)


async def test_a_null_text_delta_is_a_provider_bad_response(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.enqueue(
        _frames(
            [
                _START,
                _TEXT_BLOCK,
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": None},
                    },
                ),
                _STOP,
            ]
        )
    )
    with pytest.raises(ProviderBadResponse):
        await _drain(provider)


async def test_a_200_whose_body_is_not_json_is_a_provider_bad_response(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.enqueue(Reply.text("<html>502 Bad Gateway</html>"))
    with pytest.raises(ProviderBadResponse):
        await provider.complete(REQUEST)


async def test_a_stream_that_reports_input_only_estimates_its_output(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    """Found by review: `message_start` gave the input count and no `message_delta` gave the
    output's, so the output was booked as 0 tokens; the missing half is estimated now."""
    start = dict(_START[1])
    start["message"] = {**start["message"], "usage": {"input_tokens": 321}}
    text = "A long answer about the order. " * 20
    fake.enqueue(_text_stream(("message_start", start), text))
    final = await _drain(provider)
    assert final.usage.prompt_tokens == 321, final.usage  # what the server said stands
    assert final.usage.completion_tokens > 0 and final.usage.estimated, final.usage


async def test_a_server_that_ignores_stream_true_gives_its_whole_message_as_the_answer(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    """A proxy or gateway that drops `stream: true` and answers the whole message as JSON:
    the answer, already billed, is the step's, its text streamed as one delta and its usage
    booked. Before, the SSE reader found no event in the JSON body and the step failed as
    cut off: a billed answer lost, and the step asked again (docs/reliability.md)."""
    fake.enqueue(message("The whole answer at once.", input_tokens=40, output_tokens=6))

    events = [e async for e in provider.stream(REQUEST)]

    deltas = [e.text for e in events if not isinstance(e, ModelResponse)]
    [final] = [e for e in events if isinstance(e, ModelResponse)]
    assert deltas == ["The whole answer at once."]
    assert final.content == "The whole answer at once."
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (40, 6)
    assert not final.usage.estimated
    assert len(fake.requests) == 1
    assert json.loads(fake.requests[0].body)["stream"] is True


async def test_a_json_body_that_is_no_message_in_place_of_a_stream_is_a_bad_response(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.enqueue(Reply.json({"status": "ok", "note": "stream disabled by the gateway"}))

    with pytest.raises(ProviderBadResponse, match="is not a message"):
        await _drain(provider)
