"""Whether a fold stands for its chunk, and when a thread whose folds fail may try again.

Pure functions, no I/O: the loop calls them inside journaled steps, so a replay takes the same
decisions from its journal.

`judge_relatedness` is the `unrelated` refusal. A stored summary REPLACES the previous summary
and every message it covers, so an answer that shares too little with them (a junk sentence,
a chat reply to the summary request, the same text every fold) must not be stored. It compares
TERMS: identifiers and numbers (kept whole, and by their parts: `ORD-4411` also matches `4411`)
and content words (stop words and the vocabulary every summary uses, such as "user" or
"discussed", left out; words compared by their first `STEM_CHARS` letters, so "delivered" meets
"delivery"). The measure is SUPPORT: the share of the new summary's distinct terms found in what
it stands for (the chunk and the previous summary). A summary restates, so most of its terms come
from its source, whatever its style; junk and chat replies bring their own. The threshold is
measured on a corpus of good and junk summaries (tests/core/test_fold_health.py, docs/history.md).
A refusal needs evidence: a summary too small to judge by support (`MIN_SUMMARY_TERMS`) is
accepted, and one of a source too small (`MIN_SOURCE_TERMS`) is refused only when it shares no
term with it. Two checks need no threshold of support: an answer sharing no term with a large
source, once there are notes it would replace (or made of chat words only), and a new part
whose identifiers are mostly not in its source (`invented_identifiers`). Each was found by an
outside attack that got junk stored at every fold (docs/history.md, "Refused folds").

`backoff_after` and `may_fold` are the backoff. After a refused or failed fold the thread waits
`backoff_turns(failures)` turns (1, 2, 4, ... up to `BACKOFF_MAX_TURNS`) before the next
attempt, so a summarizer that keeps failing is called about once per `BACKOFF_MAX_TURNS` turns
instead of every turn. Turns are counted on the thread's own clock, its `seq` (a turn adds at
least a question and an answer: `TURN_MESSAGES`), so the state is two integers on the thread row
and the decision needs no wall clock. The state (`FoldHealth`) is stored with the thread and
survives restarts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from bounded_agents.core.messages import Message
from bounded_agents.core.ports.store import FoldHealth

STEM_CHARS = 5
"""Words are compared by their first five letters: a cheap stemmer for English inflection
("delivered"/"delivery", "refunds"/"refunded") that needs no dictionary."""

UNRELATED_BELOW = 0.24
"""A summary whose support (the share of its terms found in its source) is under this is
`unrelated`. Measured on 129 good and 240 junk summaries (tests/core/fold_corpus.py,
docs/history.md "Refused folds"): summaries that keep the thread's words scored 0.67 or more,
deliberately loose paraphrases 0.28 to 0.47, junk and chat replies 0.19 at most. The threshold
sits between the junk and the loosest paraphrase."""

MIN_SUMMARY_TERMS = 4
"""A summary's new part with fewer distinct terms is not judged by support: "- nothing noted
yet" says too little to call unrelated. It is still refused when it shares no term with a
large source it would replace notes for (`judge_relatedness`)."""

MIN_SOURCE_TERMS = 20
"""A chunk and previous summary with fewer distinct terms together are not judged by support:
a fold of "hi" and "thanks" can be summarized in words of its own. A summary sharing no term
at all with such a source is refused, and one whose identifiers are invented."""

MIN_IDENTIFIERS = 3
"""Identifiers and numbers a summary's new part needs before `invented_identifiers` judges
them: one or two may be a date or a sum written anew."""

INVENTED_BELOW = 0.34
"""A new part whose identifiers and numbers are under this share found in its source is
`unrelated`, whatever its words' support. On the corpus (tests/core/fold_corpus.py) good
summaries kept 0.57 of them at least (a terse note that wrote "10,000" as "10000" and "429s"),
most all of them; invented or another thread's, none."""

BACKOFF_MAX_TURNS = 32
"""The longest wait between two fold attempts of a thread whose folds keep failing, in turns.
At this cap a summarizer that always fails was called 19 times in 500 turns (a healthy one 97
times) and handed 1.26x a healthy one's input tokens; without the backoff, 485 calls and 39.8x
(tests/loop/test_fold_backoff.py, docs/history.md "Backoff")."""

