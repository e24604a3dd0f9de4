"""The history search tool: the model looks up what its bounded prompt no longer holds.

A window and a summary keep every prompt bounded, and a detail neither kept is gone for the
model. An agent declared with `@agent(..., search=True)` gets one more tool, `search_history`:
the model sends a query and gets back the best-matching places of ITS thread (the turn's own,
never another) that the prompt it is answering from does not already show. What is searched is
what the model saw: user and assistant text, tool results (all but this tool's own: a search
result quotes earlier messages, and would answer every later search; `core.search_text`), and
the archived parts of the thread's summary (notes a summary could not keep under its cap).

The result is JSON, `{"results": [...], "omitted": n}` (`core.search_results`), each row:

- `seq`: the message's position; for an archived summary part, the last seq it covers
  (`to_seq`), with `from_seq` and `to_seq` beside it. Erasure (helper code that redacts stored
  search results) keys on `seq`, and on `from_seq..to_seq` for a part.
- `role`: `user`, `assistant`, `tool` (the match is in the message's tool results) or
  `summary` (an archived part).
- `content`: a snippet around the matches (`SNIPPET_CHARS` at most, `…` where it is cut),
  never the whole message: a pasted log found by one word must not fill the prompt.
- `at`: when it was stored (ISO 8601, UTC).
- `newer` (only when there is one): the seq of a LATER message that holds every query term this
  hit holds: the value found may have been superseded, and the model should prefer (or look
  up) the newer one. The turn's own question (the prompt's last user message) is never counted
  as newer, since it repeats the terms it asks about.
- `reply_to` (only on a reply row): a hit where the assistant ASKED something ("what is your
  order number?") is followed by the user's reply, the next message, as a row of its own with
  `reply_to` naming the question's seq. The user's answer ("It is ORD-41234.") rarely repeats
  the words of the question, so no index finds it by them; its question is what a search finds.
  A text said twice comes back once (`distinct`), so repeats do not crowd out the `k` places.
- `same_form_as` (only on such a row): a message holding a value of the same form (`ORD-99999`)
  as the value next to a hit's matches, or in a reply, whose seq it names, and that no other
  row shows: a correction or an aside that never names its topic ("Actually, use ORD-55120
  instead."), which only the value's form ties to what was found (`core.search_forms`). It
  claims no more than that; the model reads the rows' seq and dates.
- `shown_above` (`true`, only on a row that then has no `content` nor `at`): the row's text is
  already quoted whole by an earlier `search_history` call of the same model step, or by an
  earlier row of this result. The row keeps its place in the ranking and its other keys; its
  text is not sent twice. Only among the step's own calls (an earlier turn's result may be
  refolded or cleared before the next call, and call ids repeat across turns), and only when
  no middleware rewrites the prompt (`ToolContext.sent_as_is`: a middleware may cut the first
  copy); tool-result clearing keeps a result such a row points back to. Erasing the message
  gives such a row `content` `[erased]` like any other.

Rows are ordered best first: relevance (stemmed, in the index's language) weighed with
recency (`RECENCY_HALF_LIFE`), newest first among equals. What comes back is bounded in rows
(`k`, at most `MAX_SEARCH_RESULTS`) and bytes (`MAX_RESULT_BYTES` in all), so a search can
never undo the bound the history keeps. Its result is a tool result like any other: journaled,
so a replay returns the same text and never searches again.

A store with a full-text index (`HistorySearcher`: PostgreSQL `tsvector`, SQLite FTS5) ranks
the whole thread and its archive; any other store gets `scan_search`, a bounded scan of the
newest `FALLBACK_SCAN_ROWS` messages (and its archived parts, if it keeps them), matching whole
words without stemming.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from bounded_agents.core.messages import Message, ToolResult
from bounded_agents.core.ports import (
    MARK_END,
    MARK_START,
    AgentStore,
    HistorySearcher,
    SearchHit,
    ToolSpec,
    supports_history_search,
    supports_summary_archive,
    supports_transcripts,
)
from bounded_agents.core.search_forms import same_form_hits
from bounded_agents.core.search_results import (
    MAX_RESULT_BYTES,
    MESSAGE_CLIP_CHARS,
    QUESTION_MARKS,
    SNIPPET_CHARS,
    asks,
    distinct,
    newer_seqs,
    render_hits,
    reply_hits,
    snippet,
)
from bounded_agents.core.search_shown import Shown
from bounded_agents.core.search_text import (
    SEARCH_TOOL_NAME,
    TOOL_TEXT_SEPARATOR,
    composed,
    fold_case,
    mark_ranges,
    search_text,
)
from bounded_agents.core.turn.public import ToolContext

DEFAULT_SEARCH_RESULTS = 5
"""Messages a search returns when the model does not say `k`: enough for a fact and its
correction, few enough to leave the prompt's bound meaningful."""

