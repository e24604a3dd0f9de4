"""One framework item as the store keeps it, and the id of a session's thread.

An adapter hands `ThreadHistory` (`integrations.thread`), per item, a `Projection` (the role and
plain text the store indexes, searches, bounds by runs and summarizes) and the item's own JSON
(`item_json`), which rides on the stored message VERBATIM as one attachment of media type
`ITEM_MEDIA_TYPE` (`stored_message`; `verbatim` reads it back). A session's thread id names the
session, its actor and its adapter (`thread_id_for`). Pure functions: no store, no framework.
"""

from __future__ import annotations

import json
import reprlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bounded_agents.core.messages import Attachment, Message, storable_text
from bounded_agents.errors import InvalidInput, clipped

ITEM_MEDIA_TYPE = "application/vnd.bounded-agents.item+json"
"""The attachment that holds a framework item verbatim (its JSON text in `data`)."""

THREAD_ID_CHARS = 36
"""The store's thread ids are at most 36 characters (a UUID)."""

_NAMESPACE = uuid.UUID("5b0d4a8e-3f0c-4c52-9a45-7d1c2b8e6f10")
_OWNED_NAMESPACE = uuid.UUID("9c1e6f3a-2b7d-4e85-a0c4-6d2f8b1e5a37")


@dataclass(frozen=True)
class Projection:
    """What the store sees of an item: who spoke (`user` starts a run) and its plain text."""

    role: Literal["system", "user", "assistant"]
    text: str


@dataclass(frozen=True)
class Links:
    """How an item is tied to its neighbours, as its adapter reads it: the tool calls it makes
    (`opens`, by call id), the calls it answers (`closes`), and whether the item after it
    belongs with it (`leads`: a reasoning item goes with the call it reasoned about). A view
    or a fold cut inside a run must leave no answer without its call, and no call without the
    item that leads to it: providers refuse either (`view_start`, `integrations.folds`)."""

    opens: frozenset[str] = frozenset()
    closes: frozenset[str] = frozenset()
    leads: bool = False


NO_LINKS = Links()
"""An item tied to nothing: a plain message, or a row no adapter wrote."""


def view_start(links: Sequence[Links], *, first_trusted: bool) -> int | None:
    """Where a view of these items (oldest first) may begin: the first index from which every
    answer has its call in the view, and whose item no left-out item leads to; None when there
    is no such place. The item before the first is not known (the read did not reach it), so
    index 0 is taken only when `first_trusted` (nothing unsummarized lies before it).

    Per index, not per item: a call is a fine start, but not the second of two parallel calls
    whose outputs follow both (found by review: the view began on `call b`, then `output a`)."""
    unmatched: set[str] = set()  # answers in links[i:] whose call is not in links[i:]
    clean = [False] * len(links)
    for i in range(len(links) - 1, -1, -1):
        unmatched -= links[i].opens
        unmatched |= links[i].closes
        clean[i] = not unmatched
    # Whether an item goes with the one before it: led by it, or a call beside a led call
    # (found by review: the second of two parallel calls of one reasoning item was a place
    # to begin when the first had no output yet, and the view sent it without the reasoning).
    led = [not first_trusted] + [False] * (len(links) - 1)
    for i in range(1, len(links)):
        beside = bool(links[i].opens) and bool(links[i - 1].opens) and led[i - 1]
        led[i] = links[i - 1].leads or beside
    for i, ok in enumerate(clean):
        if ok and not led[i]:
            return i
    return None


def orphan_answers(links: Sequence[Links]) -> frozenset[int]:
    """Indices of the items (oldest first) that answer calls and none made before them in
    `links`: a provider refuses an output whose call it was not sent. An item answering some
    calls made before it and some not is not among them (dropping it would leave those calls
    without their outputs); its adapter mends it (Pydantic AI's `returns_as_text`)."""
    opened: set[str] = set()
    out: set[int] = set()
    for i, tie in enumerate(links):
        if tie.closes and tie.closes.isdisjoint(opened):
            out.add(i)
        opened |= tie.opens
    return frozenset(out)


