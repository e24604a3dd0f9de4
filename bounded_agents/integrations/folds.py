"""A framework session's fold: its unsummarized items, older than the kept view, made into the
thread's rolling summary through the project's summarizer path.

The same checks as the loop's folds (`core.summary.fold_rejection`, `core.fold_health
.unrelated_fold`), the same cap (`clip_summary`), and a save that refuses a summary whose
messages were erased while the summarizer ran (`IntactSummarySaver`). `ThreadHistory`
(`integrations.thread`) reads the view and decides when; this module folds. Apart from it so
the session's reads and writes read on their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bounded_agents.core.fold_health import unrelated_fold
from bounded_agents.core.messages import Message, storable_text
from bounded_agents.core.ports import (
    AgentStore,
    HistoryPolicyContext,
    HistorySummary,
    Summarizer,
    SummaryStore,
    ThreadSummary,
    supports_intact_summaries,
    supports_summaries,
)
from bounded_agents.core.summary import (
    chunk_digest,
    clip_summary,
    fold_rejection,
    summary_token_cap,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.integrations.items import NO_LINKS, Links, for_summary, verbatim


@dataclass(frozen=True)
class FoldOutcome:
    summary: ThreadSummary | None
    """The thread's summary after the fold (the old one when nothing was folded; None also
    when `compact_if_due`'s read that would have found it failed)."""
    folded: int = 0
    """Items folded into it by this call."""
    refused: str | None = None
    """Why the summarizer's last answer was refused (`fold_rejection`, or `unrelated`), if it
    was: the summary and its boundary stay as they were, nothing is lost. From
    `compact_if_due` also `failed:<error>` (the summarizer raised), `failed:store` (the
    database failed a read or write of the fold: no backoff) or `backoff` (not attempted: the
    thread waits after a refused or failed fold). `erased`: a message of the chunk was erased
    while the summarizer ran, so its summary was not stored, or (`compact_if_due`) the thread
    is gone or another's since the write (no backoff: the next fold folds what is left)."""


@dataclass(frozen=True)
class FoldTarget:
    """The thread a fold writes to, and whose fold it is (the summarizer's context)."""

    store: AgentStore
    thread_id: str
    agent: str
    actor_id: str
    links: Callable[[Any], Links] | None = None
    """The adapter's reading of an item's ties (`ThreadHistory.links`): where a fold may end
    inside a run."""


def _summaries(target: FoldTarget) -> SummaryStore:
    assert supports_summaries(target.store)  # `ThreadHistory` refused a store without
    return target.store


async def fold_backlog(
    target: FoldTarget,
    summary: ThreadSummary | None,
    stop: int,
    summarizer: Summarizer,
    fold_max_tokens: int,
) -> FoldOutcome:
    """Fold every unsummarized item through seq `stop` (the last one older than the kept
    view) into `summary`, chunk by chunk, each within `fold_max_tokens`: each answer is checked
    (`fold_rejection`, then `unrelated`), held to the summary cap and saved with its boundary
    (idempotent per boundary, so a fold cut short by a crash resumes where it stopped)."""
    boundary = summary.covers_through_seq if summary is not None else 0
    cap = summary_token_cap(fold_max_tokens)
    folded = 0
    while boundary < stop:
        budget = fold_max_tokens - (
            estimate_message_tokens(Message(role="system", content=summary.text))
            if summary is not None
            else 0
        )
        chunk = await _chunk(target, boundary, stop, max(1, budget))
        if not chunk:
            break
        ctx = HistoryPolicyContext(
            thread_id=target.thread_id,
            agent=target.agent,
            actor_id=target.actor_id,
            run_id="compaction",
            summary=summary,
            summary_max_tokens=cap,
        )
        made = await summarizer(chunk, ctx)
        if not isinstance(made, HistorySummary):
            raise TypeError(f"the summarizer returned {type(made).__name__}, not a HistorySummary")
        # As the loop's folds (`fold_chunk`): a NUL or a lone surrogate no store holds is
        # replaced (found by attack: PostgreSQL refused every such summary, SQLite kept it).
        made = made.model_copy(update={"text": storable_text(made.text)})
        refused = fold_rejection(made)
        if refused is None:  # as the loop's folds: a summary that does not stand for them
            refused = unrelated_fold(made.text, chunk, summary.text if summary else None)
        if refused is not None:
            return FoldOutcome(summary=summary, folded=folded, refused=refused)
        usage = made.usage
        summary = ThreadSummary(
            text=clip_summary(made.text, cap),
            covers_through_seq=chunk[-1].seq or boundary,
            model=made.model or "",
            prompt_tokens=usage.prompt_tokens if usage is not None else 0,
            completion_tokens=usage.completion_tokens if usage is not None else 0,
            run_id=None,
        )
        folded_seqs = [m.seq for m in chunk if m.seq is not None]
        digest = chunk_digest([(m.seq or 0, m.role, m.content) for m in chunk])
        if not await _save(target, summary, folded_seqs, base=boundary or None, digest=digest):
            # An erasure landed while the summarizer ran: the summary holds its message.
            # The erasure may have taken earlier summaries too: report what is stored.
            left = await _summaries(target).latest_summary(target.thread_id)
            return FoldOutcome(summary=left, folded=folded, refused="erased")
        folded += len(chunk)
        boundary = summary.covers_through_seq
    return FoldOutcome(summary=summary, folded=folded)