MAX_SEARCH_RESULTS = 20
"""The most a model may ask for (a larger `k` is lowered to it, not refused)."""

RECENCY_HALF_LIFE = 200
"""Messages back at which recency's weight on relevance is half gone: the score is relevance
times `1 + H / (H + age)`, 2 for the newest message, 1.5 at H messages back, toward 1."""

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


@functools.cache
def _word() -> re.Pattern[str]:
    """A word: a letter or digit, then letters, digits and combining marks: an accent written
    apart (NFD, "cafe\u0301", which `fold_case` composes to "café"), Thai and Devanagari vowel
    signs, Japanese voicing marks. Without the marks a word was cut at each of them (and a
    lone mark was a word). Built on first use (`mark_ranges`)."""
    return re.compile(f"[^\\W_](?:[^\\W_]|[{mark_ranges()}])*")


_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u3040-\u30ff\u3130-\u318f"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff65-\uff9f"
    "\U00020000-\U0003134f]"
)
"""Letters of scripts written without spaces between words (Thai, Lao, Myanmar, Khmer,
Japanese kana, Han) or with particles attached to them (Hangul, its syllables and jamo). A word
tokenizer, the indexes' and `_word`, takes a run of them as ONE word, so a word inside the run
is found as a substring only (`_count`)."""


def both_forms(text: str) -> str:
    """`text` composed (NFC) and, when it differs, decomposed (NFD) after it: what a parser
    that indexes code points as given (PostgreSQL's) needs to find either form's words."""
    if text.isascii():
        return text
    composed = unicodedata.normalize("NFC", text)
    decomposed = unicodedata.normalize("NFD", text)
    return composed if composed == decomposed else f"{composed}\n{decomposed}"


def query_text(query: str) -> str:
    """`query` with what no store can take (U+0000, lone surrogates) turned into spaces: a
    separator to every parser. Not U+FFFD, which a PostgreSQL database in the C locale reads as
    a letter of the word beside it (found on Citus's C-locale nodes: "alpha" + NUL found
    nothing there, and "alpha" on the other databases)."""
    if "\x00" in query:
        query = query.replace("\x00", " ")
    if not query.isascii():
        query = _LONE_SURROGATE.sub(" ", query)
    return query


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def search_terms(query: str) -> list[str]:
    """The query's distinct words, lowercased, in order: letters and digits only, so nothing
    a model writes (quotes, `*`, `NEAR(`, `-`) is ever syntax to a store."""
    out: list[str] = []
    for word in _word().findall(fold_case(query[:MAX_QUERY_CHARS])):
        if word not in out:
            out.append(word)
    return out[:MAX_QUERY_TERMS]


async def scan_search(store: AgentStore, thread_id: str, query: str, limit: int) -> list[Message]:
    """The fallback: the newest `FALLBACK_SCAN_ROWS` messages of the thread at most (through
    the store's transcript reader, a page at a time; a store without one reads the thread),
    ranked by how many of the query's words each holds, case-insensitively, then how often,
    then newest first. Older messages are not searched: say so to whoever relies on it."""
    return [m for m, _ in _scan(await _newest(store, thread_id), search_terms(query), limit)]


def _scan(
    found: Sequence[Message], terms: Sequence[str], limit: int
) -> list[tuple[Message, tuple[int, int, int, frozenset[int]]]]:
    if not terms or limit < 1:
        return []
    scored: list[tuple[Message, tuple[int, int, int, frozenset[int]]]] = []
    for m in found:
        hits = _counts(terms, fold_case(_searchable(m)))
        held = frozenset(i for i, h in enumerate(hits) if h)
        if held:
            scored.append((m, (len(held), sum(hits), m.seq or 0, held)))
    scored.sort(key=lambda s: s[1][:3], reverse=True)
    return scored[:limit]


def _searchable(m: Message) -> str:
    tools = search_text(m)
    return m.content if tools is None else m.content + TOOL_TEXT_SEPARATOR + tools


