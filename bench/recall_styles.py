"""Summarizer styles the project did not tune, for `bench.recall_layers`.

A summary is only as good as the summarizer writing it, and the project cannot pick its users'
models. These offline stand-ins behave like the kinds of summarizer met in practice; none of
them reads the recall material's phrasing (this module imports nothing from
`bench.recall_material`, and `tests/bench/test_recall_layers.py` checks that none of the
generator's template strings appears here). Each is a `Summarizer` (`(messages, ctx)`):

- `compact`: a careful note-taker. One short note per sentence the user states (not asks) and
  per sentence anywhere that carries a value (a number, an identifier, a capitalized name), the
  assistant's question attached when the user's answer names no subject of its own; a note
  whose subject and value shape match an older one replaces it (a correction, or small talk of
  the same sort); pasted logs and long pasted prose are not notes. The reference: what a
  good model asked for running notes writes.
- `verbose`: extractive. The summary so far plus every sentence of the new messages that holds
  a digit or a capitalized name (logs included, line by line), so it outgrows any cap. Asked to
  compress (`fold_task="compress"`) it keeps the sentences with an identifier, a date, an
  amount or a decision word, the newest per subject.
- `verbose-nocompress`: the same, answering a compress request with the summary unchanged.
- `junk`: answers the same unrelated sentence to every fold.
- `empty`: answers nothing (the loop refuses it).
- `down`: raises, as an unreachable summarizer does.

`Counted` wraps a style and counts what it was handed and answered (estimated tokens), calls
that failed included: what a summarizer costs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySummary, Summarizer, Usage
from bounded_agents.core.tokens import estimate_message_tokens

STYLES = ("compact", "verbose", "verbose-nocompress", "junk", "empty", "down")

_SENTENCE = re.compile(r"[^\n]+?(?:[.!?](?=\s|$)|$)", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_VALUE = re.compile(
    r"[A-Za-z0-9]*\d[A-Za-z0-9.,:/+-]*[A-Za-z0-9]|\d"  # anything holding a digit
    r"|(?<=\S\s)[A-Z][a-z]+(?:[ -][A-Z][a-z]+)*"  # a capitalized word past the first
)
_IDENTIFIER = re.compile(r"\b(?=[A-Z0-9-]*\d)(?=[A-Z0-9-]*[A-Z])[A-Z0-9]+(?:-[A-Z0-9]+)+\b")
_DATE_OR_AMOUNT = re.compile(r"\d{4}-\d{2}-\d{2}|\d[\d,.]*\s?(?:EUR|USD|GBP|%)")
_DECISION = re.compile(r"\b(decided|chose|settled|agreed|never|always|must|prefer\w*)\b", re.I)
_STOP = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers him his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours out over own
    same she should so some such than that the their them then there these they this those
    through to too under until up very was we were what when where which while who whom why
    will with would you your yours it's i'm that's there's let's please thanks thank sure ok
    okay yes well oh one use""".split()
)
_LOG_LINE = re.compile(r"^\s*\S*\d{2}:\d{2}(:\d{2})?\S*\s|\w+=\S+.*\w+=\S+")
_LONG_PASTE = 600
"""A message longer than this with little punctuation per word is pasted material, not a
statement to note."""


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def _texts(messages: Sequence[Message]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for m in messages:
        out.append((m.role, m.content))
        out.extend(("tool", r.content) for r in m.tool_results)
    return out


def _usage(messages: Sequence[Message], ctx: HistoryPolicyContext, text: str) -> Usage:
    return Usage(
        prompt_tokens=input_tokens(messages, ctx),
        completion_tokens=estimate_message_tokens(Message(role="assistant", content=text)),
        estimated=True,
    )


def input_tokens(messages: Sequence[Message], ctx: HistoryPolicyContext) -> int:
    """What a fold hands a summarizer, estimated: the summary so far plus the new messages (a
    compression: the summary alone)."""
    total = 0 if ctx.fold_task == "compress" else sum(estimate_message_tokens(m) for m in messages)
    if ctx.summary is not None:
        total += estimate_message_tokens(Message(role="system", content=ctx.summary.text))
    return total


# --- compact ---------------------------------------------------------------------------------


def _is_log(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) >= 3 and sum(bool(_LOG_LINE.search(x)) for x in lines) >= len(lines) // 2


def _is_paste(text: str) -> bool:
    return len(text) > _LONG_PASTE and text.count(".") < len(text) / 200


def _subject(sentence: str) -> frozenset[str]:
    """The sentence's content words, values left out: what the note is about."""
    stripped = _VALUE.sub(" ", sentence)
    return frozenset(w.lower() for w in _WORD.findall(stripped) if w.lower() not in _STOP)


def _shape(sentence: str) -> str:
    """The form of the sentence's first value (letters A/a, digits 9, runs collapsed): a
    correction's new value has the old one's shape."""
    found = _VALUE.search(sentence)
    if found is None:
        return ""
    shape = re.sub(r"[A-Z]+", "A", re.sub(r"[a-z]+", "a", re.sub(r"\d+", "9", found.group())))
    return shape


@dataclass
class _Note:
    text: str
    subject: frozenset[str]
    shape: str


def _same_subject(a: _Note, b: _Note) -> bool:
    if not a.subject or not b.subject or a.shape != b.shape:
        return False
    shared = len(a.subject & b.subject)
    return shared >= 1 and shared >= SAME_SUBJECT * len(a.subject | b.subject)


SAME_SUBJECT = 0.6
"""Two notes with values of one shape are about the same thing when this share of their
subject words (Jaccard) is shared: small talk of one sort, a correction that repeats most of
what the note said. Lower, two different facts said in the same turn of phrase ("the new X is
..." and "the new Y is ...") merge and one is lost; a correction that is not merged leaves the
old note beside the new one, which costs room, not recall."""


def _parse_notes(text: str) -> list[_Note]:
    out: list[_Note] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("- "):
            body = line[2:]
            about, _, said = body.partition(" :: ")
            sentence = said if said else body
            subject = _subject(about) | _subject(sentence) if said else _subject(sentence)
            out.append(_Note(body, subject, _shape(sentence)))
    return out


class Compact:
    """The careful note-taker (see the module's docstring)."""

    name = "compact"

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        notes = _parse_notes(ctx.summary.text) if ctx.summary is not None else []
        if ctx.fold_task != "compress":
            asked = ""
            for role, text in _texts(messages):
                if role == "assistant":
                    questions = [s for s in sentences(text) if s.endswith("?")]
                    asked = questions[-1] if questions else ""
                    continue
                if _is_log(text) or _is_paste(text):
                    continue
                for sentence in sentences(text):
                    said = role == "user" and not sentence.endswith("?")
                    if not (said or _VALUE.search(sentence)):
                        continue
                    subject, body = _subject(sentence), sentence
                    if role == "user" and len(subject) < 2 and asked:
                        # An answer names no subject: the question it answers does.
                        subject |= _subject(asked)
                        body = f"{asked} :: {sentence}"
                    note = _Note(body, subject, _shape(sentence))
                    notes = [n for n in notes if not _same_subject(n, note)] + [note]
                if role == "user":
                    asked = ""
        text = "\n".join(f"- {n.text}" for n in notes) or "- (nothing to note yet)"
        return HistorySummary(text=text, usage=_usage(messages, ctx, text), model="compact")


# --- verbose ---------------------------------------------------------------------------------

_HAS_DIGIT_OR_NAME = re.compile(r"\d|\b[A-Z][a-z]+ [A-Z][a-z]+\b|\s[A-Z][a-z]{2,}")


class Verbose:
    """Extractive (see the module's docstring); `compress=False` ignores compress calls."""

    def __init__(self, compress: bool = True) -> None:
        self.compress = compress
        self.name = "verbose" if compress else "verbose-nocompress"

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        previous = ctx.summary.text if ctx.summary is not None else ""
        if ctx.fold_task == "compress":
            text = _compressed(previous) if self.compress else previous
            return HistorySummary(text=text, usage=_usage(messages, ctx, text), model=self.name)
        kept = [previous] if previous else []
        for _role, text in _texts(messages):
            kept.extend(s for s in sentences(text) if _HAS_DIGIT_OR_NAME.search(s))
        text = "\n".join(kept)
        return HistorySummary(text=text, usage=_usage(messages, ctx, text), model=self.name)


def _compressed(text: str) -> str:
    """Sentences with an identifier, a date, an amount or a decision word; of those about the
    same subject, the newest."""
    newest: dict[frozenset[str] | str, str] = {}
    for sentence in sentences(text):
        if not (
            _IDENTIFIER.search(sentence)
            or _DATE_OR_AMOUNT.search(sentence)
            or _DECISION.search(sentence)
        ):
            continue
        subject: frozenset[str] | str = _subject(sentence) or sentence
        newest.pop(subject, None)
        newest[subject] = sentence
    return "\n".join(newest.values())


# --- broken ones -------------------------------------------------------------------------------

JUNK = "The quarterly newsletter will feature recipes from the staff picnic."


class Junk:
    name = "junk"

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(text=JUNK, usage=_usage(messages, ctx, JUNK), model="junk")


class Empty:
    name = "empty"

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(text="", usage=_usage(messages, ctx, ""), model="empty")


class SummarizerDown(ConnectionError):
    """What the `down` style raises: the summarizer cannot be reached."""


class Down:
    name = "down"

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        raise SummarizerDown("summarizer unreachable")


# --- counting ----------------------------------------------------------------------------------


class Counted:
    """A style with its cost counted: calls, failed calls, and the estimated tokens it was handed
    (`input_tokens`) and answered."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.calls = self.failed = self.tokens_in = self.tokens_out = 0

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        self.tokens_in += input_tokens(messages, ctx)
        try:
            made = await self.inner(messages, ctx)
        except Exception:
            self.failed += 1
            raise
        self.tokens_out += estimate_message_tokens(Message(role="assistant", content=made.text))
        return made


def style(name: str) -> Summarizer:
    """A fresh summarizer of the style `name` (one of `STYLES`)."""
    makers: dict[str, Callable[[], Summarizer]] = {
        "compact": Compact,
        "verbose": Verbose,
        "verbose-nocompress": lambda: Verbose(compress=False),
        "junk": Junk,
        "empty": Empty,
        "down": Down,
    }
    if name not in makers:
        raise ValueError(f"unknown summarizer style {name!r}; choose from {', '.join(STYLES)}")
    return makers[name]()
