"""The contract types are frozen, and a tool exchange expands into the provider's pair."""

import pytest
from pydantic import ValidationError

from app.core.messages import ChatMessage, Message, ToolCall, ToolResult, to_chat_messages


def _exchange() -> Message:
    return Message(
        role="assistant",
        content="checking both",
        tool_calls=[
            ToolCall(id="c1", name="read_page", arguments={"url": "a"}),
            ToolCall(id="c2", name="read_page", arguments={"url": "b"}),
        ],
        tool_results=[
            ToolResult(call_id="c1", content="page a"),
            ToolResult(call_id="c2", content="boom", is_error=True),
        ],
    )


def test_assistant_with_two_calls_and_results_expands_in_order() -> None:
    user = Message(role="user", content="compare a and b")
    out = to_chat_messages([user, _exchange()])

    assert [m.role for m in out] == ["user", "assistant", "tool", "tool"]
    assert out[0] == ChatMessage(role="user", content="compare a and b")
    assert out[1].content == "checking both"
    assert [c.id for c in out[1].tool_calls] == ["c1", "c2"]
    assert [(m.tool_call_id, m.content) for m in out[2:]] == [("c1", "page a"), ("c2", "boom")]


def test_plain_messages_expand_one_to_one() -> None:
    msgs = [Message(role="system", content="s"), Message(role="assistant", content="a")]
    out = to_chat_messages(msgs)
    assert [(m.role, m.content, m.tool_calls, m.tool_call_id) for m in out] == [
        ("system", "s", [], None),
        ("assistant", "a", [], None),
    ]


@pytest.mark.parametrize(
    "model",
    [
        Message(role="user", content="hi"),
        ToolCall(id="c", name="n", arguments={}),
        ToolResult(call_id="c", content="r"),
        ChatMessage(role="tool", content="r", tool_call_id="c"),
    ],
)
def test_contract_types_are_frozen(model: Message | ToolCall | ToolResult | ChatMessage) -> None:
    field = next(iter(type(model).model_fields))
    with pytest.raises(ValidationError, match="frozen"):
        setattr(model, field, "changed")


def test_unknown_fields_are_rejected_and_messages_round_trip_through_json() -> None:
    with pytest.raises(ValidationError, match="colour"):
        Message.model_validate({"role": "user", "content": "hi", "colour": "red"})
    original = _exchange()
    assert Message.model_validate_json(original.model_dump_json()) == original
