"""The messages `load:thread` kept: how the journal records them and how they come back.

A turn's prompt holds the kept window, and a replay must send the same prompt. Until issue 37's
sixth round `load:thread` journaled every kept message whole (`keep`): a 10-message window with
five 8 KB tool results wrote about 43 KB of JSON every turn, the same messages again turn after
turn while they stayed in the window, and spent more Python encoding it than any other part
of the turn. It now journals their seqs (`keep_refs`): the stored rows are the copy. The run
that wrote the journal builds its prompt from the messages it read (`Turn.kept`); a replay
reads the same rows again by seq (one bounded read, `read_kept`).

Why the replay still sends the same prompt byte for byte: a stored message is never changed
after it is written. Erasure deletes a message, but it also deletes the journal of every run of
its thread (`bounded_agents.store.erase`), so no run that kept it can be replayed afterwards.
(Erasure also rewrites later `search_history` results that quoted it: those runs' journals go
with the rest.)

A message the history policy built itself rather than kept as read (a custom policy may
rewrite or add one) is not a stored row: it is journaled whole, as before, with its seq. And on
a store that cannot read messages back by seq (only the base `AgentStore` port: no
`messages_after`), every kept message is journaled whole, as before (`whole_keep`).

Journals written before hold `keep` and are replayed from it (`kept_messages`), each message
numbered as it was then (`numbered_keep`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from bounded_agents.core.checkpoints import JsonObject, KeepRef, LoadThreadPayload
from bounded_agents.core.messages import Message, journal_form


class SeqReader(Protocol):
    """What `read_kept` needs of a store: every store has it (`AgentStore.messages_after`)."""

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]: ...


def as_kept(message: Message) -> Message:
    """A kept message as a refold folds it: with its seq, without its run id. Journals before
    `keep_refs` never recorded the run id, so a refold's input (what the summarizer is handed,
    what its step journals) is the same whichever way the message came."""
    return message if message.run_id is None else message.model_copy(update={"run_id": None})


def keep_refs(keep: Sequence[Message], read: Sequence[Message]) -> list[KeepRef]:
    """`load:thread`'s `keep_refs` for the messages `select` kept out of those `read`: the seq
    of each that is a stored row as read (the same object), the message whole otherwise."""
    by_seq = {m.seq: m for m in read if m.seq is not None}
    return [
        m.seq
        if m.seq is not None and by_seq.get(m.seq) is m
        else m.model_dump(mode="json", exclude={"run_id"}, exclude_defaults=True)
        for m in keep
    ]


def whole_keep(keep: Sequence[Message]) -> list[JsonObject]:
    """`load:thread`'s `keep` (the form before `keep_refs`): every kept message whole, without
    seq or run id. Still written on a store that cannot read messages back by seq (one with
    only the base `AgentStore` port: `TurnStore.reads_by_seq`), so its runs resume."""
    return [journal_form(m) for m in keep]


def referenced_seqs(loads: Iterable[LoadThreadPayload]) -> list[int]:
    """The seqs the `keep_refs` of `loads` name, ascending, once each."""
    return sorted({r for load in loads for r in load.get("keep_refs", ()) if isinstance(r, int)})


READ_GAP = 16
"""Seqs further apart than this are read in separate spans (`read_kept`): a policy that pins
the thread's first message beside its newest ones reads those rows, not the thread between."""


def spans(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """(first, last) spans covering ascending `seqs`, a new span past a gap of `READ_GAP`."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and seq - out[-1][1] <= READ_GAP:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out


async def read_kept(
    store: SeqReader, thread_id: str, loads: Iterable[LoadThreadPayload]
) -> dict[int, Message]:
    """The stored messages the `keep_refs` of `loads` name, by seq: one read per span of them
    (`spans`; a window is contiguous but for erased seqs, so it is one read). Seqs with no row
    (erased since) are absent."""
    seqs = referenced_seqs(loads)
    wanted = set(seqs)
    out: dict[int, Message] = {}
    for first, last in spans(seqs):
        rows = await store.messages_after(thread_id, first - 1, last - first + 1)
        out.update((m.seq, m) for m in rows if m.seq is not None and m.seq in wanted)
    return out


def kept_messages(
    load: LoadThreadPayload, stored: Mapping[int, Message], user_seq: int | None
) -> list[Message]:
    """The kept messages, oldest first, with their seqs: from `keep_refs` and the rows `stored`
    holds for them (a seq with no row is left out: see the module docstring), or from a
    journal written before them (`keep`)."""
    if "keep_refs" not in load:
        keep = [Message.model_validate(m) for m in load.get("keep", [])]
        return numbered_keep(keep, load, user_seq)
    out: list[Message] = []
    for ref in load["keep_refs"]:
        if isinstance(ref, int):
            row = stored.get(ref)
            if row is not None:
                out.append(row)
        else:
            out.append(Message.model_validate(ref))
    return out


def numbered_keep(
    keep: list[Message], load: Mapping[str, Any], user_seq: int | None
) -> list[Message]:
    """The kept messages of a journal written before `keep_refs` (journaled without seqs)
    with their seqs: as `load:thread` recorded them when they have a gap (`keep_seqs`: an
    erased message among the kept runs), else contiguous, ending with the user's message. A
    refold takes its boundary from them (found by attack: numbered across a gap, a refold's
    summary claimed a message it never saw, which then left every later prompt). Messages
    that already carry one (an owed fold's, riding before them) keep it."""
    recorded = load.get("keep_seqs")
    if isinstance(recorded, list) and len(recorded) == len(keep):
        seqs: Sequence[int] = recorded
    elif user_seq is not None:
        seqs = range(user_seq - len(keep) + 1, user_seq + 1)
    else:
        return keep
    return [
        m if m.seq is not None else m.model_copy(update={"seq": s})
        for m, s in zip(keep, seqs, strict=True)
    ]


__all__ = [
    "READ_GAP",
    "SeqReader",
    "as_kept",
    "keep_refs",
    "kept_messages",
    "numbered_keep",
    "read_kept",
    "referenced_seqs",
    "spans",
    "whole_keep",
]
