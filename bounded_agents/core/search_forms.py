"""Values of the same form: what a search by topic words finds only through a value it found.

A user often states a value without its topic's words: a correction ("Actually, use
INV-2027-5523 instead."), or an aside ("Oh, and ORD-41234 is the one on the packing slip.").
A search by the topic ("invoice number") finds the OLD value's message, or a pasted log line
`invoice=INV-2027-1187`, and never the message that matters, which shares no word with the
query. What they share is the value's FORM: identifiers of one kind have one prefix and one
shape (`INV-9999-9999`, `ORD-99999`, `WH-999`).

So for each hit, the value nearest its matches (within `NEAR_CHARS`; a value far from every
match is not what the hit is about), when it has a letter prefix (`INV-`, `ORD-`: the prefix
is a word the index holds, and it names the kind), is looked up again by that prefix, through
the same index and bounds as any search (`FORM_CANDIDATES` rows). A message found that way is
shown, as a row of its own naming the hit (`same_form_as`), when it holds a value of the same
form that no result shows yet, and it is a statement: at most `MAX_STATEMENT_VALUES` values in
all, since a pasted log or a listing holds one of every form and says nothing about any. The
newest `MAX_FORM_ROWS` such messages per form are shown, newest first: of two values of one
form, the later is the likelier to be current, and the model reads both with seq and date.

The row claims only what is true of its text: a later (or earlier) message holds a value
shaped like one the search found. Whether it corrects it is the model's reading. An ISO
date (`2027-05-12`) is followed by its year, a word both indexes hold: a corrected delivery
date ("Actually, use 2027-05-12 instead.") is tied to the old one by nothing else. A value
with neither (an amount, a time, a name) has no word to look it up by: it is not followed
(bench/README.md measures what this reaches and what it does not).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Awaitable, Callable, Sequence

from bounded_agents.core.ports import MARK_END, MARK_START, SearchHit

NEAR_CHARS = 24
"""A value counts as what a hit is about when it is within this many characters of one of the
hit's matches (before or after): "the order number is ORD-41234", `order=ORD-48213`. Of a
hit's values the nearest is followed, one form per hit."""

MAX_FORMS = 3
"""Forms followed per search at most (one more indexed query each), best hits first."""

FORM_CANDIDATES = 20
"""Rows the index is asked for per form: its best matches of the prefix among the messages of
at most `STATEMENT_CHARS`, where a statement of one value sits."""

STATEMENT_CHARS = 500
"""The longest message (its text and tool results) a form is followed to. A statement is a
sentence or two; a pasted log holds the prefix (a year, above all) on every line, so the index
ranks it first and, without this bound, twenty logs took every candidate's place (measured on
the recall bench's 500-turn thread: a corrected delivery date was 21st or later behind logs
for its year)."""

MAX_FORM_ROWS = 2
"""Messages shown per form at most, newest first."""

MAX_STATEMENT_VALUES = 3
"""A message holding more values than this (of any form) is a dump, not a statement: a pasted
log line has an id, a request id, a timestamp and a latency."""

_TOKEN = re.compile(r"(?<![\w@])[^\W_]+(?:[-./:,][^\W_]+)*")
"""Runs of letters and digits joined by `- . / : ,` (`INV-2027-5523`, `2027-05-12`)."""
_MARKS = re.compile(re.escape(MARK_START) + "(.*?)" + re.escape(MARK_END), re.DOTALL)
_PREFIXED = re.compile(r"([A-Za-z]{2,})-([^\W_]+(?:[-./][^\W_]+)*)")
"""A letter prefix and a hyphen: PostgreSQL's parser splits `WH-123` into `wh` and `-123`, as
FTS5 does, but keeps `WH/123` whole, so only a hyphen makes the prefix a word both index.
A prefix that is a stop word (`IT-4521`) makes no query on PostgreSQL: nothing is followed."""
_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
"""An ISO date. Both indexes keep its year as a word (PostgreSQL's parser reads `2027-05-12`
as `2027`, `-05`, `-12`; FTS5 splits at each hyphen), as they keep a letter prefix; a date
written with slashes or dots is one word on PostgreSQL, so it has no year to look up."""

Search = Callable[[str, int, int], Awaitable[Sequence[SearchHit]]]
"""The store's search (`query`, `limit`, `max_chars`) -> its best hits among the messages of
at most `max_chars`: the index, or the bounded scan."""


def values(text: str) -> list[str]:
    """Every value-like token of `text`: a run that holds a digit."""
    return [t for t in _TOKEN.findall(text) if any(c.isdigit() for c in t)]


