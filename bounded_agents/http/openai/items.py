"""Stored messages and runs in the OpenAI API's shapes: conversation items and Responses.

A stored message becomes items in this order: for an assistant message, each tool call and its
result (`function_call`, `function_call_output`), then the message itself. Item ids carry the
message's `seq`, so a page cursor (`after`) is a position in the thread, not a lookup:

    msg_<seq>         the message            fc_<seq>_<i>   its i-th tool call
    fco_<seq>_<i>     that call's result

A Response's `output` is what the agent produced in the run: its tool calls, then its answer.
The tool results are in the conversation's items (they are the tools' words, not the model's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Literal

from bounded_agents.core.loop import AgentDefinition
from bounded_agents.core.messages import MAX_SEQ, Message
from bounded_agents.core.report import RunReport
from bounded_agents.http.openai.schemas import (
    ConversationIdOut,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionToolOut,
    Item,
    MessageItem,
    ResponseErrorOut,
    ResponseOut,
    TextPart,
    UsageOut,
)

_ITEM_ID = re.compile(r"(msg|fc|fco)_(0|[1-9][0-9]{0,9})(?:_(0|[1-9][0-9]{0,5}))?")
"""An item id as this API writes it, matched whole (`fullmatch`): ASCII digits (`\\d` takes any
Unicode digit), no leading zero, no trailing newline (`$` allows one)."""
MESSAGE_SLOT = 1 << 30
"""Order key of a message item within its seq: after all of its tool calls and results."""


def message_item_id(seq: int | None) -> str:
    return f"msg_{seq or 0}"


def call_item_id(seq: int | None, index: int) -> str:
    return f"fc_{seq or 0}_{index}"


def item_position(item_id: str) -> tuple[int, int] | None:
    """(seq, slot) of an item id, the order items are listed in; None for a foreign id, or one
    whose seq is past `MAX_SEQ`."""
    match = _ITEM_ID.fullmatch(item_id)
    if match is None:
        return None
    kind, seq, index = match.group(1), int(match.group(2)), match.group(3)
    if seq > MAX_SEQ:
        return None  # no message sits there: refused, never sent to the database
    if kind == "msg":
        return (seq, MESSAGE_SLOT) if index is None else None
    if index is None:
        return None
    return seq, 2 * int(index) + (1 if kind == "fco" else 0)


def message_items(message: Message) -> list[tuple[tuple[int, int], Item]]:
    """The items of one stored message, each with its (seq, slot) position."""
    seq = message.seq or 0
    out: list[tuple[tuple[int, int], Item]] = []
    results = {r.call_id: r for r in message.tool_results}
    for i, call in enumerate(message.tool_calls):
        out.append(((seq, 2 * i), function_call_item(seq, i, call.id, call.name, call.arguments)))
        result = results.get(call.id)
        if result is not None:
            out.append(
                (
                    (seq, 2 * i + 1),
                    FunctionCallOutputItem(
                        id=f"fco_{seq}_{i}", call_id=call.id, output=result.content
                    ),
                )
            )
    out.append(((seq, MESSAGE_SLOT), message_item(message_item_id(seq), message)))
    return out


def function_call_item(
    seq: int | None, index: int, call_id: str, name: str, arguments: dict[str, object]
) -> FunctionCallItem:
    return FunctionCallItem(
        id=call_item_id(seq, index),
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments, ensure_ascii=False),
    )


def message_item(item_id: str, message: Message) -> MessageItem:
    if message.role == "assistant":
        part = TextPart(type="output_text", text=message.content, annotations=[])
    else:
        part = TextPart(type="input_text", text=message.content)
    return MessageItem(id=item_id, role=message.role, content=[part])


def output_items(answer: Message) -> list[Item]:
    """A Response's `output`: the answer's tool calls, then the answer."""
    seq = answer.seq
    calls: list[Item] = [
        function_call_item(seq, i, c.id, c.name, c.arguments)
        for i, c in enumerate(answer.tool_calls)
    ]
    return [*calls, message_item(message_item_id(seq), answer)]


def usage_out(report: RunReport) -> UsageOut:
    """What the run booked in the ledger: every model call, the history summary included."""
    prompt = sum(row.prompt_tokens for row in report.ledger)
    completion = sum(row.completion_tokens for row in report.ledger)
    return UsageOut(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion)


def response_error(code: str, message: str) -> ResponseErrorOut:
    limited = code in ("provider_rate_limited", "quota_exceeded")
    return ResponseErrorOut(
        code="rate_limit_exceeded" if limited else "server_error", message=message, type=code
    )


def function_tools(definition: AgentDefinition | None) -> list[FunctionToolOut]:
    if definition is None:
        return []
    return [
        FunctionToolOut(
            name=b.spec.name, description=b.spec.description, parameters=b.spec.parameters
        )
        for b in definition.tools.values()
    ]


_STATUS: dict[str, Literal["completed", "failed"]] = {"completed": "completed", "failed": "failed"}
"""A run's status as a Response's; a running run is `in_progress`."""


def response_out(
    *,
    run_id: str,
    agent: str,
    thread_id: str,
    created_at: datetime | float | None,
    status: str,
    output: Sequence[Item] = (),
    report: RunReport | None = None,
    error: ResponseErrorOut | None = None,
    previous_response_id: str | None = None,
    definition: AgentDefinition | None = None,
) -> ResponseOut:
    if isinstance(created_at, datetime):
        created = created_at.timestamp()
    else:
        created = created_at or 0.0
    return ResponseOut(
        id=run_id,
        created_at=created,
        status=_STATUS.get(status, "in_progress"),
        model=agent,
        output=list(output),
        usage=usage_out(report) if report is not None and status != "running" else None,
        conversation=ConversationIdOut(id=thread_id),
        previous_response_id=previous_response_id,
        error=error,
        tools=function_tools(definition),
    )


def answer_of(messages: Iterable[Message]) -> Message | None:
    """The run's answer among the messages it wrote (None until it is stored)."""
    return next((m for m in messages if m.role == "assistant"), None)
