"""The journal's vocabulary: every step name, the patch markers, and the shape of each payload.

A journaled run is replayed by later versions of this code, so a step's name and the JSON text
of its payload are persisted compatibility data (`tests/loop/test_golden_journal.py` holds them
byte for byte). They are spelled here once, and the loop, the observability, the journal's
timeline, the inspector and the DBOS runtime all read them through this module: a reader that
spells `"load:thread"` or digs in a payload by string key on its own drifts from the writer.

Each payload kind is a `TypedDict` with a `parse_*` function that checks a decoded payload
against it and returns a new dict holding the same keys in the order the writer writes them,
and a `*_payload` builder the writer uses. Parsing a payload then dumping it with the journal's
`json.dumps` settings gives back the very bytes journaled (tests/core/test_checkpoints.py checks
it over the golden journals). A key this module does not know is kept, after the known ones: a
reader must not lose what a newer writer added. A payload of the wrong shape is a
`JournalMismatch`; `or_none(parse_*, value)` answers None instead, for the readers that only
describe a run (spans, pages) and must never fail a request over it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NotRequired, TypeAlias, TypedDict, TypeVar, cast

from bounded_agents.errors import JournalMismatch

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object another module owns the shape of (a message's journal form, a response)."""

# --- step names ------------------------------------------------------------------------------

PERSIST_USER = "persist:user"
"""The run's user message stored (`SeqPayload`)."""
PERSIST_ASSISTANT = "persist:assistant"
"""The answer stored, with the run's end (`SeqPayload`)."""
LOAD_THREAD = "load:thread"
"""The bounded read and the selection (`LoadThreadPayload`; `LegacyLoadPayload` before
`ROLLING_SUMMARY`)."""
HISTORY_PREFIX = "history:"
"""Every summarizer step's name starts with it."""
SUMMARIZE = HISTORY_PREFIX + "summarize"
"""One fold step's summarizer calls (`SummarizePayload`, `LegacySummarizePayload`); the n-th
fold of a run is `history:summarize:n`."""
PERSIST_USAGE_HISTORY = "persist:usage:history"
"""A fold step's ledger row (`UsageRecordedPayload`); `:n` as its fold."""
PERSIST_SUMMARY = "persist:summary"
"""A fold's summary stored (`SummarySavedPayload`); `:n` as its fold."""
PERSIST_FOLD_HEALTH = "persist:fold_health"
"""The thread's fold health stored after a fold that changed it (a refusal, a failure, the
first success after them); `:n` as its fold. Payload `{"failures": n}`."""
MODEL_PREFIX = "model:"
"""`model:<n>`: the run's n-th chat call (`ModelPayload`)."""
TOOL_PREFIX = "tool:"
"""`tool:<n>:<call id>`: a tool call model step n asked for (`ToolPayload`)."""
PATCH_PREFIX = "patch:"
"""`patch:<marker>`: the journal entry a patch marker leaves (payload `true`)."""

SELECTED_HISTORY = "agent:selected-history"
"""The patch marker of the selection-only `load:thread` payload (runs journaled before
`ROLLING_SUMMARY` only)."""
ROLLING_SUMMARY = "agent:rolling-summary"
"""The patch marker of the current path: reads after the thread's summary, folds only what is
new into it and stores each fold. A run journaled without it replays the path it recorded."""


def model_step(n: int) -> str:
    return f"{MODEL_PREFIX}{n}"


def tool_step(n: int, call_id: str) -> str:
    return f"{TOOL_PREFIX}{n}:{call_id}"


_PAYLOAD_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""`json.dumps` with these settings builds this encoder on every call; one serves them all."""


def encode_payload(value: object) -> str:
    """A step's payload as the journal stores it: compact JSON, non-ASCII kept as is, so the
    journal's byte counts (`journal_bytes`) are the stored bytes."""
    return _PAYLOAD_ENCODER.encode(value)