TURN_MESSAGES = 2
"""Messages a turn adds at least (the user's and the answer): the backoff counts turns on the
thread's `seq`. A turn with tool steps adds more and runs the wait down faster."""

NOT_FAILURES = frozenset({"erased"})
"""Fold outcomes that are not the summarizer's fault (nothing was left to fold): no backoff."""

_TOKEN = re.compile(r"[0-9a-z][0-9a-z_\-./:#@']*[0-9a-z]|[0-9a-z]", re.IGNORECASE)
_PART = re.compile(r"[0-9a-z]+", re.IGNORECASE)

_STOP = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
    i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor
    not of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves
    then there there's these they they'd they'll they're they've this those through to too under
    until up very was wasn't we we'd we'll we're we've were weren't what what's when when's
    where where's which while who who's whom why why's with won't would wouldn't you you'd you'll
    you're you've your yours yourself yourselves yes just now new still will shall may might
    must per via etc one two three four five six seven eight nine ten first last next
    """.split()
)
"""English function words: they carry no sign of what a text is about."""

_SUMMARY_WORDS = frozenset(
    """
    user users assistant customer client agent person they asked asks asking said says told
    tells mentioned mentions noted notes note stated states wants wanted wanting needs needed
    discussed discusses discussion talked talks conversation chat summary summaries fact facts
    update updated updates earlier previously previous current currently value values open
    question questions pending unresolved decided decision decisions confirmed confirms
    provided provides gave gives shared shares requested requests request later still
    """.split()
)
"""Words any summary of any conversation uses ("the user asked", "decision pending"): they
neither support a summary nor count against it."""

_CHAT_WORDS = frozenset(
    """
    sure happy glad help helps helping helpful love lovely great wonderful awesome fantastic
    thanks thank please welcome course certainly absolutely enjoy hope feel free anything else
    today let know like paste share tell sorry hear hearing sounds really fun interesting
    mind think thing things kind topic message messages regarding whenever chat chatting
    """.split()
)
"""Words of chat, not of notes ("Sure, happy to help!", "I'd love to hear more"): a chat
reply put in place of a summary is made of them, and the chat it replies to is full of them
too. So they count as the summary's terms but never as supported ones."""

_STOP_STEMS = frozenset(w[:STEM_CHARS] for w in _STOP | _SUMMARY_WORDS if w.isalpha())
_CHAT_STEMS = frozenset(w[:STEM_CHARS] for w in _CHAT_WORDS)


def _stem(token: str) -> str:
    return token if any(c.isdigit() for c in token) else token[:STEM_CHARS]


def text_terms(text: str) -> frozenset[str]:
    """The distinct terms of `text`: identifiers and numbers (any token with a digit) whole,
    casefolded, and content words of three letters or more by their stem. Function words and
    the vocabulary every summary uses are left out."""
    terms: set[str] = set()
    for raw in _TOKEN.findall(text.casefold()):
        token = raw.strip("'-./:#@_")
        if not token:
            continue
        if any(c.isdigit() for c in token):
            terms.add(token)
        elif len(token) >= 3 and token.isalpha() and token not in _STOP:
            stem = _stem(token)
            if stem not in _STOP_STEMS:
                terms.add(stem)
        elif len(token) >= 3 and not token.isalpha():
            # A compound word ("follow-up", "e-mail"): its parts, as words.
            for part in _PART.findall(token):
                if len(part) >= 3 and part not in _STOP and _stem(part) not in _STOP_STEMS:
                    terms.add(_stem(part))
    return frozenset(terms)


def _source_terms(texts: Sequence[str]) -> frozenset[str]:
    """The source's terms, each identifier also by its parts (`ord-4411` gives `ord`, `4411`),
    so a summary that writes an identifier another way ("order 4411") is still supported."""
    out: set[str] = set()
    for text in texts:
        for term in text_terms(text):
            out.add(term)
            if any(c.isdigit() for c in term):
                out.update(_stem(p) for p in _PART.findall(term))
    return frozenset(out)


