"""The contract types are frozen, and a tool exchange expands into the provider's pair."""

import pytest
from pydantic import ValidationError

from bounded_agents.core.messages import (
    ChatMessage,
    Message,
    ToolCall,
    ToolResult,
    storable_json,
    storable_text,
    to_chat_messages,
    unstorable_text,
)


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


def test_storable_text_replaces_nul_and_lone_surrogates_and_keeps_the_rest() -> None:
    assert storable_text("a\x00b") == "a\ufffdb"
    assert storable_text("x\ud800y\udfffz") == "x\ufffdy\ufffdz"
    assert storable_text("emoji \U0001f600 and é stay") == "emoji \U0001f600 and é stay"
    # A pair of surrogates that JSON decoding left as two code units joins into its character.
    assert storable_text("pair \ud83d\ude00 joined") == "pair \U0001f600 joined"
    assert storable_text("\\u0000 is six printable characters") == (
        "\\u0000 is six printable characters"
    )
    for text in ("a\x00b", "x\ud800y"):
        assert unstorable_text(Message(role="assistant", content=storable_text(text))) is None


def test_storable_json_cleans_keys_and_nested_values_without_touching_the_input() -> None:
    value = {"k\x00": ["v\udc00", {"deep": "\x00", "n": 1, "ok": True, "none": None}]}
    cleaned = storable_json(value)
    assert cleaned == {"k\ufffd": ["v\ufffd", {"deep": "\ufffd", "n": 1, "ok": True, "none": None}]}
    assert value == {"k\x00": ["v\udc00", {"deep": "\x00", "n": 1, "ok": True, "none": None}]}


def test_storable_json_walks_nesting_deeper_than_the_recursion_limit() -> None:
    value: object = "\x00"
    for _ in range(5_000):
        value = [value]
    cleaned = storable_json(value)
    for _ in range(5_000):
        assert isinstance(cleaned, list)
        cleaned = cleaned[0]
    assert cleaned == "\ufffd"


def test_storable_json_turns_tuples_into_cleaned_lists() -> None:
    assert storable_json({"t": ("a\x00", ("b",))}) == {"t": ["a\ufffd", ["b"]]}