def patch_step(marker: str) -> str:
    return PATCH_PREFIX + marker


def fold_step(base: str, fold: int) -> str:
    """The name of a fold's step (`SUMMARIZE`, `PERSIST_USAGE_HISTORY`, `PERSIST_SUMMARY`): the
    run's first fold has the bare name, the n-th `<name>:n`."""
    return base if fold == 1 else f"{base}:{fold}"


def is_model_step(name: str) -> bool:
    return name.startswith(MODEL_PREFIX)


def is_history_step(name: str) -> bool:
    """A summarizer step (`history:summarize[:n]`)."""
    return name.startswith(HISTORY_PREFIX)


def is_tool_step(name: str) -> bool:
    return name.startswith(TOOL_PREFIX)


def is_summarize_step(name: str) -> bool:
    return name == SUMMARIZE or name.startswith(SUMMARIZE + ":")


def is_timeline_step(name: str) -> bool:
    """A step whose payload the thread's timeline reads: what the model was sent."""
    return name == LOAD_THREAD or name.startswith(HISTORY_PREFIX)


def tool_call_id(name: str) -> str:
    """The call id a `tool:<n>:<call id>` step names (ids may hold colons)."""
    return name.split(":", 2)[-1]


# --- payload shapes ------------------------------------------------------------------------


class SeqPayload(TypedDict):
    """`persist:user`, `persist:assistant`: the stored message's seq (None: already stored)."""

    seq: int | None


class UsagePayload(TypedDict):
    """A call's `Usage`, as journaled with its response or its fold."""

    prompt_tokens: int
    completion_tokens: int
    estimated: NotRequired[bool]
    cached_tokens: NotRequired[int | None]
    cache_write_tokens: NotRequired[int | None]


class ToolCallPayload(TypedDict):
    """A `ToolCall` a model step's response asked for."""

    id: str
    name: str
    arguments: JsonObject


class ResponsePayload(TypedDict):
    """A `ModelResponse`, made storable (whose defaults a replay fills in where it lacks them)."""

    content: str
    tool_calls: NotRequired[list[ToolCallPayload]]
    usage: NotRequired[UsagePayload]
    model: NotRequired[str]
    finish_reason: NotRequired[str | None]


class ModelMetricsPayload(TypedDict, total=False):
    """A chat call's figures, the keyword arguments of its `ModelCallReport`."""

    window_trimmed: bool
    messages_sent: int
    messages_original: int
    window_orphans_dropped: int
    prefix_reused_messages: int
    prefix_reused_tokens: int
    previous_prompt_messages: int | None
    extends_previous: bool
    prompt_estimated_tokens: int


class ThreadSummaryPayload(TypedDict):
    """The thread's summary `load:thread` read (`ThreadSummary`, defaults left out)."""

    text: str
    covers_through_seq: int
    model: NotRequired[str]
    prompt_tokens: NotRequired[int]
    completion_tokens: NotRequired[int]
    run_id: NotRequired[str | None]


class FoldPayload(TypedDict):
    """The fold `load:thread` says the turn owes: through which seq, and the messages of it the
    read held (each whole, seq and run id included)."""

    through: int
    messages: list[JsonObject]
    health: NotRequired[JsonObject]
    """The thread's `FoldHealth` when its folds failed before (issue 36): the backoff is
    decided from this journaled copy, so a replay decides as the run did."""
    unread: NotRequired[int]
    """How many messages the read left unread before the page (`ThreadTurnPage.unread`), when
    erased messages make that fewer than the seqs there: what is owed is counted in messages
    (`fold_health.owed_count`)."""
    unread_net: NotRequired[bool]
    """True: what this turn's fold summarizes comes off `unread` in what it leaves owed (and in
    its prompt's omission note). Absent in a journal written before that: its prompt counted
    the whole span, and a rebuild of it must too."""