def _supported(term: str, source: frozenset[str]) -> bool:
    if term in _CHAT_STEMS:
        return False
    if term in source:
        return True
    parts = [_stem(p) for p in _PART.findall(term)]
    return len(parts) > 1 and all(p in source for p in parts)


@dataclass(frozen=True)
class Relatedness:
    """What `judge_relatedness` found."""

    related: bool
    """False only when the summary was judged (`judged`) and refused by one of the checks of
    `judge_relatedness`."""
    judged: bool
    """False when the summary or its source had too few terms to judge by: accepted."""
    support: float
    """Share of the summary's distinct terms found in its source (1.0 when not judged)."""
    summary_terms: int
    source_terms: int


def new_part(summary: str, previous: str | None) -> str:
    """The part of `summary` the summarizer wrote this fold: its lines that are not lines of
    the previous summary (compared without surrounding blanks), in order. An appended junk
    line must be judged alone, not vouched for by the notes it follows; so must one put before
    them, between them, or after notes re-spaced with blank lines (found by attack: each of
    those was judged with the notes and stored, support 0.66 to 0.85)."""
    text = summary.strip()
    if not previous or not previous.strip():
        return text
    kept = {line.strip() for line in previous.splitlines()}
    return "\n".join(
        line for line in text.splitlines() if line.strip() and line.strip() not in kept
    )


def invented_identifiers(
    written: frozenset[str], source: frozenset[str], numbers: frozenset[str]
) -> bool:
    """Whether the new part holds at least `MIN_IDENTIFIERS` identifiers and under
    `INVENTED_BELOW` of them occur in its source: another thread's summary (a customer,
    order, case and amount of its own) was supported 0.72 by the words any support thread
    shares ("order", "refund", "delivered") and stored; its numbers gave it away.

    An identifier is a code (letters and digits: `ord-77120`, found as written) or a number of
    three digits or more, found by value among the source's `numbers` (`source_numbers`): a
    faithful summary writes "1,249.00 USD" as "$1249", "2026-03-03" as "3/3/2026", "09:30" as
    "9:30am". List numbers, "3 lamps" and "March 3rd" are not identifiers (the review of this
    check found 7 of 23 faithful summaries refused when they were)."""
    ids = [term for term in written if _is_code(term) or _digits(term) >= 3]
    if len(ids) < MIN_IDENTIFIERS:
        return False
    found = sum(1 for term in ids if _identifier_found(term, source, numbers))
    return found < INVENTED_BELOW * len(ids)


_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        """zero one two three four five six seven eight nine ten eleven twelve thirteen
        fourteen fifteen sixteen seventeen eighteen nineteen twenty""".split()
    )
}
_DIGIT_RUN = re.compile(r"\d+")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SUFFIX = re.compile(r"(?:st|nd|rd|th|am|pm|h|k|s|kb|mb|gb|kib|mib|gib|ki|mi|gi)$")
"""Letters a number carries without being a code: ordinals, times, units."""


def source_numbers(texts: Sequence[str]) -> frozenset[str]:
    """Every number of `texts` by value (`_value`): "1,249.00" gives 1249 and 0, "09:30" 9
    and 30, "five" 5 (number words up to twenty)."""
    out: set[str] = set()
    for text in texts:
        folded = _THOUSANDS.sub("", text.casefold())
        out.update(_value(run) for run in _DIGIT_RUN.findall(folded))
        out.update(_NUMBER_WORDS[w] for w in _PART.findall(folded) if w in _NUMBER_WORDS)
    return frozenset(out)


def _value(run: str) -> str:
    """A run of digits by value, as text: "09" is "9". Not `int()`: Python refuses a run of
    more than 4,300 digits, and found by review, one such run in a pasted blob made the fold
    raise, and so the user's turn fail."""
    return run.lstrip("0") or "0"


def _digits(term: str) -> int:
    return sum(c.isdigit() for c in term)


