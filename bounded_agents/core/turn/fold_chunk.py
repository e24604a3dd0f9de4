"""One fold step (`history:summarize`): the chunk it folds, and its summary held to the cap."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from bounded_agents.core.fold_health import unrelated_fold
from bounded_agents.core.messages import (
    Message,
    storable_text,
)
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    JsonValue,
    RunRequest,
    Summarizer,
    ThreadSummary,
)
from bounded_agents.core.summary import (
    ARCHIVE_NOTE,
    ARCHIVED_UNSEARCHABLE_NOTE,
    CLIP_NOTE,
    clip_summary,
    fold_rejection,
    split_summary,
    summary_fits,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.fold_calls import FoldCalls, halved_message
from bounded_agents.core.turn.load import fetch_backlog
from bounded_agents.core.turn.prompt import summary_tokens
from bounded_agents.errors import (
    ProviderContextExceeded,
    ProviderError,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


@dataclass(frozen=True)
class ChunkTask:
    """What the fold hands one `history:summarize` step: fixed when the step is named, so a
    replay that skips the step never needs it."""

    request: RunRequest
    hctx: HistoryPolicyContext
    summarizer: Summarizer
    summary: ThreadSummary | None
    through: int
    known: dict[int | None, Message]
    """The fold's messages by seq, filled from the store as the chunk needs them."""
    budget: int
    cap: int
    calls_left: int
    call_budget: int
    searchable: bool = False
    """The agent has the `search_history` tool: an archived part is reachable by it, and the
    summary's note says so."""
    compress_first: bool = False
    """The thread's last fold was refused as `truncated`: the summarizer stopped at its output
    cap restating the summary so far (a tokenizer counting notes at twice the estimate can
    restate 40% of a summary that fits the cap). Resending the same summary would be cut
    again on every fold, so this step first compresses it, then folds the chunk into the
    shorter one."""


@dataclass
class Chunk:
    """The messages one step hands the summarizer, and what the provider's refusals made of
    them: the journal records both (`fitted_tokens`, `messages_cut`)."""

    messages: list[Message]
    next_seq: int
    """The first seq after the chunk: at most `through` when there is more to fold."""
    base: int
    """The summary's own tokens, counted in every call's input."""
    tokens: int
    halved: bool = False
    cut_messages: int = 0
    erased_through: int = 0
    """`through`, when the seqs from the chunk's last message to it were all erased
    (`ErasingStore`): the summary then covers them too."""


async def fold_chunk(deps: TurnDeps, task: ChunkTask) -> JsonValue:
    """One `history:summarize` step: the messages after the summary's boundary, oldest
    first, while the summary so far and they fit `budget` (at least one message), handed to
    the summarizer with that summary, in at most `calls_left` summarizer calls.

    A chunk the provider refuses as too long (`ProviderContextExceeded`: its tokenizer
    counts more than the estimate's four characters) is halved and sent again, never resent
    as it was. A summary longer than its cap is asked to compress itself
    (`fold_task="compress"`), and only clipped (`clip_summary`, reported) when that fails.
    A refused answer or a failed call is journaled as `rejected`, with its cost if it had
    one: a replay takes the same decision, and the turn goes on without it."""
    learned = deps.learned.chunk_cap.get(task.request.agent)
    budget = min(task.budget, learned) if learned is not None else task.budget
    chunk = await gather_chunk(deps, task, budget)
    fold_ctx = task.hctx.model_copy(
        update={"summary": task.summary, "summary_max_tokens": task.cap}
    )
    calls = FoldCalls(deps, task.request, task.summarizer, task.call_budget)
    if not chunk.messages:  # all of it erased: nothing to summarize; a later range passes
        return {**calls.rejected("erased", [], chunk.tokens), "last_seq": task.through}
    restated = 0
    if task.compress_first and task.summary is not None and calls.count + 1 < task.calls_left:
        shorter = await calls.compress(task.summary.text, fold_ctx, task.cap)
        if shorter is not None:  # else the fold goes on with the summary as it was
            restated = 1
            fold_ctx = fold_ctx.model_copy(
                update={"summary": task.summary.model_copy(update={"text": shorter})}
            )
    made = await summarize_chunk(deps, task, chunk, calls, fold_ctx)
    if not isinstance(made, HistorySummary):
        return made
    text = storable_text(made.text)
    refused = fold_rejection(made.model_copy(update={"text": text}))
    if refused is None:  # issue 36: a summary that does not stand for its chunk
        previous = fold_ctx.summary.text if fold_ctx.summary is not None else None
        refused = unrelated_fold(text, chunk.messages, previous)
    if refused is not None:
        return calls.rejected(refused, chunk.messages, chunk.tokens)
    more = chunk.next_seq <= task.through
    if learned is not None and learned < task.budget and not chunk.halved and more:
        grow_chunk_cap(deps, task.request.agent, learned, max(task.budget, learned))
    fitted = await fit_summary(task, calls, fold_ctx, text, archives=deps.store.archives)
    compressed = fitted.compressed + restated
    record = _chunk_record(calls, chunk, fitted.kept, compressed=compressed, cut=fitted.cut)
    if fitted.archived:
        # Written by `persist:summary` with the summary (one transaction, replay-safe). Its
        # range is all the summary now covers, the new chunk included: a summarizer may put
        # the chunk's notes anywhere (appended, merged, or first), and an erasure of any
        # message it holds must find the part (`from_seq <= seq <= to_seq`).
        last = record["covers_through_seq"]
        record["archived"] = {"from_seq": 1, "to_seq": last, "content": fitted.archived}
        record["archived_chars"] = len(fitted.archived)
    return record