def form(value: str) -> tuple[str, str] | None:
    """`(prefix, form)` of a value with a letter prefix (`ORD-41234` -> `("ord", "ORD-99999")`):
    the prefix as the index's word, the form with digits as 9 and letters after it as A. An ISO
    date's prefix is its year (`2027-05-12` -> `("2027", "9999-99-99")`). None for anything else
    (an amount, a time, `pg13.5`)."""
    date = _DATE.fullmatch(value)
    if date is not None:
        return date.group(1), "-".join("9" * len(g) for g in date.groups())
    m = _PREFIXED.fullmatch(value)
    if m is None or not any(c.isdigit() for c in m.group(2)):
        return None
    rest = "".join("9" if c.isdigit() else "A" if c.isalpha() else c for c in m.group(2))
    prefix = m.group(1)
    return prefix.lower(), prefix.upper() + value[len(prefix)] + rest


def forms_near_matches(marked: str) -> dict[str, str]:
    """The forms (form -> prefix) of the prefixed values and dates within `NEAR_CHARS` of a
    match in `marked` (the index's marks), identifiers first, each kind nearest first. Each
    value is measured against its two neighbouring matches only (a bisection): a pasted log
    holds tens of thousands of both, and measuring every value against every match took 100 s
    for one 300 KB message (found by attack)."""
    text, spans = _unmarked(marked)
    if not spans:  # a row with no match (a reply to a found question) is about all it says
        spans = [(0, len(text))]
    starts = [s for s, _ in spans]  # in order, and apart: the nearest is a neighbour
    found: dict[str, tuple[int, str]] = {}
    for m in _TOKEN.finditer(text):
        shape = form(m.group(0))
        if shape is None:
            continue
        at = bisect.bisect_left(starts, m.start())
        gap = min(_gap(m.span(), spans[i]) for i in (at - 1, at) if 0 <= i < len(spans))
        if gap <= NEAR_CHARS and (shape[1] not in found or gap < found[shape[1]][0]):
            found[shape[1]] = (gap, shape[0])
    # An identifier before a date, then the nearest: of "our order from 2027-03-01 is
    # ORD-41234" the order number is what "order" found (found by review: the date, nearer,
    # took the hit's one follow, and the correction "use ORD-55120" was no longer reached).
    ranked = sorted(found.items(), key=lambda item: (item[1][1].isdigit(), item[1][0]))
    return {f: p for f, (_, p) in ranked}


def _gap(token: tuple[int, int], match: tuple[int, int]) -> int:
    """Characters between a token and a match (0 when they touch or overlap)."""
    return max(match[0] - token[1], token[0] - match[1], 0)


def _unmarked(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """`marked` without its marks, and where each match is in that text."""
    text: list[str] = []
    spans: list[tuple[int, int]] = []
    size = 0
    for i, part in enumerate(_MARKS.split(marked)):
        if i % 2:  # inside a match
            spans.append((size, size + len(part)))
        text.append(part)
        size += len(part)
    return "".join(text), spans


def _text(hit: SearchHit) -> str:
    return hit.marked.replace(MARK_START, "").replace(MARK_END, "")


async def same_form_hits(
    search: Search,
    hits: Sequence[SearchHit],
    skip: Callable[[SearchHit], bool] = lambda hit: False,
) -> dict[int, list[SearchHit]]:
    """For hits (by index), the statements holding a value of the same form as one near the
    hit's matches, that no hit shows (see the module docstring). `skip` leaves out what the
    prompt already shows. At most `MAX_FORMS` indexed searches, of `FORM_CANDIDATES` rows."""
    shown_values = {v.upper() for h in hits for v in values(_text(h))}
    taken = {h.seq for h in hits if h.from_seq is None}
    wanted: list[tuple[int, str, str]] = []  # (hit index, form, prefix)
    for i, hit in enumerate(hits):
        near = forms_near_matches(hit.marked)  # the nearest first: what the hit is about
        if near and len(wanted) < MAX_FORMS:
            shape, prefix = next(iter(near.items()))
            if all(shape != w[1] for w in wanted):
                wanted.append((i, shape, prefix))
    out: dict[int, list[SearchHit]] = {}
    for i, shape, prefix in wanted:
        rows: list[SearchHit] = []
        for found in await search(prefix, FORM_CANDIDATES, STATEMENT_CHARS):
            if found.from_seq is not None or found.seq in taken or skip(found):
                continue
            held = values(_text(found))
            if len(held) > MAX_STATEMENT_VALUES:
                continue
            if any(form(v) == (prefix, shape) and v.upper() not in shown_values for v in held):
                rows.append(found)
        rows.sort(key=lambda h: h.seq, reverse=True)
        for row in rows[:MAX_FORM_ROWS]:
            taken.add(row.seq)
            out.setdefault(i, []).append(row)
    return out


__all__ = [
    "FORM_CANDIDATES",
    "MAX_FORMS",
    "MAX_FORM_ROWS",
    "MAX_STATEMENT_VALUES",
    "NEAR_CHARS",
    "STATEMENT_CHARS",
    "Search",
    "form",
    "forms_near_matches",
    "same_form_hits",
    "values",
]
