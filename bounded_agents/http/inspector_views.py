"""What the inspector's pages show of a turn: the journal's `load:thread` and fold steps read
through `core.checkpoints`, laid out as counts, tokens and bars. Kept apart from the routes, so
a page's figures are testable without a request."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import BaseModel

from bounded_agents.core.checkpoints import (
    LOAD_THREAD,
    LoadThreadPayload,
    is_summarize_step,
    or_none,
    parse_load_thread,
    parse_summarize,
)
from bounded_agents.core.fold_health import MemoryHealth, memory_health
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import RunTrace, supports_fold_health, supports_summary_archive
from bounded_agents.core.report import RunReport
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.kept import kept_messages
from bounded_agents.core.turn.public import WindowPreview
from bounded_agents.http.errors import public_message

PREVIEW_CHARS = 400
"""Characters of a message shown in the timeline (the run page links to the whole thread)."""


class KeptLine(BaseModel):
    """A kept message as the journal recorded it: the prompt's content, without its seq (the
    journal keeps no ids or positions, so a replay does not depend on which read produced it)."""

    role: str
    text: str
    tokens: int
    tools: int


class TurnView(BaseModel):
    """One turn of the timeline: what its model was sent, as counts, tokens and a bar."""

    run_id: str
    status: str
    seq: int
    created_at: datetime | None
    error: str | None
    steps: list[str]
    pruned: bool
    """Its journal was deleted by retention: what it sent is no longer known."""
    kept: int | None
    """Thread messages sent verbatim (None: the journal does not say, e.g. an older run)."""
    summarized: int
    """Messages the summary sent with this turn stands for (`covers_through_seq`)."""
    dropped: int | None
    """Messages of the thread (up to this turn's) neither sent nor summarized."""
    kept_tokens: int | None
    summary_tokens: int
    summary_text: str | None
    summary_made: bool
    kept_lines: list[KeptLine]
    chat_tokens: tuple[int, int]
    summary_call_tokens: tuple[int, int]
    rows_read: int | None
    bytes_read: int | None
    bar: list[tuple[str, float, float]]
    """(segment, x, width) in percent of the widest turn on the page."""
    token_bar: list[tuple[str, float, float]]


def turn_view(trace: RunTrace, stored: Mapping[int, Message] | None = None) -> TurnView:
    """What the journal says this turn sent: `load:thread` holds the kept messages (by seq:
    `stored` holds their rows, `trace_loads` says which to read) and the summary it read;
    `history:summarize*` the summaries the turn made."""
    report = RunReport.model_validate(trace.report) if trace.report else None
    kept_messages = _kept_messages(trace, stored or {})
    summary_text, covers, made = _summary_shown(trace)
    kept = len(kept_messages) if kept_messages is not None else None
    chat, summarize = _call_tokens(report)
    error = None
    if trace.error_code is not None:
        error = f"{trace.error_code}: {public_message(trace.error_code, trace.error_message or '')}"
    return TurnView(
        run_id=trace.run_id,
        status=trace.status,
        seq=trace.seq,
        created_at=trace.created_at,
        error=error,
        steps=trace.steps,
        pruned=trace.pruned,
        kept=kept,
        summarized=covers,
        dropped=max(0, trace.seq - covers - kept) if kept is not None else None,
        kept_tokens=(
            sum(estimate_message_tokens(m) for m in kept_messages)
            if kept_messages is not None
            else None
        ),
        summary_tokens=(
            estimate_message_tokens(Message(role="system", content=summary_text))
            if summary_text
            else 0
        ),
        summary_text=summary_text,
        summary_made=made,
        kept_lines=[_line(m) for m in kept_messages or ()],
        chat_tokens=chat,
        summary_call_tokens=summarize,
        rows_read=report.rows_read if report else None,
        bytes_read=report.bytes_read if report else None,
        bar=[],
        token_bar=[],
    )


def trace_loads(traces: Iterable[RunTrace]) -> list[LoadThreadPayload]:
    """The `load:thread` payloads of `traces` that parse: their `keep_refs` name the rows
    to read for `turn_view` (`core.turn.kept.read_kept`, one read for a page of turns)."""
    loads = (or_none(parse_load_thread, t.payloads.get(LOAD_THREAD)) for t in traces)
    return [load for load in loads if load is not None]


def _kept_messages(trace: RunTrace, stored: Mapping[int, Message]) -> list[Message] | None:
    """The messages `load:thread` kept (None: the journal does not say)."""
    load = or_none(parse_load_thread, trace.payloads.get(LOAD_THREAD))
    return kept_messages(load, stored, trace.seq) if load is not None else None


def _summary_shown(trace: RunTrace) -> tuple[str | None, int, bool]:
    """(text, covers_through_seq, made by this turn) of the summary the turn's model was sent:
    the last one a `history:summarize*` step made, else the one `load:thread` read."""
    text: str | None = None
    covers = 0
    made = False
    load = or_none(parse_load_thread, trace.payloads.get(LOAD_THREAD))
    if load is not None and "summary" in load:
        text, covers = load["summary"]["text"], load["summary"]["covers_through_seq"]
    for name in trace.steps:
        fold = (
            or_none(parse_summarize, trace.payloads.get(name)) if is_summarize_step(name) else None
        )
        if fold is not None and "covers_through_seq" in fold:
            text, covers, made = fold.get("text", ""), fold["covers_through_seq"], True
    return text, covers, made


def _call_tokens(report: RunReport | None) -> tuple[tuple[int, int], tuple[int, int]]:
    """(prompt, completion) tokens of the run's chat calls, then of its summarizer calls."""
    chat = [0, 0]
    summarize = [0, 0]
    for call in report.model_calls if report else ():
        into = chat if call.purpose == "chat" else summarize
        into[0] += call.prompt_tokens
        into[1] += call.completion_tokens
    return (chat[0], chat[1]), (summarize[0], summarize[1])


def _line(message: Message) -> KeptLine:
    text = message.content
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS] + f"… ({len(message.content):,} characters)"
    return KeptLine(
        role=message.role,
        text=text,
        tokens=estimate_message_tokens(message),
        tools=len(message.tool_calls) + len(message.tool_results),
    )


