"""Folds: the summary folded forward at load and, for a refolding policy, between model calls."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from bounded_agents.core.checkpoints import (
    PERSIST_SUMMARY,
    PERSIST_USAGE_HISTORY,
    SUMMARIZE,
    fold_step,
    kept_count,
    parse_load_thread,
)
from bounded_agents.core.fold_backoff import backoff_holds, keep_fold_health
from bounded_agents.core.fold_health import owed_count
from bounded_agents.core.history.powers import fold_budget, policy_summarizer, supports_refolding
from bounded_agents.core.messages import ChatMessage, Message
from bounded_agents.core.ports import (
    JsonValue,
    RunRequest,
    Summarizer,
    ThreadSummary,
    Transaction,
    Usage,
)
from bounded_agents.core.report import ModelCallReport, SummaryReport
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.summary import summary_token_cap
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.constants import UNBOUNDED_CALLS
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.fold_chunk import ChunkTask, fold_chunk
from bounded_agents.core.turn.kept import kept_messages, read_kept
from bounded_agents.core.turn.load import save_summary
from bounded_agents.core.turn.prompt import opening_prompt, refolded_prompt
from bounded_agents.core.turn.spend import count_before_learning, record_usage
from bounded_agents.core.turn.state import Turn

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


async def rolling_prompt(
    deps: TurnDeps, turn: Turn, recorded: dict[str, Any], *, user_seq: int | None
) -> list[ChatMessage]:
    """The system prompt, the thread's summary (folded further first when `load:thread` says
    so) and the kept messages. Everything it uses is journaled or a stored row the journal
    names: a replay builds the same prompt byte for byte without the bounded read, `select`
    or the summarizer.

    For a policy that re-checks its threshold between model calls (`refolds_mid_run`), it also
    sets the turn's `window`: that history with its seqs, so `refold` can fold it again.

    The kept messages are the ones this attempt read (`turn.kept`); a replay reads the same
    rows again by the seqs `load:thread` journaled, its one read (`core/turn/kept.py`)."""
    summarizer = turn.definition.summarizer
    summary = ThreadSummary.model_validate(recorded["summary"]) if "summary" in recorded else None
    folds = 0
    if "fold" in recorded and summarizer is not None:
        summary, folds = await fold(deps, turn, summarizer, summary, recorded["fold"])
    elif summary is not None:
        turn.report.summary = SummaryReport(
            made=False, covers_through_seq=summary.covers_through_seq
        )
    folded = turn.report.summary.input_messages if turn.report.summary is not None else 0
    kept = turn.kept
    if kept is None:  # replayed: the kept rows are read again by seq
        load = parse_load_thread(recorded)
        stored = await read_kept(deps.store, turn.request.thread_id, [load])
        kept = kept_messages(load, stored, user_seq)
        if len(kept) < kept_count(load):  # erased since: its journal should be gone with it
            log.warning(
                "run %s: %d kept messages are gone from the store; the replay leaves them out",
                turn.request.run_id,
                kept_count(load) - len(kept),
            )
    prompt, turn.window, omitted, cleared = opening_prompt(
        turn.definition,
        recorded,
        summary,
        kept=kept,
        user_seq=user_seq,
        folds=folds,
        folded=folded,
    )
    turn.report.cleared_results, turn.report.cleared_tokens = cleared.results, cleared.tokens
    if omitted and turn.report.summary is not None:
        turn.report.summary.omitted = omitted
    return prompt


async def refold(deps: TurnDeps, turn: Turn, prompt: list[ChatMessage]) -> list[ChatMessage]:
    """HasteKit counts the history before EACH model call: a run whose tool steps pushed it to
    the threshold folds its older kept runs now, not on the next turn. The decision is a pure
    function of journaled data, so a replay makes the same one."""
    policy, window = turn.definition.policy, turn.window
    summarizer = policy_summarizer(policy)
    if window is None or summarizer is None or not supports_refolding(policy):
        return prompt
    tokens = sum(estimate_message_tokens(m) for m in prompt[1:])
    count = policy.refold_count(window.keep, tokens)
    if count < 1:
        return prompt
    older = window.keep[:count]
    through = older[-1].seq or 0
    owed = {"through": through, "messages": [m.model_dump(mode="json") for m in older]}
    summary, window.folds = await fold(
        deps, turn, summarizer, window.summary, owed, made_before=window.folds
    )
    if summary is None or summary.covers_through_seq < through:
        # Refused, failed or out of calls: the prompt stays as it was (it is the history the
        # run started with, within the policy's read bound); a later turn folds. A chunk it
        # did store is where the next refold starts: none is summarized twice.
        window.summary = summary
        return prompt
    refolded = refolded_prompt(turn.definition, prompt, window, summary=summary, folded=len(older))
    turn.report.cleared_results = window.cleared.results
    turn.report.cleared_tokens = window.cleared.tokens
    return refolded


async def fold(
    deps: TurnDeps,
    turn: Turn,
    summarizer: Summarizer,
    summary: ThreadSummary | None,
    owed: dict[str, Any],
    *,
    made_before: int = 0,
) -> tuple[ThreadSummary | None, int]:
    """Fold the summary forward towards `owed["through"]`, one bounded summarizer chunk per
    step: `history:summarize`, `persist:usage:history` and `persist:summary` each, the later
    chunks' names suffixed `:2`, `:3`... (numbered across the run: `made_before` chunks came
    first). Each chunk's summary is stored as it is made, so a run that dies in a long backlog
    keeps every chunk it finished.

    It stops early, leaving the rest to later turns, when the run has spent its
    `fold_calls_per_turn` summarizer calls (a backlog is folded in bounded work per turn), or
    when a chunk is refused or its call fails (`fold_rejection`): a refused answer is never
    stored, so the boundary and the previous summary stay. The prompt then carries what the
    summary does not cover, up to a cap (`degraded_history`). Returns the summary (None if
    there is still none) and the run's chunk count."""
    if "messages" in owed:  # a model that can count exactly is asked once, before any chunk
        await count_before_learning(deps, [Message.model_validate(m) for m in owed["messages"]])
    task = _first_task(deps, turn, summarizer, summary, owed)
    through, budget = task.through, task.budget
    stats = _fold_stats(turn.report.summary, summary)
    folded_before = stats.input_messages
    folds = made_before
    if backoff_holds(owed, stats, summary.covers_through_seq if summary else 0):  # issue 36
        turn.report.summary = stats
        return summary, folds
    outcome: str | None = None  # issue 36: the last attempt's refusal reason, if any
    # The last attempt came back cut at the summarizer's output cap: the summary so far is
    # more than it can restate, so this one first compresses it (`ChunkTask.compress_first`).
    compress_first = stats.health is not None and stats.health.outcome == "truncated"
    while summary is None or summary.covers_through_seq < through:
        # The budget the run's first fold step journaled, once there is one: a resumed run
        # follows its journal even where this process allows fewer calls.
        call_budget = stats.call_budget or deps.limits.fold_calls_per_turn
        calls_left = call_budget - stats.calls
        if calls_left < 1:
            stats.deferred = True
            break
        folds += 1
        task = dataclasses.replace(
            task,
            summary=summary,
            budget=budget,
            calls_left=calls_left,
            call_budget=call_budget,
            compress_first=compress_first,
        )
        compress_first = False  # a summary this run made was restated within the cap
        made, usage = await _summarize_step(deps, turn, task, folds)
        if "fitted_tokens" in made:
            # The provider refused a larger chunk: the rest of this run's chunks start at the
            # size it took, instead of being refused (and paid for) again.
            budget = min(budget, int(made["fitted_tokens"]))
        _count_calls(stats, made, folds)
        if usage is not None:
            turn.report.model_calls.append(_summary_call(usage, made))
        if "rejected" in made:
            _note_refusal(stats, turn.request, summary, made, through=through)
            outcome = str(made["rejected"])  # issue 36
            break
        assert usage is not None  # an accepted fold always records what it cost
        summary = await _keep_summary(deps, turn, task.known, made, (usage, folds))
        _count_kept(stats, summary, made)
    covered = summary.covers_through_seq if summary else 0
    if folds > made_before or not made_before:
        # A mid-run refold that made no attempt (out of calls) leaves what the turn's fold
        # counted: its own fold carries no count of the messages before the window, so it
        # would count their seqs, erased ones too (found in review: 74 owed for 34).
        stats.pending = owed_count(owed, covered, folded=stats.input_messages - folded_before)
    if folds > made_before:  # issue 36: the thread's fold health and backoff
        thread, shares = turn.request.thread_id, deps.shares_transactions
        await keep_fold_health(
            turn.ctx, deps.store, thread, owed, stats, outcome, folds, writes=shares
        )
    turn.report.summary = stats
    return summary, folds


