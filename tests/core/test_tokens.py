"""The token estimate: ceil(chars / 4) + 4 over content and serialized tool calls and results."""

import json

from bounded_agents.core.messages import ChatMessage, Message, ToolCall, ToolResult
from bounded_agents.core.tokens import MESSAGE_ALLOWANCE, estimate_message_tokens


def _compact(items: list[ToolCall] | list[ToolResult]) -> int:
    return len(json.dumps([i.model_dump(mode="json") for i in items], separators=(",", ":")))


def test_forty_character_message_costs_fourteen_tokens() -> None:
    assert estimate_message_tokens(Message(role="user", content="x" * 40)) == 14


def test_partial_tokens_round_up_and_empty_costs_the_allowance() -> None:
    assert estimate_message_tokens(Message(role="user", content="x" * 41)) == 15
    assert estimate_message_tokens(Message(role="user", content="")) == MESSAGE_ALLOWANCE


def test_tool_calls_and_results_are_counted_as_json() -> None:
    calls = [ToolCall(id="c1", name="read_page", arguments={"url": "https://example.com"})]
    results = [ToolResult(call_id="c1", content="y" * 100)]
    plain = Message(role="assistant", content="x" * 40)
    with_calls = Message(role="assistant", content="x" * 40, tool_calls=calls)
    with_both = with_calls.model_copy(update={"tool_results": results})

    chars = 40 + _compact(calls)
    assert estimate_message_tokens(with_calls) == -(-chars // 4) + 4
    chars += _compact(results)
    assert estimate_message_tokens(with_both) == -(-chars // 4) + 4
    assert estimate_message_tokens(plain) < estimate_message_tokens(with_calls)
    assert estimate_message_tokens(with_calls) < estimate_message_tokens(with_both)


def test_works_on_provider_shaped_messages() -> None:
    assert estimate_message_tokens(ChatMessage(role="tool", content="x" * 40)) == 14
