"""An item nested deeper than Python's recursion (or Pydantic AI's serializer) can follow is
refused in one line (`InvalidInput`, naming the item), with nothing stored, by each adapter.
Found by attack: the SDK and LangChain raised RecursionError from the error's own label (a
plain repr of the item) or from `json.dumps`, and Pydantic AI raised
PydanticSerializationError from a tool call's arguments."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from langchain_core.messages import AIMessage
from pydantic_ai.messages import ModelResponse, ToolCallPart

from bounded_agents.errors import InvalidInput
from bounded_agents.integrations.items import label
from bounded_agents.integrations.langchain import BoundedChatMessageHistory
from bounded_agents.integrations.openai_agents import BoundedSession
from bounded_agents.integrations.pydantic_ai import BoundedMessageStore
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import messages


@pytest.fixture(autouse=True)
def default_recursion_limit() -> Iterator[None]:
    """These tests are about Python's default limit (1,000 frames). mypy's API, run in-process
    by tests/test_public_api.py, raises it to 16,384 for the rest of the session, and these
    items then nest within it (found by a helper: 8 of these failed when run after it)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


async def _stored(store: SqlAgentStore) -> int:
    async with store.engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(messages)) or 0)


async def test_an_sdk_item_nested_2000_deep_is_refused_in_one_line(
    sql_store: SqlAgentStore,
) -> None:
    with pytest.raises(InvalidInput, match=r"^item 0 \(x: .*\) is nested too deeply to store$"):
        await BoundedSession("deep", sql_store).add_items([{"type": "x", "v": nested(2000)}])  # type: ignore[list-item]
    assert await _stored(sql_store) == 0


async def test_a_langchain_message_nested_2000_deep_is_refused_in_one_line(
    sql_store: SqlAgentStore,
) -> None:
    message = AIMessage("", additional_kwargs={"v": nested(2000)})
    with pytest.raises(InvalidInput, match=r"^item 0 \(AIMessage: .*\) is nested too deeply"):
        await BoundedChatMessageHistory("deep", sql_store).aadd_messages([message])
    assert await _stored(sql_store) == 0


async def test_a_pydantic_ai_tool_call_nested_past_its_serializer_is_refused_in_one_line(
    sql_store: SqlAgentStore,
) -> None:
    call = ModelResponse(parts=[ToolCallPart("f", {"v": nested(300)}, tool_call_id="c")])
    with pytest.raises(InvalidInput, match=r"^item 0 \(ModelResponse: .*\) cannot be serialized"):
        await BoundedMessageStore(sql_store).save([call], conversation_id="deep")
    assert await _stored(sql_store) == 0


def test_an_items_label_is_bounded_whatever_its_size_or_depth() -> None:
    huge = {"type": "message", "content": "x" * 10_000_000, "deep": nested(5000)}
    shown = label(huge, 3)
    assert shown.startswith("item 3 (message: ") and len(shown) < 120


def nested_dict(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"v": value}
    return value


async def test_a_langchain_tool_call_with_arguments_nested_3000_deep_is_refused_in_one_line(
    sql_store: SqlAgentStore,
) -> None:
    """Found by attack: the projection formats the call's arguments as text, which raised
    RecursionError before the JSON check could refuse the message."""
    call = {"name": "f", "args": nested_dict(3000), "id": "c1", "type": "tool_call"}
    message = AIMessage("", tool_calls=[call])
    with pytest.raises(InvalidInput, match=r"^item 0 \(AIMessage: .*\) is nested too deeply"):
        await BoundedChatMessageHistory("deep", sql_store).aadd_messages([message])
    assert await _stored(sql_store) == 0


@pytest.mark.parametrize(
    ("item", "error"),
    [
        ({"type": "function_call", "name": "f", "arguments": nested_dict(3000)}, "nested too"),
        ({"type": "function_call_output", "call_id": "c", "output": object()}, "not JSON"),
    ],
)
async def test_an_sdk_call_or_output_that_is_no_json_is_refused_before_it_is_projected(
    sql_store: SqlAgentStore, item: dict[str, Any], error: str
) -> None:
    """The projection formats arguments and outputs; the item's JSON is checked first, so
    neither raises raw (RecursionError, TypeError)."""
    with pytest.raises(InvalidInput, match=rf"^item 0 \(function_call.*\) is {error}"):
        await BoundedSession("deep", sql_store).add_items([item])  # type: ignore[list-item]
    assert await _stored(sql_store) == 0
