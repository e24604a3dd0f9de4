"""The contract types a thread is made of, and their expansion into provider-shaped messages.

A tool exchange is ONE stored message: the assistant message that made the calls also carries
their results. Cutting a list of stored messages can therefore never orphan a tool result; only
`to_chat_messages` unfolds the exchange into the assistant/tool pair providers expect.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

Role = Literal["system", "user", "assistant"]
ChatRole = Literal["system", "user", "assistant", "tool"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Attachment(_Frozen):
    """A file that rides on a message: by reference (`url`) or inline (`data`). Inline binary
    data is base64; a text media type may keep its text as is (the framework adapters store an
    item's JSON so, `integrations.items.ITEM_MEDIA_TYPE`, where an erasure scan can read it)."""

    name: str
    media_type: str
    url: str | None = None
    data: str | None = None


class ToolCall(_Frozen):
    """One call the model asked for."""

    id: str
    """Provider-assigned id; the matching `ToolResult.call_id` names it."""
    name: str
    arguments: dict[str, Any]


class ToolResult(_Frozen):
    """The answer to one `ToolCall`."""

    call_id: str
    """Id of the `ToolCall` this answers; `to_chat_messages` pairs them when expanding."""
    content: str
    is_error: bool = False
    """True when the tool raised or its arguments were invalid; the model sees the error text."""


MAX_SEQ = 2**31 - 1
"""The largest `seq` a thread can reach: stores keep it in a 32-bit column (PostgreSQL
`integer`). A caller's position past it names no message, and must never reach the SQL, where
PostgreSQL refuses the overflow as a database error."""


class Message(_Frozen):
    """One stored message of a thread."""

    role: Role
    content: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolResult] = Field(default_factory=list)
    """Results of `tool_calls`, on the same message so a cut can never split the pair."""
    attachments: list[Attachment] = Field(default_factory=list)
    run_id: str | None = None
    """The run that wrote it: a user message and everything the agent did for it share one."""
    seq: int | None = None
    """Position in the thread, set by the store (contiguous from 1); None before it is stored."""


class ChatMessage(_Frozen):
    """A provider-shaped message: what one model call is actually sent."""

    role: ChatRole
    content: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    """For `role="tool"`: the call this message answers."""


def to_chat_messages(messages: Iterable[Message]) -> list[ChatMessage]:
    """Expand stored messages into provider shape.

    An assistant message with tool calls becomes the assistant(tool_calls) message followed by
    one `tool` message per result, in the order of the results.
    """
    out: list[ChatMessage] = []
    for m in messages:
        out.append(ChatMessage(role=m.role, content=m.content, tool_calls=m.tool_calls))
        for r in m.tool_results:
            out.append(ChatMessage(role="tool", content=r.content, tool_call_id=r.call_id))
    return out


def journal_form(message: Message) -> dict[str, Any]:
    """What a journal records of a message: only what the prompt needs, no ids or positions.

    Defaults are left out so the payload stays small and independent of which read produced it.
    """
    return message.model_dump(mode="json", exclude={"seq", "run_id"}, exclude_defaults=True)


_TOOL_CALLS = TypeAdapter(list[ToolCall])
_TOOL_RESULTS = TypeAdapter(list[ToolResult])
_ATTACHMENTS = TypeAdapter(list[Attachment])


def encode_json_list(items: Sequence[BaseModel]) -> str | None:
    """The one JSON encoding of a message's tool calls, results or attachments (None if empty).

    Stores write exactly this text, so `payload_bytes` equals the bytes a store holds and returns.
    """
    if not items:
        return None
    return "[" + ",".join(i.model_dump_json() for i in items) + "]"


def digest_rows(rows: Iterable[tuple[int, str, str]]) -> str:
    """One SHA-256 over (seq, role, text) rows, each field and row delimited: what a store
    compares to tell the rows a caller read from rows put there since (`row_digest`, and a
    fold's chunk: `core.summary.chunk_digest`)."""
    digest = hashlib.sha256()
    for seq, role, content in rows:
        digest.update(f"{seq}\x1f{role}\x1f".encode())
        digest.update(content.encode("utf-8", "surrogatepass"))
        digest.update(b"\x1e")
    return digest.hexdigest()


