"""The history search tool: the model looks up what its bounded prompt no longer holds.

A window and a summary keep every prompt bounded, and a detail neither kept is gone for the
model. An agent declared with `@agent(..., search=True)` gets one more tool, `search_history`:
the model sends a query and gets back the best-matching messages of ITS thread (the turn's own,
never another) that the prompt it is answering from does not already show, each with its `seq`
and role. What comes back is bounded twice, in rows (`k`, at most `MAX_SEARCH_RESULTS`) and in
bytes (`MESSAGE_CLIP_CHARS` per message, `MAX_RESULT_BYTES` in all), so a search can never undo
the bound the history keeps. Its result is a tool result like any other: journaled, so a replay
returns the same text and never searches again.

A store with a full-text index (`HistorySearcher`: PostgreSQL `tsvector`, SQLite FTS5) ranks
the whole thread; any other store gets `scan_search`, a bounded scan of the newest
`FALLBACK_SCAN_ROWS` messages. Only message text is searched, not tool results: those are
tools' own output, and earlier search results among them would answer every later search.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from bounded_agents.core.messages import ChatMessage, Message, ToolResult, storable_text
from bounded_agents.core.ports import (
    AgentStore,
    ToolSpec,
    supports_history_search,
    supports_transcripts,
)
from bounded_agents.core.turn.public import ToolContext

SEARCH_TOOL_NAME = "search_history"
"""The tool's name as the model sees it; an agent's own `@tool` may not take it."""

DEFAULT_SEARCH_RESULTS = 5
"""Messages a search returns when the model does not say `k`: enough for a fact and its
correction, few enough to leave the prompt's bound meaningful."""

MAX_SEARCH_RESULTS = 20
"""The most a model may ask for (a larger `k` is lowered to it, not refused)."""

MESSAGE_CLIP_CHARS = 1_000
"""Each message is clipped to this many characters: a pasted document found by one word must
not fill the result."""

MAX_RESULT_BYTES = 8_192
"""The whole result at most, in UTF-8 bytes: messages past it are left out, and the result says
how many (`omitted`)."""

MAX_SKIPPED_ROWS = 200
"""Rows the store is asked for beyond `k` at most, to make up for hits the prompt already
shows: a prompt holding more messages than this (a whole-thread history) may get fewer than
`k` results, which is right, since it already shows nearly everything."""

MAX_QUERY_CHARS = 500
"""A query is clipped to this before it reaches the store: a search is a few words."""

MAX_QUERY_TERMS = 16
"""Distinct words a query is matched by at most (the fallback scan and SQLite's FTS5 query)."""

FALLBACK_SCAN_ROWS = 2_000
"""The newest messages `scan_search` reads, at most, from a store without a full-text index:
what a search costs there stays bounded however long the thread is, and a fact older than
these rows is out of its reach."""

log = logging.getLogger("bounded_agents.core.search")

_SCAN_PAGE = 500
_ENVELOPE_BYTES = 64
"""Room left for `{"results": [], "omitted": n}` around the rows."""
_WORD = re.compile(r"[^\W_]+")


def search_terms(query: str) -> list[str]:
    """The query's distinct words, lowercased, in order: letters and digits only, so nothing
    a model writes (quotes, `*`, `NEAR(`, `-`) is ever syntax to a store."""
    out: list[str] = []
    for word in _WORD.findall(query[:MAX_QUERY_CHARS].lower()):
        if word not in out:
            out.append(word)
    return out[:MAX_QUERY_TERMS]


async def scan_search(store: AgentStore, thread_id: str, query: str, limit: int) -> list[Message]:
    """The fallback: the newest `FALLBACK_SCAN_ROWS` messages of the thread at most (through
    the store's transcript reader, a page at a time; a store without one reads the thread),
    ranked by how many of the query's words each holds, case-insensitively, then how often,
    then newest first. Older messages are not searched: say so to whoever relies on it."""
    terms = search_terms(query)
    if not terms or limit < 1:
        return []
    scored: list[tuple[int, int, int, Message]] = []
    for m in await _newest(store, thread_id):
        words = _WORD.findall(m.content.lower())
        hits = [words.count(t) for t in terms]
        distinct = sum(1 for h in hits if h)
        if distinct:
            scored.append((distinct, sum(hits), m.seq or 0, m))
    scored.sort(key=lambda s: (s[0], s[1], s[2]), reverse=True)
    return [s[3] for s in scored[:limit]]