async def gather_chunk(deps: TurnDeps, task: ChunkTask, budget: int) -> Chunk:
    """The messages after the summary's boundary, oldest first, while they and the summary
    fit `budget`: at least one, so a message larger than the budget still gets folded."""
    summary = task.summary
    seq = (summary.covers_through_seq if summary is not None else 0) + 1
    base = summary_tokens(summary)
    messages: list[Message] = []
    tokens, erased = base, 0
    while seq <= task.through:
        message = task.known.get(seq)
        if message is None:
            thread_id = task.request.thread_id
            await fetch_backlog(deps, thread_id, task.known, (seq - 1, task.through))
            message = task.known.get(seq)
            if message is None:  # erased: the fold goes on from the next one stored
                later = [s for s in task.known if s is not None and seq < s <= task.through]
                seq = min(later) if later else task.through + 1
                erased = 0 if later else task.through
                continue
        cost = estimate_message_tokens(message)
        if messages and tokens + cost > budget:
            break
        messages.append(message)
        tokens += cost
        seq += 1
    return Chunk(messages, next_seq=seq, base=base, tokens=tokens, erased_through=erased)


async def summarize_chunk(
    deps: TurnDeps,
    task: ChunkTask,
    chunk: Chunk,
    calls: FoldCalls,
    fold_ctx: HistoryPolicyContext,
) -> HistorySummary | dict[str, Any]:
    """The summarizer's answer for `chunk`, or the step's `rejected` record when a call
    failed or the calls ran out: the chunk is halved each time the provider refuses it."""
    agent = task.request.agent
    try:
        while True:
            chunk.tokens = chunk.base + sum(estimate_message_tokens(m) for m in chunk.messages)
            try:
                return await calls.call(chunk.messages, fold_ctx, chunk.tokens, task.cap)
            except ProviderContextExceeded:
                # Remembered past this run (per agent, per process): the next chunk starts
                # at half the size refused, so a model that needs more halvings than one
                # turn's calls still gets its folds through, a turn or two later.
                deps.learned.chunk_cap[agent] = min(
                    deps.learned.chunk_cap.get(agent, chunk.tokens), max(1, chunk.tokens // 2)
                )
                if calls.count >= task.calls_left or not _halve(chunk):
                    return calls.rejected("too_long", chunk.messages, chunk.tokens)
    except (ProviderError, TimeoutError) as exc:
        reason = "timeout" if isinstance(exc, TimeoutError) else exc.code
        return calls.rejected(f"failed:{reason}", chunk.messages, chunk.tokens)


def grow_chunk_cap(deps: TurnDeps, agent: str, learned: int, full: int) -> None:
    """Taken at the learned size with more to fold: try twice that next time (a server
    back from an outage, or with a larger context, is not held to it for good)."""
    grown = 2 * learned
    if grown >= full:
        deps.learned.chunk_cap.pop(agent, None)
    else:
        deps.learned.chunk_cap[agent] = grown


@dataclass(frozen=True)
class Fitted:
    """A summary held to its cap: the text stored, compressions made, characters clipped away
    (lost) and the oldest part archived instead (kept, searchable), at most one of the two."""

    kept: str
    compressed: int = 0
    cut: int = 0
    archived: str = ""


async def fit_summary(
    task: ChunkTask,
    calls: FoldCalls,
    fold_ctx: HistoryPolicyContext,
    text: str,
    *,
    archives: bool = False,
) -> Fitted:
    """A summary over its cap is compressed by one more call if the budget allows; if still
    over, its oldest part is archived (`archives`: the store keeps a `SummaryArchive`) and the
    summary says so, or, on a store without one, clipped (lost, reported)."""
    cap = task.cap
    compressed = 0
    if not summary_fits(text, cap) and calls.count < task.calls_left:
        shorter = await calls.compress(text, fold_ctx, cap)  # None unless shorter
        if shorter is not None:
            text, compressed = shorter, 1
    if archives and not summary_fits(text, cap):
        note = ARCHIVE_NOTE if task.searchable else ARCHIVED_UNSEARCHABLE_NOTE
        kept, archived = split_summary(text, cap, note=note)
        log.info(
            "run %s: the summary is over its cap of %d estimated tokens after compressing: "
            "its oldest %d characters are archived",
            task.request.run_id,
            cap,
            len(archived),
        )
        return Fitted(kept, compressed=compressed, archived=archived)
    kept = clip_summary(text, cap)
    cut = 0
    if not summary_fits(text, cap):
        # Booked as made (the provider billed all of it); only the end is kept, and the
        # summary says so (`CLIP_NOTE`, not counted as kept text).
        cut = max(1, len(text.strip()) - len(kept.removeprefix(CLIP_NOTE).strip()))
        log.warning(
            "run %s: the summary came back at %d characters, over its cap of %d estimated "
            "tokens (compressed: %s); clipped by %d",
            task.request.run_id,
            len(text),
            cap,
            bool(compressed),
            cut,
        )
    return Fitted(kept, compressed=compressed, cut=cut)


def _halve(chunk: Chunk) -> bool:
    """Halve a chunk the provider refused; False when it is one message too short to cut. A
    single message over the summarizer's context is handed halved (its head and its end), so
    the fold gets past it; counted (`messages_cut`)."""
    if len(chunk.messages) < 2:
        halved_one = halved_message(chunk.messages[0])
        if halved_one is None:
            return False
        chunk.messages, chunk.cut_messages = [halved_one], 1
        return True
    chunk.messages = chunk.messages[: len(chunk.messages) // 2]
    chunk.halved, chunk.erased_through = True, 0
    return True


def _chunk_record(
    calls: FoldCalls, chunk: Chunk, kept: str, *, compressed: int, cut: int
) -> dict[str, Any]:
    """What the step journals for a taken chunk; the optional keys only when they happened,
    so the payload of an ordinary fold stays as it always was."""
    recorded: dict[str, Any] = {
        **calls.cost(),
        "text": kept,
        "covers_through_seq": max(chunk.messages[-1].seq or 0, chunk.erased_through),
        "input_messages": len(chunk.messages),
        "input_tokens": chunk.tokens,
    }
    if compressed:
        recorded["compressed"] = compressed
    if chunk.halved:
        recorded["fitted_tokens"] = chunk.tokens
    if chunk.cut_messages:
        recorded["messages_cut"] = chunk.cut_messages
    if cut:
        recorded["clipped_chars"] = cut
    return recorded


__all__ = ["Chunk", "ChunkTask", "fit_summary", "fold_chunk", "gather_chunk", "summarize_chunk"]