def row_digest(seq: int, role: str, content: str, attachments: str | None) -> str:
    """One stored message as an erasure by digest names it (`ErasingStore.delete_message`): its
    seq, role, text and attachments as stored (`encode_json_list`'s text). The attachments
    count: an adapter's item rides there verbatim, and two items can project to the same
    text (found by review: every unknown SDK item projects to "", a repeated "hi" to itself)."""
    return digest_rows([(seq, role, f"{content}\x1e{attachments or ''}")])


def message_digest(message: Message) -> str:
    """`row_digest` of a message as read from a store."""
    return row_digest(
        message.seq or 0, message.role, message.content, encode_json_list(message.attachments)
    )


def decode_tool_calls(text: str | None) -> list[ToolCall]:
    return _TOOL_CALLS.validate_json(text) if text else []


def decode_tool_results(text: str | None) -> list[ToolResult]:
    return _TOOL_RESULTS.validate_json(text) if text else []


def decode_attachments(text: str | None) -> list[Attachment]:
    return _ATTACHMENTS.validate_json(text) if text else []


def payload_bytes(message: Message) -> int:
    """UTF-8 bytes of a message's payload: content plus its encoded tool calls, results and
    attachments. What `RunReport.bytes_read` adds up, whichever store answered the read."""
    total = len(message.content.encode())
    for items in (message.tool_calls, message.tool_results, message.attachments):
        text = encode_json_list(items)
        if text is not None:
            total += len(text.encode())
    return total