def _is_code(term: str) -> bool:
    bare = _SUFFIX.sub("", term)
    return any(c.isdigit() for c in bare) and any(c.isalpha() for c in bare)


def _identifier_found(term: str, source: frozenset[str], numbers: frozenset[str]) -> bool:
    if _supported(term, source):
        return True
    return not _is_code(term) and all(_value(r) in numbers for r in _DIGIT_RUN.findall(term))


def judge_relatedness(
    summary: str, chunk: Sequence[str], previous: str | None = None
) -> Relatedness:
    """Whether `summary` stands for `chunk` (the texts of the messages it folds: contents and
    tool results) and `previous` (the summary so far, if any).

    Unrelated, in this order: when the source has at least `MIN_SOURCE_TERMS` terms, the
    summary (all of it) none of them, and there is a previous summary it would replace or it
    is made of chat words only; else (a new part of `MIN_SUMMARY_TERMS` terms or more) when
    its identifiers are invented (`invented_identifiers`), or, from a source of at least
    `MIN_SOURCE_TERMS` terms, under `UNRELATED_BELOW` of its terms occur in the source, or,
    from a smaller one, none of them do. Pure and deterministic."""
    # The terms this fold brought: those of lines not in the previous summary, less the
    # previous summary's own (an old line with junk glued on, or re-punctuated, is new).
    written = text_terms(new_part(summary, previous)) - text_terms(previous or "")
    source = _source_terms([*chunk, previous or ""])
    whole = text_terms(summary)
    if (
        len(source) >= MIN_SOURCE_TERMS
        and (whole or summary.isascii())  # a script `text_terms` cannot read is not judged
        and (bool(previous and previous.strip()) or whole <= _CHAT_STEMS)
        and not any(_supported(term, source) for term in whole)
    ):
        # Nothing of what it stands for is in it, however short: "Sure! Please paste the
        # conversation.", "N/A", a refusal in another script, each stored at every fold of a
        # 60-turn chat when under MIN_SUMMARY_TERMS terms meant "too small to judge". A first
        # fold may note nothing in words of its own ("- nothing noted yet" of small talk);
        # after one, such an answer would wipe the notes.
        return Relatedness(False, True, 0.0, len(written), len(source))
    if whole and whole <= _CHAT_STEMS:
        # Chat words only, however small the chunk: a chat word is no evidence (`_supported`),
        # not even one the chunk or the previous summary said (found by attack: with folds of
        # 4 items, 15 terms each, "Sure! How can I help you today?" was "too small to judge"
        # and stored 38 times of 38 in place of the notes, then vouched for by its own words).
        return Relatedness(False, True, 0.0, len(written), len(source))
    if len(written) < MIN_SUMMARY_TERMS:
        return Relatedness(True, False, 1.0, len(written), len(source))
    found = sum(1 for term in written if _supported(term, source))
    support = found / len(written)
    if invented_identifiers(written, source, source_numbers([*chunk, previous or ""])):
        return Relatedness(False, True, support, len(written), len(source))
    if len(source) < MIN_SOURCE_TERMS:
        # Too little to judge a paraphrase by, but a summary sharing NO term with its source
        # stands for nothing in it. Accepted, it would be the next fold's `previous`, and a
        # summarizer answering the same junk every fold then adds nothing to judge: junk
        # after twenty turns of "hi" and "ok" stood for every later fold. A chat word is no
        # evidence here either: "Thanks! The quick brown fox..." shared "thanks" with the
        # small talk and passed. A summary of pure small talk can be refused too: that costs
        # a turn of backoff, and the next fold is judged on more.
        if found == 0:
            return Relatedness(False, True, 0.0, len(written), len(source))
        return Relatedness(True, False, 1.0, len(written), len(source))
    return Relatedness(support >= UNRELATED_BELOW, True, support, len(written), len(source))


def backoff_turns(failures: int) -> int:
    """Turns to wait after `failures` consecutive refused or failed folds: 1, 2, 4, ... capped
    at `BACKOFF_MAX_TURNS`; 0 after none."""
    if failures < 1:
        return 0
    return min(BACKOFF_MAX_TURNS, 1 << min(failures - 1, 30))