async def _summarize_step(
    deps: TurnDeps, turn: Turn, task: ChunkTask, fold: int
) -> tuple[dict[str, Any], Usage | None]:
    """One chunk's `history:summarize` and its `persist:usage:history`. The summary commits
    with its ledger row, as a model step does; the summary row is written after that,
    idempotently: a process killed in between resumes with the journaled summary, neither
    losing it nor asking for a second one."""
    ctx = turn.ctx

    async def summarize(tx: Transaction | None) -> JsonValue:
        return await fold_chunk(deps, task)

    async with ctx.unit_of_work():
        made = await ctx.step(fold_step(SUMMARIZE, fold), summarize)
        usage = Usage.model_validate(made["usage"]) if "usage" in made else None
        if usage is not None:
            booked = ("history_summary", made["model"], usage)

            async def book(tx: Transaction | None) -> JsonValue:
                reserved = made.get("reserved", 0)
                return await record_usage(
                    deps, turn.request, turn.report, booked, reserved=reserved, tx=tx
                )

            await ctx.step(
                fold_step(PERSIST_USAGE_HISTORY, fold), book, writes=deps.shares_transactions
            )
    return made, usage


async def _keep_summary(
    deps: TurnDeps,
    turn: Turn,
    known: dict[int | None, Message],
    made: dict[str, Any],
    cost: tuple[Usage, int],
) -> ThreadSummary:
    """The accepted chunk's summary, stored (`persist:summary`); `cost`: its usage and the
    chunk's number in the run."""
    usage, fold = cost
    # What the summary now covers is never needed again: a long backlog is held in memory a
    # read page at a time, not whole.
    for seen in [s for s in known if s is not None and s <= made["covers_through_seq"]]:
        del known[seen]
    summary = ThreadSummary(
        text=made["text"],
        covers_through_seq=made["covers_through_seq"],
        model=made["model"],
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        run_id=turn.request.run_id,
    )

    archived = made.get("archived")

    async def save(tx: Transaction | None) -> JsonValue:
        if archived is not None:  # the summary's oldest part, kept where search finds it
            span = (int(archived["from_seq"]), int(archived["to_seq"]))
            await deps.store.archive_summary_part(
                turn.request.thread_id, span, str(archived["content"]), tx=tx
            )
        return await save_summary(deps, turn.request.thread_id, summary, tx=tx)

    async with turn.ctx.unit_of_work():
        await turn.ctx.step(fold_step(PERSIST_SUMMARY, fold), save, writes=deps.shares_transactions)
    return summary


