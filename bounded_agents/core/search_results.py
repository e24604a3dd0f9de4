"""What a history search returns: its rows, cut to snippets and bounded in bytes.

`core.search` finds the places (the index's hits, or the fallback scan's); this module turns
them into the tool's result: a text said twice once (`distinct`), the user's reply beside a
question found (`reply_hits`), the newer message a hit may be superseded by (`newer_seqs`), each
row's snippet around its matches (`snippet`), and the JSON within `MAX_RESULT_BYTES`
(`render_hits`). Apart from the search so that what the model is shown (and erasure keys on)
reads in one place, and the finding in another.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC
from typing import Any

from bounded_agents.core.ports import (
    MARK_END,
    MARK_START,
    AgentStore,
    SearchHit,
    supports_history_search,
)
from bounded_agents.core.search_text import fold_case

MESSAGE_CLIP_CHARS = 1_000
"""No row's content is longer than this many characters (a snippet is shorter still)."""

SNIPPET_CHARS = 360
"""A row's content: the window of about this many characters holding the most matches, cut at
word boundaries. A message this short or shorter comes back whole."""

MAX_RESULT_BYTES = 8_192
"""The whole result at most, in UTF-8 bytes: messages past it are left out, and the result says
how many (`omitted`)."""

QUESTION_MARKS = ("?", "\uff1f", "\u061f")
"""What makes an assistant message a question whose reply a search returns with it (`asks`):
the ASCII, full-width and Arabic question marks."""

SHOWN_ABOVE = "shown_above"
"""The key of a row whose text an earlier search of the step quotes (`render_hits`): tool-result
clearing keeps the results such a row points back to (`core.history.clearing`)."""

_ENVELOPE_BYTES = 64
"""Room left for `{"results": [], "omitted": n}` around the rows."""
_MARKED = re.compile(re.escape(MARK_START) + "(.*?)" + re.escape(MARK_END), re.DOTALL)
_MAX_SPANS = 200