async def scan_hits(
    store: AgentStore, thread_id: str, query: str, limit: int, max_chars: int | None = None
) -> list[SearchHit]:
    """`scan_search` as hits (content and tool results, whole words, no stemming), with the
    store's archived parts when it keeps them (`SummaryArchive`, its newest
    `FALLBACK_SCAN_ROWS` parts), best first as the index's are. `max_chars`: only messages
    and parts whose text is at most this long (`HistorySearcher.search_history`)."""
    terms = search_terms(query)
    hits: list[SearchHit] = []
    newest = await _newest(store, thread_id)
    if max_chars is not None:  # a message's text and its tool results', as the index's
        newest = [m for m in newest if len(m.content) + len(search_text(m) or "") <= max_chars]
    for m, (terms_held, count, seq, held) in _scan(newest, terms, limit):
        in_tools = not _holds_any([terms[i] for i in held], m.content)
        text = (search_text(m) or "") if in_tools else m.content
        relevance = terms_held + count / (count + 1)
        hits.append(
            SearchHit(
                seq=seq,
                role=m.role,
                content=m.content,
                marked=_mark(text, [terms[i] for i in held]),
                relevance=relevance,
                terms=held,
                in_tools=in_tools,
            )
        )
    if supports_summary_archive(store):
        parts = await store.archived_parts(thread_id, limit=FALLBACK_SCAN_ROWS)
        for p in parts:
            if max_chars is not None and len(p.content) > max_chars:
                continue
            counts = _counts(terms, fold_case(p.content))
            held = frozenset(i for i, c in enumerate(counts) if c)
            if held:
                count = sum(counts)
                hits.append(
                    SearchHit(
                        seq=p.to_seq,
                        role="summary",
                        content=p.content,
                        marked=_mark(p.content, [terms[i] for i in held]),
                        relevance=len(held) + count / (count + 1),
                        terms=held,
                        at=p.created_at,
                        from_seq=p.from_seq,
                    )
                )
    hits.sort(key=lambda h: (h.relevance, h.seq), reverse=True)
    return hits[:limit]


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


def _counts(terms: Sequence[str], text: str) -> list[int]:
    """How often each term occurs in `text` (folded) as a word, or, for a term of unspaced
    letters (`_UNSPACED`), as a substring of it. The text is split into words only when a
    spaced term is in it as a substring (a word of it always is): splitting was 97% of a
    scan's time (1.7 s of 1.8 over 2,000 messages of 19 KB tool results), and most messages
    hold none of the terms."""
    out: list[int] = []
    words: list[str] | None = None
    for term in terms:
        if term not in text:
            out.append(0)
        elif _UNSPACED.search(term):
            out.append(text.count(term))
        else:
            if words is None:
                words = _word().findall(text)
            out.append(words.count(term))
    return out


def _holds_any(terms: Sequence[str], text: str) -> bool:
    """Whether `text` holds any of `terms` (folded and split once, not once per term)."""
    return any(_counts(terms, fold_case(text)))