KeepRef = int | JsonObject
"""One kept message of `load:thread`'s `keep_refs`: the seq of a stored message, or a message
the history policy made itself (not a stored row as read), journaled whole."""


class LoadThreadPayload(TypedDict):
    """`load:thread` on the rolling-summary path. Exactly one of `keep_refs` (journals written
    since issue 37's sixth round) and `keep` (before)."""

    keep_refs: NotRequired[list[KeepRef]]
    """The kept messages, oldest first: the seq of each stored message as the read returned it
    (a replay reads those rows again; their text is not copied into the journal every turn),
    and whole (`messages.journal_form`, seq included) any message the policy built itself."""
    keep: NotRequired[list[JsonObject]]
    """The kept messages in their journal form (`messages.journal_form`): journals written
    before `keep_refs`, replayed as they are."""
    last_prompt: NotRequired[str]
    summary: NotRequired[ThreadSummaryPayload]
    fold: NotRequired[FoldPayload]
    title: NotRequired[str | None]
    has_assistant_message: NotRequired[bool]
    keep_seqs: NotRequired[list[int]]
    """The kept messages' seqs, only when they have a gap (an erased message among them): a
    refolding window numbers its messages by them. Absent: contiguous, ending with the user's
    message (journals from before it too)."""
    clearing: NotRequired[JsonObject]
    """The policy's tool-result clearing when it read (`ToolResultClearing`), so a replay
    clears as the first attempt did; absent: nothing cleared (journals from before it too)."""


class LegacyLoadPayload(TypedDict):
    """`load:thread` of a run journaled before `ROLLING_SUMMARY`: the selection (`keep`, `drop`,
    after `SELECTED_HISTORY`) or the whole thread read (`messages`)."""

    keep: NotRequired[list[JsonObject]]
    drop: NotRequired[list[JsonObject]]
    messages: NotRequired[list[JsonObject]]


class ArchivedPayload(TypedDict):
    """The part of a summary a fold archived: notes from messages `from_seq..to_seq`."""

    from_seq: int
    to_seq: int
    content: str


class SummarizePayload(TypedDict):
    """`history:summarize[:n]`: the fold's calls and their cost, then the summary made (`text`,
    `covers_through_seq`) or why none was (`rejected`, `last_seq`)."""

    calls: NotRequired[int]
    budget: NotRequired[int]
    usage: NotRequired[UsagePayload]
    model: NotRequired[str]
    reserved: NotRequired[int]
    text: NotRequired[str]
    rejected: NotRequired[str]
    last_seq: NotRequired[int | None]
    covers_through_seq: NotRequired[int]
    input_messages: NotRequired[int]
    input_tokens: NotRequired[int]
    compressed: NotRequired[int]
    fitted_tokens: NotRequired[int]
    messages_cut: NotRequired[int]
    clipped_chars: NotRequired[int]
    archived_chars: NotRequired[int]
    archived: NotRequired[ArchivedPayload]
    """The summary's oldest part, archived instead of clipped (written by `persist:summary`)."""


class LegacySummarizePayload(TypedDict):
    """`history:summarize` of the legacy path: one summary of the dropped messages."""

    text: str
    usage: UsagePayload
    reserved: NotRequired[int]


class UsageRecordedPayload(TypedDict):
    """`persist:usage:history[:n]`: the fold's ledger row booked."""

    recorded: bool


class SummarySavedPayload(TypedDict):
    """`persist:summary[:n]`: the fold's summary stored."""

    covers_through_seq: int


class ModelPayload(TypedDict):
    """`model:<n>`: the response (a `ModelResponse`), the figures `ModelCallReport` takes, and
    the digest of the prompt sent (absent in journals older than prompt digests)."""

    response: ResponsePayload
    metrics: ModelMetricsPayload
    prompt_digest: NotRequired[str | None]


class ToolPayload(TypedDict):
    """`tool:<n>:<call id>`: the tool's result (a `ToolResult`)."""

    call_id: str
    content: str
    is_error: bool