_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""U+0000 as JSON spells it: `\\u0000` after an even number of backslashes. After an odd number
it is an escaped backslash followed by the printable text `u0000`, which is storable."""


MAX_TOOL_ARGUMENT_DEPTH = 100
"""How deeply a tool call's arguments may nest. Much deeper cannot be journaled or read back
(pydantic's JSON limits are about 250 levels to write and 200 to read): the loop fails a model
step that asks for it as a bad provider response, and a store refuses to hold it
(`unstorable_text`), since every later read of the thread would fail."""


def nesting_depth(value: Any) -> int:
    """Levels of dicts and lists in a JSON-like value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


EncodedLists = tuple[str | None, str | None, str | None]
"""A message's tool calls, results and attachments as a store writes them (`encode_json_list`
of each, in that order)."""


def encoded_lists(message: Message) -> EncodedLists:
    """The message's `EncodedLists`: what its storability check reads and its row holds."""
    return (
        encode_json_list(message.tool_calls),
        encode_json_list(message.tool_results),
        encode_json_list(message.attachments),
    )


def unstorable_text(message: Message) -> str | None:
    """Why a message cannot be stored as sent, or None if it can.

    Three things no store here can hold: U+0000 (PostgreSQL text refuses it, and SQLite would
    silently differ from PostgreSQL), lone surrogates (not encodable as UTF-8 at all), and tool
    call arguments nested deeper than `MAX_TOOL_ARGUMENT_DEPTH` (written, they could not be
    read back). Checked before a write, so a refused batch writes nothing.
    """
    return storable_lists(message)[0]


def storable_lists(message: Message) -> tuple[str | None, EncodedLists]:
    """(`unstorable_text` of the message, its `EncodedLists`): the check has to encode the lists
    to look at their text, and a store writes that very text, so it checks and writes from one
    encoding (an 8 KB tool result was encoded twice an append). The lists are all None when
    the reason says they could not be encoded."""
    unencoded: EncodedLists = (None, None, None)
    for call in message.tool_calls:
        if nesting_depth(call.arguments) > MAX_TOOL_ARGUMENT_DEPTH:
            reason = (
                f"the arguments of tool call {call.name[:64]!r} nest deeper than "
                f"{MAX_TOOL_ARGUMENT_DEPTH} levels"
            )
            return reason, unencoded
    try:
        lists = encoded_lists(message)
        texts = [message.content, *(text for text in lists if text is not None)]
        for text in texts:
            if not text.isascii():  # ASCII (a flag CPython keeps) holds no surrogate
                text.encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return "message text must be valid Unicode (it holds a lone surrogate)", unencoded
    content, json_texts = texts[0], texts[1:]
    # The substring test first: it is a fast scan, the regex a slow one (0.2 ms on 8 KB).
    if "\x00" in content or any("\\u0000" in t and _NUL_ESCAPE.search(t) for t in json_texts):
        return "message text may not contain NUL (U+0000) characters", lists
    return None, lists


THREAD_ID_CHARS = 36
"""A thread's id at most (a UUID's length): the stores' `threads.id` column."""
NAME_CHARS = 200
"""An actor id or agent name at most: the stores' `actor_id` and `agent` columns."""
TITLE_CHARS = 500
"""A thread's title at most: the stores' `threads.title` column."""


def unstorable_thread(
    *, thread_id: str | None = None, actor_id: str, agent: str, title: str | None = None
) -> str | None:
    """Why a thread row cannot hold these values, or None if it can: one longer than its
    column, or holding a NUL or a lone surrogate. Every store checks it before its write, so
    each refuses alike: SQLite stored a 1,000-character actor id that PostgreSQL refused as a
    database error, and a lone surrogate escaped SQLite's driver raw (found by attack)."""
    fields = (
        ("thread id", thread_id, THREAD_ID_CHARS),
        ("actor id", actor_id, NAME_CHARS),
        ("agent", agent, NAME_CHARS),
        ("title", title, TITLE_CHARS),
    )
    for name, value, limit in fields:
        if value is not None:
            reason = _unstorable_value(value, limit)
            if reason is not None:
                return f"{name} {reason}"
    return None


def unstorable_title(title: str) -> str | None:
    """Why a thread's title cannot be stored, or None (`unstorable_thread`'s check of it)."""
    reason = _unstorable_value(title, TITLE_CHARS)
    return None if reason is None else f"title {reason}"


def holdable_thread_id(thread_id: str) -> bool:
    """Whether a store could hold `thread_id` (no NUL, no lone surrogate): a read by any other
    finds no thread, and never sends it (PostgreSQL refused it as a database error, SQLite's
    driver raised). Not its length: SQLite stored longer ids before `unstorable_thread`
    refused them, and those threads must stay readable (found by review)."""
    return _unstorable_value(thread_id, None) is None


def _unstorable_value(value: str, limit: int | None) -> str | None:
    if limit is not None and len(value) > limit:
        return f"is longer than {limit} characters"
    if "\x00" in value:
        return "may not contain NUL (U+0000) characters"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "must be valid Unicode (it holds a lone surrogate)"
    return None


REPLACEMENT_CHARACTER = "\ufffd"


def storable_text(text: str) -> str:
    """`text` with what no store can hold (U+0000, lone surrogates) replaced by U+FFFD.

    For text the project did not get from the client: model output and tool results. A client's
    NUL is refused (`unstorable_text`) so the client can fix it; a model's or a tool's cannot be
    fixed by anyone, and refusing it would fail the run and lose an otherwise good answer.
    """
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT_CHARACTER)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 joins valid surrogate pairs and decodes each lone one as U+FFFD.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable_json(value: Any) -> Any:
    """A JSON-like value with every string (keys too) passed through `storable_text`.

    Walks with an explicit stack, so a deeply nested value cannot exhaust the recursion limit.
    Tuples come back as lists (JSON has no tuples). Two keys that differ only in what is
    replaced (`"a\x00"` and `"a\ufffd"`) become one, the later value winning: a JSON object
    cannot hold both once cleaned.
    """
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        node = container[key]
        if isinstance(node, str):
            container[key] = storable_text(node)
        elif isinstance(node, dict):
            copy = {storable_text(k) if isinstance(k, str) else k: v for k, v in node.items()}
            container[key] = copy
            stack.extend((copy, k) for k in copy)
        elif isinstance(node, (list, tuple)):
            items = list(node)
            container[key] = items
            stack.extend((items, i) for i in range(len(items)))
    return root[0]
