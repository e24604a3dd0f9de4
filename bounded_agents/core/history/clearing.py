"""Tool-result clearing: old tool results leave the PROMPT (never the database) in steps.

A window carries every tool result it keeps in every prompt: a 20 KB page fetched once rides
for twenty turns. Clearing keeps the newest `keep_results` results verbatim and replaces the
older ones, in the prompt only, by a short placeholder naming the tool, the result's size and
the seq of the message that holds it. The call stays (the model sees what it asked), the
stored row is untouched, and `search_history` (which indexes tool results) and the inspector
still reach the whole result.

A placeholder changes the prompt where it stands, which would break a provider's prompt cache
on every turn if it moved by one result per turn. So clearing moves in STEPS: the results
older than the newest `keep_results` are counted in estimated tokens from the window's first
kept message, and the results that START below the newest multiple of `step_tokens` of that
count are cleared (the one across that line with them). The window's start is fixed between
two of its own cuts (the hysteresis grid), so the cleared set is too: it changes only when the
clearable tokens pass the next multiple of `step_tokens`, at most once per `step_tokens`
tokens of new tool output. When the window cuts, the prompt changes anyway, and the count
starts again from the new start.

Everything here is a pure function of the kept messages (journaled by `load:thread`) and the
policy's settings: a replay clears exactly what the first attempt cleared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from bounded_agents.core.messages import Message, ToolResult
from bounded_agents.core.search_results import SHOWN_ABOVE
from bounded_agents.core.search_text import SEARCH_TOOL_NAME

DEFAULT_CLEAR_STEP_TOKENS = 4096
"""Clearing moves at most once per this many estimated tokens of clearable tool output."""

CLEARED_PREFIX = "[tool result cleared from this prompt: "
"""How every placeholder begins (what tells one from a tool's own output)."""


class ToolResultClearing(BaseModel):
    """The settings of a policy's tool-result clearing (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep_results: int = Field(default=2, ge=0)
    """The newest tool results of the kept history sent verbatim."""
    step_tokens: int = Field(default=DEFAULT_CLEAR_STEP_TOKENS, ge=1)
    """Clearing moves in steps of at least this many estimated tokens."""


class Cleared(BaseModel):
    """What clearing took out of one prompt."""

    model_config = ConfigDict(frozen=True)

    results: int = 0
    tokens: int = 0
    """Estimated tokens of the cleared results' content, placeholders not subtracted."""


def result_tokens(result: ToolResult) -> int:
    """A result's content, estimated as `estimate_message_tokens` counts text (chars/4)."""
    return math.ceil(len(result.content) / 4)


def placeholder(tool: str, result: ToolResult, seq: int | None, searchable: bool) -> str:
    """The text that stands for a cleared result: the tool, its size, where it is stored."""
    where = f" at message seq {seq}" if seq is not None else ""
    how = (
        f"the full result is stored: {SEARCH_TOOL_NAME} finds it"
        if searchable
        else "the full result is stored in this thread's history"
    )
    return (
        f"{CLEARED_PREFIX}{tool} returned {len(result.content):,} characters "
        f"(~{result_tokens(result):,} tokens){where}; {how}]"
    )


def clear_tool_results(
    keep: Sequence[Message],
    clearing: ToolResultClearing,
    *,
    first_seq: int | None = None,
    searchable: bool = False,
) -> tuple[list[Message], Cleared]:
    """`keep` with its older tool results replaced by placeholders, and what was cleared.

    `first_seq`: the seq of `keep[0]`, for the placeholders of messages that carry no seq of
    their own (the kept history numbered on from it); None leaves the seq out. `searchable`:
    the agent has the search tool (the placeholder says so)."""
    positions = [(i, j) for i, m in enumerate(keep) for j in range(len(m.tool_results))]
    clearable = positions[: max(0, len(positions) - clearing.keep_results)]
    sizes = [result_tokens(keep[i].tool_results[j]) for i, j in clearable]
    line = sum(sizes) // clearing.step_tokens * clearing.step_tokens
    chosen: set[tuple[int, int]] = set()
    total = 0
    for position, size in zip(clearable, sizes, strict=True):
        if total >= line:  # this one starts at or past the line: it stays
            break
        total += size
        chosen.add(position)
    size_of = dict(zip(clearable, sizes, strict=True))
    for position in _pointed_back_to(keep, chosen):
        chosen.discard(position)
        total -= size_of[position]
    if not chosen:
        return list(keep), Cleared()
    out = [
        _cleared(m, i, chosen, first_seq, searchable) if any(p[0] == i for p in chosen) else m
        for i, m in enumerate(keep)
    ]
    return out, Cleared(results=len(chosen), tokens=total)


def _pointed_back_to(keep: Sequence[Message], chosen: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The chosen `search_history` results that a KEPT later search result of the same message
    points back to: a search of the same step sends a row the earlier one quotes as
    `shown_above`, without its text (`core.search_results`), so clearing the earlier one alone
    would leave the model neither copy (found by review). They stay with it."""
    out: set[tuple[int, int]] = set()
    for i in sorted({i for i, _ in chosen}):
        message = keep[i]
        names = {c.id: c.name for c in message.tool_calls}
        searches = [
            j
            for j, r in enumerate(message.tool_results)
            if names.get(r.call_id) == SEARCH_TOOL_NAME
        ]
        pointing = [
            j
            for j in searches
            if (i, j) not in chosen and f'"{SHOWN_ABOVE}":' in message.tool_results[j].content
        ]
        out.update((i, j) for j in searches if (i, j) in chosen and any(k > j for k in pointing))
    return out


def _cleared(
    message: Message,
    index: int,
    chosen: set[tuple[int, int]],
    first_seq: int | None,
    searchable: bool,
) -> Message:
    names = {c.id: c.name for c in message.tool_calls}
    seq = message.seq
    if seq is None and first_seq is not None:
        seq = first_seq + index
    results = [
        r.model_copy(
            update={
                "content": placeholder(names.get(r.call_id, "a tool"), r, seq, searchable),
            }
        )
        if (index, j) in chosen
        else r
        for j, r in enumerate(message.tool_results)
    ]
    return message.model_copy(update={"tool_results": results})


__all__ = [
    "CLEARED_PREFIX",
    "DEFAULT_CLEAR_STEP_TOKENS",
    "Cleared",
    "ToolResultClearing",
    "clear_tool_results",
    "placeholder",
    "result_tokens",
]