# --- parsing ---------------------------------------------------------------------------------

_P = TypeVar("_P")
_Check = Callable[[object], bool]


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _opt_int(v: object) -> bool:
    return v is None or _int(v)


def _str(v: object) -> bool:
    return isinstance(v, str)


def _opt_str(v: object) -> bool:
    return v is None or isinstance(v, str)


def _bool(v: object) -> bool:
    return isinstance(v, bool)


def _obj(v: object) -> bool:
    return isinstance(v, dict)


def _objs(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(m, dict) for m in v)


def _refs(v: object) -> bool:
    return isinstance(v, list) and all(_int(m) or isinstance(m, dict) for m in v)


def _usage(v: object) -> bool:
    return isinstance(v, dict) and _int(v.get("prompt_tokens")) and _int(v.get("completion_tokens"))


def _tool_call(v: object) -> bool:
    return isinstance(v, dict) and _str(v.get("id")) and _str(v.get("name"))


def _response(v: object) -> bool:
    if not isinstance(v, dict) or not _str(v.get("content")):
        return False
    if "usage" in v and not _usage(v["usage"]):
        return False
    calls = v.get("tool_calls", [])
    return isinstance(calls, list) and all(_tool_call(c) for c in calls)


def _summary(v: object) -> bool:
    return isinstance(v, dict) and _str(v.get("text")) and _int(v.get("covers_through_seq"))


def _fold(v: object) -> bool:
    return isinstance(v, dict) and _int(v.get("through")) and _objs(v.get("messages"))


_Shape = tuple[tuple[str, _Check, bool], ...]
"""(key, check, required), in the order the writer writes the keys."""

_SHAPES: dict[str, _Shape] = {
    "seq": (("seq", _opt_int, True),),
    "load": (
        ("keep_refs", _refs, False),
        ("keep", _objs, False),
        ("last_prompt", _str, False),
        ("summary", _summary, False),
        ("fold", _fold, False),
        ("title", _opt_str, False),
        ("has_assistant_message", _bool, False),
    ),
    "legacy_load": (("keep", _objs, False), ("drop", _objs, False), ("messages", _objs, False)),
    "summarize": (
        ("calls", _int, False),
        ("budget", _int, False),
        ("usage", _usage, False),
        ("model", _str, False),
        ("reserved", _int, False),
        ("text", _str, False),
        ("rejected", _str, False),
        ("last_seq", _opt_int, False),
        ("covers_through_seq", _int, False),
        ("input_messages", _int, False),
        ("input_tokens", _int, False),
        ("compressed", _int, False),
        ("fitted_tokens", _int, False),
        ("messages_cut", _int, False),
        ("clipped_chars", _int, False),
    ),
    "legacy_summarize": (("text", _str, True), ("usage", _usage, True), ("reserved", _int, False)),
    "recorded": (("recorded", _bool, True),),
    "saved": (("covers_through_seq", _int, True),),
    "model": (
        ("response", _response, True),
        ("metrics", _obj, True),
        ("prompt_digest", _opt_str, False),
    ),
    "tool": (("call_id", _str, True), ("content", _str, True), ("is_error", _bool, True)),
}


def _parse(kind: str, value: object) -> JsonObject:
    """`value` checked against the shape, its known keys in the writer's order, then the rest."""
    if not isinstance(value, dict):
        raise JournalMismatch(f"a journaled {kind} payload is not an object")
    shape = _SHAPES[kind]
    out: JsonObject = {}
    for key, check, required in shape:
        if key not in value:
            if required:
                raise JournalMismatch(f"a journaled {kind} payload lacks {key!r}")
            continue
        if not check(value[key]):
            raise JournalMismatch(f"a journaled {kind} payload has a malformed {key!r}")
        out[key] = value[key]
    known = {key for key, _, _ in shape}
    out.update((k, v) for k, v in value.items() if k not in known)
    return out