def with_bars(turns: list[TurnView], token_budget: int | None) -> list[TurnView]:
    """Lay out each turn's bars against the page's widest turn (messages) and the window's
    token budget (or the page's largest prompt when the policy has no token budget)."""
    widest = max((t.seq for t in turns), default=1) or 1
    tokens_max = token_budget or max(
        ((t.kept_tokens or 0) + t.summary_tokens for t in turns), default=1
    )
    tokens_max = max(tokens_max, 1)
    out = []
    for t in turns:
        segments = [
            ("summarized", t.summarized),
            ("dropped", t.dropped or 0),
            ("kept", t.kept or 0),
        ]
        token_segments = [("summarized", t.summary_tokens), ("kept", t.kept_tokens or 0)]
        out.append(
            t.model_copy(
                update={
                    "bar": _layout(segments, widest),
                    "token_bar": _layout(token_segments, tokens_max),
                }
            )
        )
    return out


def _layout(segments: Iterable[tuple[str, int]], whole: int) -> list[tuple[str, float, float]]:
    x = 0.0
    out = []
    for name, size in segments:
        width = min(100.0 - x, 100.0 * size / whole)
        if width > 0:
            out.append((name, round(x, 3), round(width, 3)))
            x += width
    return out


__all__ = ["PREVIEW_CHARS", "KeptLine", "TurnView", "trace_loads", "turn_view", "with_bars"]


async def memory_view(store: object, preview: WindowPreview) -> MemoryHealth | None:
    """The thread's memory health for the thread page (issue 36), None for an agent that does
    not summarize: the stored fold health (a store with `FoldHealthStore`), whether it has a
    summary, what the next turn's fold would owe, and the archived summary parts (a store with
    a `SummaryArchive`; None on one without: nothing to count). The count reads at most
    `ARCHIVED_SHOWN` parts (the page shows at most that many)."""
    if not preview.summarizes and preview.summary is None:
        return None
    health = await store.fold_health(preview.thread_id) if supports_fold_health(store) else None
    fold = preview.next_fold
    span = (fold.from_seq, fold.through_seq) if fold is not None else None
    archived = None
    if supports_summary_archive(store):
        archived = len(await store.archived_parts(preview.thread_id, limit=ARCHIVED_SHOWN))
    owed = fold.messages if fold is not None else None
    return memory_health(health, preview.summary is not None, span, archived, owed=owed)


ARCHIVED_SHOWN = 100
"""Archived parts the inspector counts at most (one bounded read per page view)."""