async def _save(
    target: FoldTarget,
    summary: ThreadSummary,
    folded: list[int],
    *,
    base: int | None,
    digest: str,
) -> bool:
    """The summary stored, unless a message it was made from, or one the summary it was
    written on (ending at `base`) covers, was erased since it was read, or the rows it was
    made from (`digest`) are no longer there (the thread erased and made again): this fold
    holds no run an erasure would wait for (`IntactSummarySaver`; a store without that
    power saves it as it is)."""
    store = target.store
    if supports_intact_summaries(store):
        return await store.save_summary_if_intact(
            target.thread_id, summary, folded, base, digest=digest
        )
    await _summaries(target).save_summary(target.thread_id, summary)
    return True


async def _chunk(target: FoldTarget, after: int, stop: int, budget: int) -> list[Message]:
    """The next fold's messages: seq in (after, stop], oldest first, read a page at a
    time: whole runs, as many as fit `budget` estimated tokens. A fold never ends inside
    a run (the view after its boundary would start on a tool output whose call it
    folded): a run that crosses the budget is left to the next fold.

    A single run larger than the budget is cut where the adapter's `links` allow: no call of
    the chunk left open (parallel calls included) and no reasoning item parted from the call
    after it; at the last such place within the budget, else the first past it. With no such
    place, or no `links`, it is folded whole. Found by attack: a thread where no item starts a
    run is one run, and its first fold handed the summarizer every item in one call."""
    summaries = _summaries(target)
    out: list[Message] = []
    clean: list[int] = []  # indices in `out` where the chunk may end (past the first)
    open_calls: set[str] = set()
    leads = False
    spent = 0
    over = False
    while after < stop:
        page = await summaries.messages_after(target.thread_id, after, min(100, stop - after))
        if not page:
            break
        for m in page:
            # May the chunk end before `m`? Only with the adapter's word, nothing left open.
            begins = target.links is not None and m.role != "user" and not open_calls and not leads
            if (m.seq or 0) > stop or (over and (m.role == "user" or begins)):
                return out
            plain = for_summary(m)
            cost = estimate_message_tokens(plain)
            if out and not over and spent + cost > budget:
                if m.role == "user":
                    return out  # the budget ran out at a run's end
                starts = [i for i, x in enumerate(out) if i > 0 and x.role == "user"]
                if starts:
                    return out[: starts[-1]]  # the run in progress goes to the next fold
                if begins:
                    return out  # one run larger than the budget, cut where it may be
                if clean:
                    return out[: clean[-1]]
                over = True  # no such place yet: fold on to the next one, or the run's end
            if begins and out:
                clean.append(len(out))
            out.append(plain)
            spent += cost
            tie = _links(target, m)
            open_calls -= tie.closes
            open_calls |= tie.opens
            leads = tie.leads
        after = page[-1].seq or stop
    return out


def _links(target: FoldTarget, message: Message) -> Links:
    """The adapter's reading of `message`'s item (nothing, for a row no adapter wrote)."""
    if target.links is None:
        return NO_LINKS
    item = verbatim(message)
    return NO_LINKS if item is None else target.links(item)


__all__ = ["FoldOutcome", "FoldTarget", "fold_backlog"]