async def _newest(store: AgentStore, thread_id: str) -> list[Message]:
    if not supports_transcripts(store):
        thread = await store.get_thread(thread_id)
        return [] if thread is None else thread.messages[-FALLBACK_SCAN_ROWS:]
    out: list[Message] = []
    before: int | None = None
    while len(out) < FALLBACK_SCAN_ROWS:
        page = await store.list_messages(
            thread_id, limit=min(_SCAN_PAGE, FALLBACK_SCAN_ROWS - len(out)), before=before
        )
        out.extend(page)
        if len(page) < _SCAN_PAGE or page[0].seq is None:
            break
        before = page[0].seq
    return out


_SPEC = ToolSpec(
    name=SEARCH_TOOL_NAME,
    description=(
        "Search this conversation's earlier messages that are no longer in view. "
        "Returns the best matches with their position (seq) and role."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEARCH_RESULTS,
                "default": DEFAULT_SEARCH_RESULTS,
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)


class HistorySearchTool:
    """`search_history` over a store: a `TurnAwareTool` (it needs the turn's thread and
    prompt). Messages the prompt already shows (same role and text) are skipped: the store is
    asked for `k` more than the prompt holds, so skipping them still leaves `k` when the thread
    has them."""

    def __init__(self, store: AgentStore) -> None:
        self._store = store
        self._spec = _SPEC

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        return _error("search_history runs only inside a turn")

    async def invoke_in_turn(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        query, k = arguments.get("query"), arguments.get("k", DEFAULT_SEARCH_RESULTS)
        if not isinstance(query, str) or set(arguments) - {"query", "k"}:
            return _error("invalid arguments: expected {query: string, k?: integer}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            return _error("invalid arguments: k must be a positive integer")
        k = min(k, MAX_SEARCH_RESULTS)
        shown = _shown(context.prompt)
        limit = k + min(len(shown), MAX_SKIPPED_ROWS)
        query = storable_text(query[:MAX_QUERY_CHARS])
        try:
            if supports_history_search(self._store):
                found = await self._store.search_messages(context.thread_id, query, limit=limit)
            else:
                found = await scan_search(self._store, context.thread_id, query, limit)
        except Exception as exc:
            # The model is told, and may answer without it; the cause is the operator's.
            log.warning("search_history failed in thread %s", context.thread_id, exc_info=exc)
            return _error(f"the search failed: {type(exc).__name__}")
        fresh = [m for m in found if (m.role, m.content) not in shown][:k]
        return ToolResult(call_id="", content=render_hits(fresh))


def _shown(prompt: Sequence[ChatMessage]) -> set[tuple[str, str]]:
    return {(m.role, m.content) for m in prompt if m.role != "tool"}


def render_hits(found: Sequence[Message]) -> str:
    """The result as JSON: `{"results": [{"seq", "role", "content"}], "omitted": n}`, each
    content clipped to `MESSAGE_CLIP_CHARS` and the whole within `MAX_RESULT_BYTES`."""
    rows: list[dict[str, Any]] = []
    used = 0
    for m in found:
        content = m.content
        if len(content) > MESSAGE_CLIP_CHARS:
            content = content[: MESSAGE_CLIP_CHARS - 1] + "…"
        row = {"seq": m.seq, "role": m.role, "content": content}
        size = len(json.dumps(row, ensure_ascii=False).encode()) + 2  # and ", "
        if used + size > MAX_RESULT_BYTES - _ENVELOPE_BYTES:
            break
        rows.append(row)
        used += size
    out = {"results": rows, "omitted": len(found) - len(rows)}
    return json.dumps(out, ensure_ascii=False)


def _error(text: str) -> ToolResult:
    return ToolResult(call_id="", content=text, is_error=True)


__all__ = [
    "DEFAULT_SEARCH_RESULTS",
    "FALLBACK_SCAN_ROWS",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "MAX_RESULT_BYTES",
    "MAX_SEARCH_RESULTS",
    "MAX_SKIPPED_ROWS",
    "MESSAGE_CLIP_CHARS",
    "SEARCH_TOOL_NAME",
    "HistorySearchTool",
    "render_hits",
    "scan_search",
    "search_terms",
]
