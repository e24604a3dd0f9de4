"""Message <-> row mapping, in one place so the store and the bounded read agree byte for byte."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.messages import (
    Message,
    decode_attachments,
    decode_tool_calls,
    decode_tool_results,
    encode_json_list,
)

MESSAGE_COLUMNS = ("seq", "role", "content", "tool_calls", "tool_results", "attachments", "run_id")
"""The columns a message is rebuilt from, in the order the read selects them."""


def to_row(thread_id: str, seq: int, message: Message) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "seq": seq,
        "role": message.role,
        "content": message.content,
        "tool_calls": encode_json_list(message.tool_calls),
        "tool_results": encode_json_list(message.tool_results),
        "attachments": encode_json_list(message.attachments),
        "run_id": message.run_id,
    }


def from_row(row: Sequence[Any], offset: int = 0) -> Message:
    """Rebuild a message from the MESSAGE_COLUMNS found at `row[offset:]`.

    Empty JSON columns are NULL, so most rows skip JSON parsing entirely.
    """
    seq, role, content, calls, results, attachments, run_id = row[offset : offset + 7]
    return Message(
        role=role,
        content=content,
        tool_calls=decode_tool_calls(calls),
        tool_results=decode_tool_results(results),
        attachments=decode_attachments(attachments),
        run_id=run_id,
        seq=seq,
    )