def is_failure(outcome: str | None) -> bool:
    """Whether a fold outcome (a refusal reason, `failed:<code>`, or None for a stored
    summary) counts towards the backoff."""
    return outcome is not None and outcome not in NOT_FAILURES


def backoff_after(
    outcome: str | None, health: FoldHealth | None, seq: int, owed: int = 0
) -> FoldHealth | None:
    """The thread's fold health after a fold attempt at `seq` (the turn's newest message):
    `outcome` None for a stored summary, else its refusal reason. A failure adds one to the
    consecutive failures and waits `backoff_turns` turns; a success clears them. `owed` is
    what the fold left unsummarized beyond the window. None when the thread is, and stays,
    plainly healthy (no row write is needed)."""
    if not is_failure(outcome):
        healed = FoldHealth(outcome="ok", owed=owed)
        if health is None and owed == 0:
            return None
        return healed
    failures = (health.failures if health is not None else 0) + 1
    wait = backoff_turns(failures)
    return FoldHealth(
        outcome=str(outcome),
        failures=failures,
        # The next `wait` turns (of TURN_MESSAGES each) come before it, the one after does not.
        retry_after_seq=seq + TURN_MESSAGES * wait + 1,
        owed=owed,
    )


MAX_WAIT_SEQS = TURN_MESSAGES * BACKOFF_MAX_TURNS + 1
"""The farthest past the seq a fold failed at that its backoff can end. Where the clock is the
thread's newest seq, which only grows (an adapter's thread: `integrations.thread`), a longer
wait is another thread's of the same id; the loop's fold clock (the seq its fold owes up to)
can step back when messages are erased, so it cannot tell the two apart this way."""


def may_fold(health: FoldHealth | None, seq: int) -> bool:
    """Whether a thread whose newest message is `seq` may attempt a fold now."""
    return health is None or seq >= health.retry_after_seq


