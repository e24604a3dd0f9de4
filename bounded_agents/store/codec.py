"""Message <-> row mapping, in one place so the store and the bounded read agree byte for byte;
and the thread row's columns read back as values, whichever way (SQLAlchemy's or the driver's)
read them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bounded_agents.core.messages import (
    EncodedLists,
    Message,
    decode_attachments,
    decode_tool_calls,
    decode_tool_results,
    encoded_lists,
)
from bounded_agents.core.ports import FoldHealth, Thread
from bounded_agents.core.search_text import search_text
from bounded_agents.core.tokens import estimate_message_tokens

MESSAGE_COLUMNS = ("seq", "role", "content", "tool_calls", "tool_results", "attachments", "run_id")
"""The columns a message is rebuilt from, in the order the read selects them."""


def to_row(
    thread_id: str, seq: int, message: Message, lists: EncodedLists | None = None
) -> dict[str, Any]:
    """`lists`: the message's lists encoded already (`storable_lists`, which a store's check
    before the write returns), so an 8 KB tool result is not encoded again here."""
    calls, results, attachments = lists if lists is not None else encoded_lists(message)
    return {
        "thread_id": thread_id,
        "seq": seq,
        "role": message.role,
        "content": message.content,
        "tool_calls": calls,
        "tool_results": results,
        "attachments": attachments,
        "run_id": message.run_id,
        "search_text": search_text(message),
    }


def token_costs(messages: Sequence[Message]) -> list[int]:
    """Each message's stored token estimate: the one place it is computed."""
    return [estimate_message_tokens(m) for m in messages]


def to_rows(
    thread_id: str,
    first_seq: int,
    tokens_before: int,
    messages: Sequence[Message],
    costs: Sequence[int] | None = None,
    lists: Sequence[EncodedLists] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Rows for `messages` stored from `first_seq` on, each with its token estimate and the
    running sum before it (starting at `tokens_before`, the thread's total so far); returns the
    rows and the tokens they add. `costs`: `token_costs(messages)` when the caller has it
    already (an estimate JSON-encodes the message's tool results: 8 KB for a page read);
    `lists`: each message's `EncodedLists` when the caller has them (`to_row`)."""
    rows: list[dict[str, Any]] = []
    running = tokens_before
    for i, (m, cost) in enumerate(zip(messages, costs or token_costs(messages), strict=True)):
        row = to_row(thread_id, first_seq + i, m, lists[i] if lists is not None else None)
        rows.append({**row, "tokens": cost, "tokens_before": running})
        running += cost
    return rows, running - tokens_before


def utf8_bytes(text: str) -> int:
    """`len(text.encode())` without the copy when the text is ASCII (a flag CPython keeps)."""
    return len(text) if text.isascii() else len(text.encode())


def row_payload_bytes(columns: Sequence[Any]) -> int:
    """`payload_bytes` of the message a MESSAGE_COLUMNS row holds, counted from the row's own
    text: the store wrote exactly `encode_json_list`'s JSON, so no message is encoded again."""
    _seq, _role, content, calls, results, attachments, _run = columns
    return utf8_bytes(content) + sum(utf8_bytes(t) for t in (calls, results, attachments) if t)


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


def thread_of(row: Sequence[Any], msgs: list[Message]) -> Thread:
    """A `THREAD_BY_ID` row (SQLAlchemy's or the driver's) and its messages."""
    thread_id, actor_id, agent, title, created_at, updated_at = row
    return Thread(
        id=thread_id,
        actor_id=actor_id,
        agent=agent,
        title=title,
        messages=msgs,
        created_at=stored_time(created_at),
        updated_at=stored_time(updated_at),
    )


def fold_health_of(value: str | None) -> FoldHealth | None:
    """The `threads.fold_health` column as a value; an unreadable one is taken as healthy
    (the backoff is an economy, never a reason to fail a turn)."""
    if value is None:
        return None
    try:
        return FoldHealth.model_validate_json(value)
    except ValueError:
        return None


def previous_at(rows: Sequence[Any], at: int) -> datetime | None:
    """The page's `previous_at` column, set on one of its last two rows at most."""
    return stored_time(next((r[at] for r in rows[-2:] if r[at] is not None), None))


def stored_time(value: datetime | str | None) -> datetime | None:
    """A time column as read: a raw SQLite read returns the text SQLite stores; every other
    way a datetime."""
    return aware_utc(datetime.fromisoformat(value) if isinstance(value, str) else value)


def aware_utc(value: datetime | None) -> datetime | None:
    """SQLite keeps no time zone and returns naive datetimes; its CURRENT_TIMESTAMP is UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value
