"""The Anthropic provider against awkward streams and prompts (attack round 8): a content
block started twice at one index is a bad response, not text silently lost, and a system
message of whitespace is sent as "(empty)", never as a blank block the API refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelRequest
from bounded_agents.errors import ProviderBadResponse
from bounded_agents.providers.anthropic import AnthropicProvider
from bounded_agents.providers.anthropic.wire import EMPTY_TEXT, messages_body
from tests.providers.fake_anthropic import FakeAnthropic
from tests.providers.fake_openai import Reply

REQUEST = ModelRequest(messages=[ChatMessage(role="user", content="hi")])
START = {
    "type": "message_start",
    "message": {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 1},
    },
}


def _text_block(index: int) -> dict[str, Any]:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "text", "text": ""},
    }


def _delta(index: int, text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


async def test_a_block_started_twice_at_one_index_is_a_bad_response(
    fake_anthropic: FakeAnthropic, claude: AnthropicProvider
) -> None:
    events = [
        START,
        _text_block(0),
        _delta(0, "first "),
        _text_block(0),  # "first " was streamed to the client: replacing it would lose it
        _delta(0, "second"),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    fake_anthropic.enqueue(
        Reply(
            headers={"Content-Type": "text/event-stream"},
            chunks=tuple(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events),
        )
    )
    with pytest.raises(ProviderBadResponse, match="started content block 0 twice"):
        _ = [e async for e in claude.stream(REQUEST)]


@pytest.mark.parametrize("blank", ["", "   \n", "\t"])
def test_a_blank_system_message_is_sent_as_empty_text(blank: str) -> None:
    body, _ = messages_body(
        ModelRequest(
            messages=[
                ChatMessage(role="system", content=blank),
                ChatMessage(role="user", content="hi"),
            ]
        ),
        model="claude-test",
        stream=False,
        max_tokens=None,
    )
    assert [block["text"] for block in body["system"]] == [EMPTY_TEXT]