def turns_left(health: FoldHealth | None, seq: int) -> int:
    """Turns after the one at `seq` that will not fold (0: the next turn may)."""
    if health is None or seq >= health.retry_after_seq:
        return 0
    return max(0, -(-(health.retry_after_seq - seq) // TURN_MESSAGES) - 1)


def same_health(a: FoldHealth | None, b: FoldHealth | None) -> bool:
    """Whether two states need no write between them (None is the plain healthy state)."""
    plain = FoldHealth(outcome="ok")
    return (a or plain) == (b or plain)


class MemoryHealth(BaseModel):
    """A summarizing thread's memory health, as the inspector shows it (docs/history.md,
    "Memory health")."""

    last_fold: str
    """`ok`, the last attempt's refusal reason (`empty`, `unrelated`, `failed:timeout`...), or
    `none` when the thread never failed a fold and has no summary yet."""
    failures: int = 0
    """Consecutive refused or failed folds."""
    backoff_turns: int = 0
    """Upcoming turns that will not attempt a fold (0: the next turn may)."""
    messages_owed: int = 0
    """Messages beyond the window that the summary does not cover: what the next fold owes.
    They ride in the prompt up to a cap; past it the oldest are left out (never deleted)."""
    archived_notes: int | None = None
    """Summary notes archived out of the summary (searchable), on a store that archives them;
    None on one that does not."""


def memory_health(
    health: FoldHealth | None,
    has_summary: bool,
    fold: tuple[int, int] | None,
    archived_notes: int | None = None,
    *,
    owed: int | None = None,
) -> MemoryHealth:
    """The view of a thread's memory: its stored `health`, whether it has a summary, and the
    fold its next turn would owe (`(from_seq, through_seq)`, None when none), holding `owed`
    messages (None: as many as its seqs, which counts erased ones too)."""
    if owed is None:
        owed = fold[1] - fold[0] + 1 if fold is not None else 0
    waiting = 0
    if fold is not None and not may_fold(health, fold[1]):
        waiting = turns_left(health, fold[1]) + 1
    if health is not None:
        last = health.outcome
    else:
        last = "ok" if has_summary else "none"
    return MemoryHealth(
        last_fold=last,
        failures=health.failures if health is not None else 0,
        backoff_turns=waiting,
        messages_owed=owed,
        archived_notes=archived_notes,
    )


# --- what the loop's hooks call (the journal's side) -----------------------------------------


def message_texts(messages: Sequence[Message]) -> list[str]:
    """What a fold's messages say: contents, tool call arguments and tool results."""
    out: list[str] = []
    for m in messages:
        out.append(m.content)
        out.extend(str(call.arguments) for call in m.tool_calls)
        out.extend(r.content for r in m.tool_results)
    return out


def unrelated_fold(text: str, messages: Sequence[Message], previous: str | None) -> str | None:
    """`"unrelated"` when `text` does not stand for `messages` and the summary so far
    (`judge_relatedness`), else None: a refusal reason like `fold_rejection`'s."""
    verdict = judge_relatedness(text, message_texts(messages), previous)
    return None if verdict.related else "unrelated"


def journaled_health(fold: Mapping[str, Any]) -> FoldHealth | None:
    """The fold health a `load:thread` payload journaled (None: healthy, or none kept)."""
    found = fold.get("health")
    return FoldHealth.model_validate(found) if isinstance(found, dict) else None


def _unread_owed(fold: Mapping[str, Any], covered: int, folded: int) -> int:
    """Of the messages `fold` owes past `covered`, those the turn's read left unread (older than
    the page, so neither summarized nor sent): the store's count when erased messages made it
    differ from the seqs (`unread`, journaled) less the `folded` messages this turn's fold
    took, which it took oldest first, so from them (in a journal that says so, `unread_net`:
    an older run's prompt counted the whole span, and its rebuild must); else the seqs. Never
    more than the seqs left once `covered` moved into them. Exact, but for a mid-run refold's
    fold, which carries no count (its seqs are counted: at most as many as exist plus the
    erased)."""
    through = int(fold["through"])
    seqs = (int(m.get("seq") or 0) for m in fold["messages"])
    first = min((s for s in seqs if s), default=through + 1)  # the page's first message
    gap = max(0, min(first - 1, through) - covered)
    unread = fold.get("unread")
    taken = folded if fold.get("unread_net") else 0  # an older journal counted it gross
    return gap if unread is None else min(max(0, int(unread) - taken), gap)


def owed_count(fold: Mapping[str, Any], covered: int, *, folded: int = 0) -> int:
    """Messages `fold` owes that a summary through `covered` does not cover: those of the page
    (exactly: an erased one's seq is not owed) and those the read left unread
    (`_unread_owed`). `folded`: the messages this turn's fold of `fold` summarized (its
    accepted chunks' `input_messages`), which moved `covered` from the read's boundary."""
    through = int(fold["through"])
    in_page = sum(1 for m in fold["messages"] if covered < int(m.get("seq") or 0) <= through)
    return in_page + _unread_owed(fold, covered, folded)


def fold_clock(fold: Mapping[str, Any]) -> int:
    """The thread's clock for the backoff: the newest seq the fold owes (it moves on with the
    thread, and it is journaled, so a replay reads the same)."""
    return int(fold["through"])


__all__ = [
    "BACKOFF_MAX_TURNS",
    "INVENTED_BELOW",
    "MAX_WAIT_SEQS",
    "MIN_IDENTIFIERS",
    "MIN_SOURCE_TERMS",
    "MIN_SUMMARY_TERMS",
    "NOT_FAILURES",
    "STEM_CHARS",
    "TURN_MESSAGES",
    "UNRELATED_BELOW",
    "FoldHealth",
    "MemoryHealth",
    "Relatedness",
    "backoff_after",
    "backoff_turns",
    "fold_clock",
    "invented_identifiers",
    "is_failure",
    "journaled_health",
    "judge_relatedness",
    "may_fold",
    "memory_health",
    "message_texts",
    "new_part",
    "owed_count",
    "same_health",
    "source_numbers",
    "text_terms",
    "turns_left",
    "unrelated_fold",
]