def _mark(text: str, terms: Sequence[str]) -> str:
    """`text` with each whole-word occurrence of `terms` between the marks, and each
    occurrence of a term of unspaced letters inside a word (the fallback's stand-in for the
    index's own highlighting)."""
    wanted = set(terms)
    inner = [re.escape(t) for t in terms if _UNSPACED.search(t)]
    within = re.compile("|".join(inner), re.IGNORECASE) if inner else None

    def word(w: re.Match[str]) -> str:
        if fold_case(w.group(0)) in wanted:
            return MARK_START + w.group(0) + MARK_END
        if within is None:
            return w.group(0)
        return within.sub(lambda m: MARK_START + m.group(0) + MARK_END, w.group(0))

    return _word().sub(word, composed(text))


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
        shown = Shown(context.prompt, context.sent_as_is)
        limit = k + min(len(shown.messages), MAX_SKIPPED_ROWS)
        query = query_text(query[:MAX_QUERY_CHARS])
        try:
            found = await self._search(context.thread_id, query, limit)
        except Exception as exc:
            # The model is told, and may answer without it; the cause is the operator's.
            log.warning("search_history failed in thread %s", context.thread_id, exc_info=exc)
            return _error(f"the search failed: {type(exc).__name__}")
        fresh = distinct([h for h in found if not shown.holds(h)])[:k]
        newer = newer_seqs(fresh, [h for h in found if not shown.is_question(h)])
        try:
            replies = await reply_hits(self._store, context.thread_id, fresh, shown.holds)
        except Exception as exc:  # the hits stand without their replies
            log.warning(
                "search_history could not read replies in %s", context.thread_id, exc_info=exc
            )
            replies = {}
        about = [*fresh, *replies.values()]
        owners = [*range(len(fresh)), *replies]  # a reply's rows go with its question's
        try:
            followed = await same_form_hits(
                lambda q, n, longest: self._search(context.thread_id, q, n, longest),
                about,
                lambda h: shown.holds(h) or shown.is_question(h),
            )
        except Exception as exc:  # the hits stand without them
            log.warning(
                "search_history could not follow a form in %s", context.thread_id, exc_info=exc
            )
            followed = {}
        alike: dict[int, list[tuple[int, SearchHit]]] = {}
        for i, rows in followed.items():
            alike.setdefault(owners[i], []).extend((about[i].seq, row) for row in rows)
        return ToolResult(call_id="", content=render_hits(fresh, newer, replies, alike, shown.rows))

    async def _search(
        self, thread_id: str, query: str, limit: int, max_chars: int | None = None
    ) -> list[SearchHit]:
        """The store's index, or the scan without one. A query holding unspaced letters
        (`_UNSPACED`) is answered by the scan first (its substrings; the newest
        `FALLBACK_SCAN_ROWS` messages, without dates), then by the index's hits the scan did
        not find (a whole run of such letters, older than the scan reached). `max_chars`:
        only messages of at most that many characters, their tool results counted
        (`HistorySearcher.search_history`)."""
        searcher = self._store  # narrowed to a `HistorySearcher` below; `self._store` is not
        if not supports_history_search(searcher):
            return await scan_hits(self._store, thread_id, query, limit, max_chars)
        if max_chars is None or not _takes_max_chars(searcher):
            indexed = await searcher.search_history(thread_id, query, limit=limit)
        else:
            indexed = await searcher.search_history(
                thread_id, query, limit=limit, max_chars=max_chars
            )
        if not any(_UNSPACED.search(t) for t in search_terms(query)):
            return indexed
        scanned = await scan_hits(self._store, thread_id, query, limit, max_chars)
        return _merged(scanned, indexed)[:limit]


def _takes_max_chars(searcher: HistorySearcher) -> bool:
    """Whether a `HistorySearcher`'s `search_history` names `max_chars` (added with the date
    forms): a store written against the port before it is searched as before, unbounded, and
    its form follows rank among every message, as they did. Only a parameter of that name
    counts: a proxy taking `**kwargs` may hand them to a store that has none (found by review:
    every follow then failed). Read from the method each time (microseconds, against a
    search's milliseconds): a proxy's `__getattr__` can hand out the methods of stores of
    different classes, so no per-class answer holds."""
    try:
        return "max_chars" in inspect.signature(searcher.search_history).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): as before
        return False


def _merged(scanned: Sequence[SearchHit], indexed: Sequence[SearchHit]) -> list[SearchHit]:
    """The scan's hits and the index's, one per row: a row both found holds the terms either
    found (the index's stemmed matches, the scan's substrings) and the index's date; the
    most terms held first, then the newest (found by attack: the scan's hits first, whatever
    they held, put a row holding every term last, labelled as superseded)."""
    rows = {(h.seq, h.role, h.from_seq): h for h in indexed}  # two archived parts may share a seq
    for h in scanned:
        known = rows.get((h.seq, h.role, h.from_seq))
        if known is not None:
            marked = h.marked if MARK_START in h.marked else known.marked
            h = h.model_copy(
                update={"terms": h.terms | known.terms, "at": known.at, "marked": marked}
            )
        rows[(h.seq, h.role, h.from_seq)] = h
    return sorted(rows.values(), key=lambda h: (len(h.terms), h.seq, h.from_seq or 0), reverse=True)


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
    "QUESTION_MARKS",
    "RECENCY_HALF_LIFE",
    "SEARCH_TOOL_NAME",
    "SNIPPET_CHARS",
    "HistorySearchTool",
    "asks",
    "both_forms",
    "distinct",
    "newer_seqs",
    "query_text",
    "render_hits",
    "reply_hits",
    "scan_hits",
    "scan_search",
    "search_terms",
    "snippet",
]
