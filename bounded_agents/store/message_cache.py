"""Messages already rebuilt from their rows, kept for the next read of the same thread.

A windowed turn reads the newest N messages; the next turn of that thread reads N again, of
which N - 2 it read last time. Rebuilding a message (pydantic validation of its tool calls and
results) costs more than the database read of it, so a store keeps what it rebuilt and hands the
same `Message` back when the same row comes again.

Never stale by construction: an entry is found by (thread, seq) but used only when the row read
now is equal, column for column, to the row it was built from (content and JSON text compared
whole). A message is a pure function of its row, so an equal row gives an equal message; a row
that changed (or a thread deleted and its id reused) simply misses. The `Message` handed out is
shared between reads: it is frozen, and nothing in the project mutates a message's lists.

Bounded two ways, least recently used first out: a count of messages and an estimate of the
bytes they hold, so one thread of huge attachments cannot pin memory. The estimate counts the
content once and the JSON text twice (the text kept for the comparison, and the strings decoded
from it), at one byte a character for ASCII text and four otherwise (CPython's widest string
form): an upper bound on the text, not counting the objects' own small overhead. A message
estimated at more than a quarter of the budget is never kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from bounded_agents.core.messages import Message
from bounded_agents.store.codec import MESSAGE_COLUMNS, from_row, row_payload_bytes

WIDTH = len(MESSAGE_COLUMNS)

MAX_MESSAGES = 4096
"""Messages kept per store: a window of 10 in about 400 active threads."""
MAX_BYTES = 64 * 1024 * 1024
"""Estimated bytes of text kept per store (see the module docstring)."""


def _width(text: str) -> int:
    return len(text) if text.isascii() else 4 * len(text)


def _bytes(row: tuple[Any, ...]) -> int:
    _seq, _role, content, calls, results, attachments, _run = row
    return _width(content) + sum(2 * _width(t) for t in (calls, results, attachments) if t)


class MessageCache:
    """See the module docstring. One per store; used from the store's event loop only."""

    def __init__(self, *, max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_BYTES) -> None:
        self._entries: OrderedDict[tuple[str, int], tuple[tuple[Any, ...], Message, int]] = (
            OrderedDict()
        )
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """The estimated bytes of text kept now."""
        return self._bytes

    def page(self, thread_id: str, rows: Sequence[Any], offset: int) -> tuple[list[Message], int]:
        """The messages of the rows that hold one (MESSAGE_COLUMNS at `row[offset:]`, seq not
        NULL), and their `payload_bytes`, counted from the rows' text."""
        messages, size = [], 0
        for row in rows:
            columns = row[offset : offset + WIDTH]  # a tuple, from a tuple or an asyncpg Record
            if columns[0] is not None:
                messages.append(self._columns(thread_id, columns))
                size += row_payload_bytes(columns)
        return messages, size

    def message(self, thread_id: str, row: Any, offset: int = 0) -> Message:
        """The message of the MESSAGE_COLUMNS at `row[offset:]`, rebuilt only if not kept."""
        return self._columns(thread_id, row[offset : offset + WIDTH])

    def _columns(self, thread_id: str, columns: tuple[Any, ...]) -> Message:
        key = (thread_id, columns[0])
        entries = self._entries
        kept = entries.get(key)
        if kept is not None and kept[0] == columns:
            entries.move_to_end(key)
            self.hits += 1
            return kept[1]
        self.misses += 1
        message = from_row(columns)
        if kept is not None:
            self._forget(key)
        size = _bytes(columns)
        if size <= self._max_bytes // 4:
            entries[key] = (columns, message, size)
            self._bytes += size
            while len(entries) > self._max_messages or self._bytes > self._max_bytes:
                self._forget(next(iter(entries)))
        return message

    def _forget(self, key: tuple[str, int]) -> None:
        self._bytes -= self._entries.pop(key)[2]

    def forget(self, thread_id: str) -> None:
        """Drop every message of the thread: an erased message must not outlive its row here."""
        for key in [k for k in self._entries if k[0] == thread_id]:
            self._forget(key)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