def _count_kept(stats: SummaryReport, summary: ThreadSummary, made: dict[str, Any]) -> None:
    """An accepted chunk, counted in the run's fold figures."""
    stats.made = True
    stats.covers_through_seq = summary.covers_through_seq
    stats.input_messages += made["input_messages"]
    stats.input_tokens += made["input_tokens"]
    stats.compressed += int(made.get("compressed", 0))
    stats.messages_cut += int(made.get("messages_cut", 0))
    stats.clipped += 1 if made.get("clipped_chars") else 0
    stats.archived += 1 if made.get("archived_chars") else 0


def _first_task(
    deps: TurnDeps,
    turn: Turn,
    summarizer: Summarizer,
    summary: ThreadSummary | None,
    owed: dict[str, Any],
) -> ChunkTask:
    """What the fold's first step is handed; each later step replaces what moved since (the
    summary, a budget the provider made smaller, the calls left). The policy's budget is in
    the model's tokens: the chunk is sized by the estimate, so it gets the estimated tokens
    that fit them, by the ratio learned from the model's reported usage (1.0 until then)."""
    policy_budget = fold_budget(turn.definition.policy)
    budget = deps.learned.tokens.budget(policy_budget, deps.model_name)
    return ChunkTask(
        request=turn.request,
        hctx=turn.hctx,
        summarizer=summarizer,
        summary=summary,
        through=int(owed["through"]),
        known={m.seq: m for m in (Message.model_validate(x) for x in owed["messages"])},
        budget=budget,
        cap=summary_token_cap(policy_budget),  # the policy's; a chunk may be smaller, not this
        calls_left=0,
        call_budget=0,
        searchable=SEARCH_TOOL_NAME in turn.definition.tools,
    )


def _fold_stats(prior: SummaryReport | None, summary: ThreadSummary | None) -> SummaryReport:
    """The run's fold figures so far, copied: a refold adds to those of the load's fold."""
    stats = (
        prior.model_copy(deep=True)
        if prior is not None
        else SummaryReport(
            made=False,
            covers_through_seq=summary.covers_through_seq if summary is not None else 0,
        )
    )
    if not stats.made:
        stats.previous_covers_through_seq = (
            summary.covers_through_seq if summary is not None else None
        )
    return stats


def _count_calls(stats: SummaryReport, made: dict[str, Any], folds: int) -> None:
    if "calls" not in made:
        # Journaled before calls were counted, so before there was a budget: the run's replay
        # follows its journal, however many chunks it holds.
        stats.call_budget = stats.call_budget or UNBOUNDED_CALLS
    stats.call_budget = stats.call_budget or int(made.get("budget", 0)) or None
    stats.calls += int(made.get("calls", 1))
    stats.folds = folds


def _summary_call(usage: Usage, made: dict[str, Any]) -> ModelCallReport:
    return ModelCallReport(
        purpose="history_summary",
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        messages_sent=made["input_messages"],
        messages_original=made["input_messages"],
    )


def _note_refusal(
    stats: SummaryReport,
    request: RunRequest,
    summary: ThreadSummary | None,
    made: dict[str, Any],
    *,
    through: int,
) -> None:
    stats.rejected += 1
    stats.rejected_reasons.append(str(made["rejected"]))
    log.warning(
        "run %s: fold of messages %d-%d refused (%s); the summary stays at %d",
        request.run_id,
        (summary.covers_through_seq if summary is not None else 0) + 1,
        made.get("last_seq", through),
        made["rejected"],
        summary.covers_through_seq if summary is not None else 0,
    )


__all__ = ["fold", "refold", "rolling_prompt"]