def distinct(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """`hits` without repeats: a text said twice ("Can the team see our notes?") is shown
    once, at its best-ranked place, so it does not take two of the `k` places a fact needs."""
    seen: set[tuple[str, str]] = set()
    out: list[SearchHit] = []
    for hit in hits:
        key = (hit.role if hit.from_seq is None else "summary", hit.marked)
        if key not in seen:
            seen.add(key)
            out.append(hit)
    return out


def asks(hit: SearchHit) -> bool:
    """Whether a hit is the assistant asking the user something: its reply (the next message)
    is where the user's answer is, and an answer ("It is ORD-41234.") rarely repeats the words
    of the question a search finds."""
    return (
        hit.role == "assistant"
        and hit.from_seq is None
        and not hit.in_tools
        and any(mark in hit.content for mark in QUESTION_MARKS)
    )


async def reply_hits(
    store: AgentStore,
    thread_id: str,
    hits: Sequence[SearchHit],
    shown: Callable[[SearchHit], bool] = lambda hit: False,
) -> dict[int, SearchHit]:
    """For each hit that `asks` (by its index in `hits`), the user's reply to it: the message
    right after it (`seq + 1`: an erased reply leaves a gap, and the next message is not its
    answer), when that is a user message neither among `hits` nor `shown` by the prompt. A
    store with a search index reads them all at once (`messages_at`); any other, a bounded read
    (a row) per asking hit, so at most `MAX_SEARCH_RESULTS` rows a search."""
    asking = [i for i, hit in enumerate(hits) if asks(hit)]
    if not asking:
        return {}
    wanted = [hits[i].seq + 1 for i in asking]
    if supports_history_search(store):
        read = await store.messages_at(thread_id, wanted)
    else:
        read = [m for seq in wanted for m in await store.messages_after(thread_id, seq - 1, 1)]
    by_seq = {m.seq: m for m in read}
    seqs = {h.seq for h in hits if h.from_seq is None}
    out: dict[int, SearchHit] = {}
    for i in asking:
        reply = by_seq.get(hits[i].seq + 1)
        if reply is None or reply.role != "user":
            continue  # no reply, or it was erased: a later message is not its answer
        row = SearchHit(
            seq=hits[i].seq + 1,
            role="user",
            content=reply.content,
            marked=reply.content,
            relevance=0.0,
        )
        if row.seq not in seqs and not shown(row):
            out[i] = row
    return out


def newer_seqs(hits: Sequence[SearchHit], candidates: Sequence[SearchHit]) -> dict[int, int]:
    """For each hit (by its index in `hits`), the seq of the newest message among `candidates`
    that comes after it and holds every query term it holds: the hit's value may have been
    superseded. Archived parts are notes about messages, not statements: never a newer one."""
    out: dict[int, int] = {}
    for i, hit in enumerate(hits):
        if not hit.terms:
            continue
        later = [
            c.seq
            for c in candidates
            if c.from_seq is None and c.seq > hit.seq and hit.terms <= c.terms
        ]
        if later:
            out[i] = max(later)
    return out


def snippet(marked: str, size: int = SNIPPET_CHARS) -> str:
    """The window of `marked` (matches between `MARK_START` and `MARK_END`) of about `size`
    characters holding the most distinct matches, cut inward to word boundaries, the marks
    removed, `…` where the text is cut. A text no longer than `size` comes back whole."""
    text = marked.replace(MARK_START, "").replace(MARK_END, "")
    if len(text) <= size:
        return text
    spans: list[tuple[int, str]] = []  # (position in `text`, matched word)
    removed = 0
    for m in _MARKED.finditer(marked):
        spans.append((m.start() - removed, fold_case(m.group(1))))
        removed += len(MARK_START) + len(MARK_END)
        if len(spans) >= _MAX_SPANS:
            break
    start = 0
    if spans:
        lead = size // 4
        best = max(
            (len({w for q, w in spans if p - lead <= q < p - lead + size}), -p) for p, _ in spans
        )
        start = max(0, -best[1] - lead)
    start = min(start, len(text) - size)
    end = start + size
    if start > 0:  # inward to a word boundary, never past the size
        cut = text.find(" ", start)
        start = cut + 1 if 0 <= cut < start + 40 else start
    if end < len(text):
        cut = text.rfind(" ", start, end)
        end = cut if cut > end - 40 else end
    body = text[start:end].strip()
    return ("…" if start > 0 else "") + body + ("…" if end < len(text) else "")


def result_rows(text: str) -> tuple[dict[str, Any], list[Any]] | None:
    """A `search_history` result's JSON and its rows, or None when `text` is not one (an error
    text, a cleared placeholder, a result nested past the parser's depth): the one reading of
    what `render_hits` writes, for `quoted_rows` and erasure (`core.erasure`)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    rows = data.get("results") if isinstance(data, dict) else None
    return (data, rows) if isinstance(rows, list) else None


def quoted_rows(results: Iterable[str]) -> set[tuple[int, str, str]]:
    """The rows (seq, role, content) that earlier `search_history` results of the same model
    step (`results`, their texts) quote in full. A row that quotes the same text again is
    rendered `shown_above` (`render_hits`): a model that asks several searches at once reads
    each row's text once (on the recall bench, 31 of the 78 rows of a 20-search probe repeated
    an earlier one). A text that is not a result (an error) quotes nothing."""
    out: set[tuple[int, str, str]] = set()
    for text in results:
        parsed = result_rows(text)
        for row in parsed[1] if parsed is not None else ():
            if not isinstance(row, dict):
                continue
            seq, role, content = row.get("seq"), row.get("role"), row.get("content")
            if type(seq) is int and isinstance(role, str) and isinstance(content, str):  # not bool
                out.add((seq, role, content))
    return out


def render_hits(
    found: Sequence[SearchHit],
    newer: dict[int, int] | None = None,
    replies: dict[int, SearchHit] | None = None,
    alike: dict[int, list[tuple[int, SearchHit]]] | None = None,
    shown: Collection[tuple[int, str, str]] = (),
) -> str:
    """The result as JSON (see `core.search`'s docstring for each key), within `MAX_RESULT_BYTES`:
    rows past it are left out and counted in `omitted`. A hit's reply (`reply_hits`) follows
    it as a row of its own, with `reply_to`, then the messages holding a value of the form it
    holds (`core.search_forms`), with `same_form_as`; erasure finds each by its `seq`. A row
    whose (seq, role, content) is in `shown` (`quoted_rows` of the prompt's earlier results) or
    in an earlier row of this result keeps its place and keys but not its text: `shown_above`."""
    rows: list[dict[str, Any]] = []
    quoted = set(shown)
    used = 0
    kept = 0
    for i, hit in enumerate(found):
        group = [_row(hit, newer.get(i) if newer else None)]
        reply = replies.get(i) if replies else None
        if reply is not None:
            group.append(_row(reply, None) | {"reply_to": hit.seq})
        for source, row in alike.get(i, []) if alike else []:
            group.append(_row(row, None) | {"same_form_as": source})
        group = [_once(row, quoted) for row in group]
        size = sum(len(json.dumps(r, ensure_ascii=False).encode()) + 2 for r in group)  # ", "
        if used + size > MAX_RESULT_BYTES - _ENVELOPE_BYTES:
            break
        rows.extend(group)
        quoted.update((r["seq"], r["role"], r["content"]) for r in group if "content" in r)
        used += size
        kept += 1
    out = {"results": rows, "omitted": len(found) - kept}
    return json.dumps(out, ensure_ascii=False)


def _once(row: dict[str, Any], quoted: set[tuple[int, str, str]]) -> dict[str, Any]:
    """`row`, or, when its text is already quoted, its keys but the text and the date."""
    if (row["seq"], row["role"], row["content"]) not in quoted:
        return row
    return {k: v for k, v in row.items() if k not in ("content", "at")} | {SHOWN_ABOVE: True}


def _row(hit: SearchHit, newer: int | None) -> dict[str, Any]:
    content = snippet(hit.marked)[:MESSAGE_CLIP_CHARS]
    role = "tool" if hit.in_tools else hit.role
    row: dict[str, Any] = {"seq": hit.seq, "role": role, "content": content}
    if hit.at is not None:
        row["at"] = hit.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if hit.from_seq is not None:
        row["from_seq"], row["to_seq"] = hit.from_seq, hit.seq
    if newer is not None:
        row["newer"] = newer
    return row


__all__ = [
    "MAX_RESULT_BYTES",
    "MESSAGE_CLIP_CHARS",
    "QUESTION_MARKS",
    "SHOWN_ABOVE",
    "SNIPPET_CHARS",
    "asks",
    "distinct",
    "newer_seqs",
    "quoted_rows",
    "render_hits",
    "reply_hits",
    "result_rows",
    "snippet",
]