def thread_id_for(session_id: str, *, actor_id: str, agent: str) -> str:
    """The store's thread id for a framework's session or conversation id, of one actor and
    one adapter (`agent`): a UUID5 of the three, so two actors (or two adapters) naming the
    same session have two threads, and no session id names another's.

    A thread id was the session id itself before (`legacy_thread_id_for`), so a session id was
    one namespace for every actor: the first to use one owned it, the next was refused, and
    the owner check (one read) and the read, write or erasure after it were two statements.
    Found by attack: after a session was cleared, another actor starting the same id between
    the two had his items read, popped or cleared by the first (2 of 1,374 reads with no hook
    at all), or got hers appended to his thread."""
    if not session_id:
        raise InvalidInput("a session id may not be empty")
    # JSON, not a separator: a separator inside one part would make two triples one id (a
    # review found "s\x1fchat" of alice and "chat" of "alice\x1fs" naming one thread).
    named = json.dumps([agent, actor_id, session_id], ensure_ascii=True)
    return str(uuid.uuid5(_OWNED_NAMESPACE, named))


def legacy_thread_id_for(session_id: str) -> str:
    """The thread id a session had before ids named their actor: the session id itself, or a
    UUID5 of a longer one. A session stored then is still read there (`ThreadHistory`), by its
    own actor and adapter only; no new thread is made under such an id."""
    if not session_id:
        raise InvalidInput("a session id may not be empty")
    if len(session_id) <= THREAD_ID_CHARS and session_id.isprintable():
        return session_id
    return str(uuid.uuid5(_NAMESPACE, session_id))


def item_json(item: Any, *, label: str) -> str:
    """`item` as JSON text, refused with one clear line naming `label` when it is no JSON.

    JSON escapes U+0000 (`\\u0000` is storable text); a lone surrogate it keeps raw unless
    asked for ASCII, so an item holding one is written with `\\udXXX` escapes: either way the
    text a store can hold, parsed back to the item exactly."""
    try:
        text = json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{label} is not JSON-serializable: {exc}") from None
    except RecursionError:  # found by attack: a list nested 2,000 deep raised it raw
        raise InvalidInput(f"{label} is nested too deeply to store") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(item, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def stored_message(projection: Projection, item_text: str, run_id: str | None = None) -> Message:
    """The stored message of one item: the projection, and the item's JSON text verbatim.
    The projection is ours to word, so what no store can hold (U+0000, a lone surrogate:
    model and tool text may have them) becomes U+FFFD there (`storable_text`); the item
    itself keeps them (`item_json`)."""
    attachment = Attachment(name="item.json", media_type=ITEM_MEDIA_TYPE, data=item_text)
    return Message(
        role=projection.role,
        content=storable_text(projection.text),
        attachments=[attachment],
        run_id=run_id,
    )


def verbatim(message: Message) -> Any:
    """The item an adapter stored in `message`, parsed; None for a message no adapter wrote."""
    for attachment in message.attachments:
        if attachment.media_type == ITEM_MEDIA_TYPE and attachment.data is not None:
            return json.loads(attachment.data)
    return None


def for_summary(message: Message) -> Message:
    """`message` without the verbatim copy: the summarizer reads the projection, not JSON."""
    kept = [a for a in message.attachments if a.media_type != ITEM_MEDIA_TYPE]
    return message.model_copy(update={"attachments": kept})


_LABEL_REPR = reprlib.Repr()
_LABEL_REPR.maxlevel, _LABEL_REPR.maxstring, _LABEL_REPR.maxother = 3, 80, 80
"""A repr bounded in depth and size: `label` is built for every item a write is given, some
of them 10 MB or nested thousands deep (found by attack: the plain repr raised
RecursionError where the item deserved a one-line refusal)."""


def label(item: Any, index: int) -> str:
    """How an error names item `index`: its type when it has one, and a clipped repr."""
    kind = (item.get("type") or item.get("kind")) if isinstance(item, dict) else type(item).__name__
    try:
        shown = _LABEL_REPR.repr(item)
    except (RecursionError, ValueError):  # too deep; an int past Python's 4,300 digits
        shown = "..."
    return f"item {index} ({kind or 'no type'}: {clipped(shown, 80)})"


__all__ = [
    "ITEM_MEDIA_TYPE",
    "NO_LINKS",
    "THREAD_ID_CHARS",
    "Links",
    "Projection",
    "for_summary",
    "item_json",
    "label",
    "legacy_thread_id_for",
    "orphan_answers",
    "stored_message",
    "thread_id_for",
    "verbatim",
    "view_start",
]