def parse_seq(value: object) -> SeqPayload:
    return cast(SeqPayload, _parse("seq", value))


def parse_load_thread(value: object) -> LoadThreadPayload:
    parsed = _parse("load", value)
    if ("keep" in parsed) == ("keep_refs" in parsed):
        raise JournalMismatch("a journaled load payload needs one of 'keep' and 'keep_refs'")
    return cast(LoadThreadPayload, parsed)


def kept_count(load: LoadThreadPayload) -> int:
    """How many messages `load:thread` kept, whichever form it journaled them in."""
    return len(load["keep_refs"] if "keep_refs" in load else load.get("keep", []))


def parse_legacy_load(value: object) -> LegacyLoadPayload:
    return cast(LegacyLoadPayload, _parse("legacy_load", value))


def parse_summarize(value: object) -> SummarizePayload:
    return cast(SummarizePayload, _parse("summarize", value))


def parse_legacy_summarize(value: object) -> LegacySummarizePayload:
    return cast(LegacySummarizePayload, _parse("legacy_summarize", value))


def parse_usage_recorded(value: object) -> UsageRecordedPayload:
    return cast(UsageRecordedPayload, _parse("recorded", value))


def parse_summary_saved(value: object) -> SummarySavedPayload:
    return cast(SummarySavedPayload, _parse("saved", value))


def parse_model(value: object) -> ModelPayload:
    return cast(ModelPayload, _parse("model", value))


def parse_tool(value: object) -> ToolPayload:
    return cast(ToolPayload, _parse("tool", value))


def or_none(parse: Callable[[object], _P], value: object) -> _P | None:
    """`parse(value)`, or None for a payload of another shape: for readers that only describe
    a run (a span, a page) and must not fail on a journal they do not understand."""
    try:
        return parse(value)
    except JournalMismatch:
        return None


def dump(payload: Mapping[str, Any]) -> JsonObject:
    """The JSON object journaled for a parsed or built payload (the same keys, same order)."""
    return dict(payload)


# --- builders (the writers' side) ------------------------------------------------------------


def seq_payload(seq: int | None) -> SeqPayload:
    return {"seq": seq}


def load_thread_payload(
    kept: list[KeepRef] | list[JsonObject],
    *,
    by_seq: bool = True,
    last_prompt: str | None,
    summary: JsonObject | None,
    fold: FoldPayload | None,
    title: str | None,
    has_assistant_message: bool,
) -> LoadThreadPayload:
    """`kept`: the kept messages by seq (`keep_refs`), or, `by_seq` False, all of them whole
    in the older `keep` form (a store that cannot read them back: `core/turn/kept.py`)."""
    out: JsonObject = {"keep_refs": kept} if by_seq else {"keep": kept}
    if last_prompt is not None:
        out["last_prompt"] = last_prompt
    if summary is not None:
        out["summary"] = summary
    if fold is not None:
        out["fold"] = fold
    out["title"] = title
    out["has_assistant_message"] = has_assistant_message
    return cast(LoadThreadPayload, out)


def usage_recorded_payload() -> UsageRecordedPayload:
    return {"recorded": True}


def summary_saved_payload(covers_through_seq: int) -> SummarySavedPayload:
    return {"covers_through_seq": covers_through_seq}


def model_payload(response: JsonObject, metrics: JsonObject, digest: str | None) -> ModelPayload:
    """`response` is a `ModelResponse`'s JSON, `metrics` a `ModelCallReport`'s figures."""
    out: JsonObject = {"response": response, "metrics": metrics, "prompt_digest": digest}
    return cast(ModelPayload, out)


def legacy_summarize_payload(text: str, usage: JsonObject) -> LegacySummarizePayload:
    """`usage` is a `Usage`'s JSON."""
    out: JsonObject = {"text": text, "usage": usage}
    return cast(LegacySummarizePayload, out)
