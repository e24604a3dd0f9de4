"""What the history search indexes of a message: the text its model saw.

A message's own `content`, and the results of the tools it called (a fact often arrives in a
tool result: a lookup, a log, a page read), except the search tool's own: a search result
quotes earlier messages, so indexing it would make every later search find the quote beside
(or instead of) the original, and an old search's output would answer every new one. This
module has no dependency beyond the message types, so a store's codec and the migration that
backfills the index compute the same text.

And `fold_case`, the lowercasing the indexes apply: the search and its results' snippets
match words as the index does.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from bounded_agents.core.messages import Message, ToolCall, ToolResult

SEARCH_TOOL_NAME = "search_history"
"""The tool's name as the model sees it; an agent's own `@tool` may not take it."""

TOOL_TEXT_SEPARATOR = "\n\n"


def indexable_tool_text(calls: list[ToolCall], results: list[ToolResult]) -> str | None:
    """The text of `results` the index holds (None when there is none): every result but
    those answering a call to `SEARCH_TOOL_NAME`, joined by a blank line."""
    searches = {c.id for c in calls if c.name == SEARCH_TOOL_NAME}
    texts = [r.content for r in results if r.call_id not in searches and r.content]
    return TOOL_TEXT_SEPARATOR.join(texts) if texts else None


def search_text(message: Message) -> str | None:
    """`indexable_tool_text` of a stored message: what the store keeps in its `search_text`
    column beside `content`, both indexed."""
    if not message.tool_results:
        return None
    return indexable_tool_text(message.tool_calls, message.tool_results)


def fold_case(text: str) -> str:
    """`text` lowercased as the indexes fold it. Python lowers U+0130 ("İ", the Turkish dotted
    capital I, the one character whose lowercase is two) to "i" and a combining dot, which
    the word pattern then splits off: "İstanbul" became the words "i" and "stanbul", while
    SQLite's tokenizer indexes "istanbul" (and PostgreSQL's lowercasing agrees), so the query
    found nothing.

    And composed (NFC): "é" written as "e" and a combining accent (NFD, as macOS file names
    and some keyboards write it) is the same word to the search (found by attack: one form
    never found the other)."""
    return composed(text.lower().replace("i\u0307", "i"))


MAX_MARKS_IN_A_ROW = 30
"""Combining marks kept in a row before composing (Unicode's stream-safe limit): no script
writes more on one letter."""


def composed(text: str) -> str:
    """`text` in NFC, every run of more than `MAX_MARKS_IN_A_ROW` combining marks cut to that
    many first: CPython orders a run of marks by insertion sort, and found by attack, one
    128 KiB message of marks made every search of its thread take 20 s."""
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text
    return unicodedata.normalize("NFC", _long_marks().sub(_first_marks, text))


def _first_marks(run: re.Match[str]) -> str:
    return run.group(0)[:MAX_MARKS_IN_A_ROW]


@functools.cache
def _long_marks() -> re.Pattern[str]:
    return re.compile(f"[{mark_ranges()}]{{{MAX_MARKS_IN_A_ROW + 1},}}")


@functools.cache
def mark_ranges() -> str:
    """Every combining mark (Unicode's M* categories), as a regex character class's ranges:
    read from `unicodedata` on first use (the planes holding any, and the variation
    selectors; 28 ms)."""
    out: list[str] = []
    for first, end in ((0, 0x2FFFF), (0xE0100, 0xE01EF)):
        start: int | None = None
        for cp in range(first, end + 1):
            if unicodedata.category(chr(cp)).startswith("M"):
                start = cp if start is None else start
            elif start is not None:
                out.append(f"\\U{start:08x}-\\U{cp - 1:08x}")
                start = None
        if start is not None:
            out.append(f"\\U{start:08x}-\\U{end:08x}")
    return "".join(out)


__all__ = [
    "MAX_MARKS_IN_A_ROW",
    "SEARCH_TOOL_NAME",
    "TOOL_TEXT_SEPARATOR",
    "composed",
    "fold_case",
    "indexable_tool_text",
    "mark_ranges",
    "search_text",
]
