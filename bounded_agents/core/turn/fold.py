"""Folds: the summary folded forward at load and, for a refolding policy, between model calls."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

from bounded_agents.core.checkpoints import (
    PERSIST_SUMMARY,
    PERSIST_USAGE_HISTORY,
    SUMMARIZE,
    fold_step,
)
from bounded_agents.core.fold_backoff import backoff_holds, keep_fold_health
from bounded_agents.core.messages import (
    ChatMessage,
    Message,
)
from bounded_agents.core.policies import (
    fold_budget,
    policy_summarizer,
    supports_refolding,
)
from bounded_agents.core.ports import (
    DurableContext,
    HistoryPolicy,
    HistoryPolicyContext,
    RunRequest,
    Summarizer,
    ThreadSummary,
    Usage,
)
from bounded_agents.core.report import (
    ModelCallReport,
    RunReport,
    SummaryReport,
)
from bounded_agents.core.summary import (
    summary_token_cap,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.constants import (
    _UNBOUNDED_CALLS,
)
from bounded_agents.core.turn.fold_chunk import (
    ChunkPhase,
    _ChunkTask,
)
from bounded_agents.core.turn.prompts import (
    _degraded_history,
    _history_prompt,
)
from bounded_agents.core.turn.public import (
    AgentDefinition,
)
from bounded_agents.core.turn.state import (
    _Window,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class FoldPhase(ChunkPhase):
    async def _rolling_prompt(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        hctx: HistoryPolicyContext,
        report: RunReport,
        recorded: dict[str, Any],
        user_seq: int | None,
    ) -> tuple[list[ChatMessage], _Window | None]:
        """The system prompt, the thread's summary (folded further first when `load:thread`
        says so) and the kept messages. Everything it uses is journaled: a replay builds the
        same prompt byte for byte without reading the store or calling the summarizer again.

        For a policy that re-checks its threshold between model calls (`refolds_mid_run`), it
        also returns that history with its seqs, so `_refold` can fold it again mid-run."""
        policy = definition.policy
        summarizer = policy_summarizer(policy)
        keep = [Message.model_validate(m) for m in recorded["keep"]]
        summary = (
            ThreadSummary.model_validate(recorded["summary"]) if "summary" in recorded else None
        )
        folds = 0
        omitted = 0
        if "fold" in recorded and summarizer is not None:
            summary, folds = await self._fold(
                request, ctx, policy, summarizer, hctx, summary, recorded["fold"], report
            )
            covered = summary.covers_through_seq if summary is not None else 0
            if covered < int(recorded["fold"]["through"]):
                # The fold this turn owed is not (all) made: what the summary does not cover
                # rides, up to the cap, so nothing is lost from the prompt that a fold would
                # have kept; past the cap the oldest are left out, and the model is told.
                unfolded, omitted = _degraded_history(recorded["fold"], covered, keep)
                keep = [*unfolded, *keep]
                assert report.summary is not None
                report.summary.omitted = omitted
        elif summary is not None:
            report.summary = SummaryReport(
                made=False, covers_through_seq=summary.covers_through_seq
            )
        prompt = _history_prompt(definition, summary, keep, omitted)
        window = None
        if supports_refolding(policy) and user_seq is not None and keep:
            first = user_seq - len(keep) + 1  # the kept runs are the newest: contiguous to it
            keep = [m.model_copy(update={"seq": first + i}) for i, m in enumerate(keep)]
            window = _Window(summary=summary, keep=keep, head=len(prompt), folds=folds)
        return prompt, window

    async def _refold(
        self,
        request: RunRequest,
        ctx: DurableContext,
        definition: AgentDefinition,
        hctx: HistoryPolicyContext,
        report: RunReport,
        prompt: list[ChatMessage],
        window: _Window,
    ) -> list[ChatMessage]:
        """HasteKit counts the history before EACH model call: a run whose tool steps pushed it
        to the threshold folds its older kept runs now, not on the next turn. The decision is a
        pure function of journaled data, so a replay makes the same one."""
        policy = definition.policy
        refolding = policy  # narrowed below; `policy` stays the HistoryPolicy
        summarizer = policy_summarizer(policy)
        if summarizer is None or not supports_refolding(refolding):
            return prompt
        tokens = sum(estimate_message_tokens(m) for m in prompt[1:])
        count = refolding.refold_count(window.keep, tokens)
        if count < 1:
            return prompt
        older = window.keep[:count]
        through = older[-1].seq or 0
        fold = {"through": through, "messages": [m.model_dump(mode="json") for m in older]}
        summary, window.folds = await self._fold(
            request, ctx, policy, summarizer, hctx, window.summary, fold, report, window.folds
        )
        covered = summary.covers_through_seq if summary is not None else 0
        if covered < through:
            # Refused, failed or out of calls: the prompt stays as it was (it is the history
            # the run started with, within the policy's read bound); a later turn folds. A
            # chunk it did store is where the next refold starts: none is summarized twice.
            window.summary = summary
            return prompt
        rest = window.keep[len(older) :]
        head = _history_prompt(definition, summary, rest)
        in_run = prompt[window.head :]
        window.summary, window.keep, window.head = summary, rest, len(head)
        return [*head, *in_run]

    async def _fold(
        self,
        request: RunRequest,
        ctx: DurableContext,
        policy: HistoryPolicy,
        summarizer: Summarizer,
        hctx: HistoryPolicyContext,
        summary: ThreadSummary | None,
        fold: dict[str, Any],
        report: RunReport,
        made_before: int = 0,
    ) -> tuple[ThreadSummary | None, int]:
        """Fold the summary forward towards `fold["through"]`, one bounded summarizer chunk per
        step: `history:summarize`, `persist:usage:history` and `persist:summary` each, the later
        chunks' names suffixed `:2`, `:3`... (numbered across the run: `made_before` chunks came
        first). Each chunk's summary is stored as it is made, so a run that dies in a long
        backlog keeps every chunk it finished.

        It stops early, leaving the rest to later turns, when the run has spent its
        `fold_calls_per_turn` summarizer calls (a backlog is folded in bounded work per turn),
        or when a chunk is refused or its call fails (`fold_rejection`): a refused answer is
        never stored, so the boundary and the previous summary stay. The caller then sends what
        the summary does not cover, up to a cap (`_degraded_history`). Returns the summary (None
        if there is still none) and the run's chunk count."""
        task = _first_task(request, hctx, summarizer, policy, summary, fold)
        through, budget = task.through, task.budget
        stats = _fold_stats(report.summary, summary)
        folds = made_before
        if backoff_holds(fold, stats, summary.covers_through_seq if summary else 0):  # issue 36
            report.summary = stats
            return summary, folds
        outcome: str | None = None  # issue 36: the last attempt's refusal reason, if any
        while summary is None or summary.covers_through_seq < through:
            # The budget the run's first fold step journaled, once there is one: a resumed run
            # follows its journal even where this process allows fewer calls.
            call_budget = stats.call_budget or self.fold_calls_per_turn
            calls_left = call_budget - stats.calls
            if calls_left < 1:
                stats.deferred = True
                break
            folds += 1
            task = dataclasses.replace(
                task, summary=summary, budget=budget, calls_left=calls_left, call_budget=call_budget
            )
            made, usage = await self._summarize_step(ctx, report, task, folds)
            if "fitted_tokens" in made:
                # The provider refused a larger chunk: the rest of this run's chunks start at
                # the size it took, instead of being refused (and paid for) again.
                budget = min(budget, int(made["fitted_tokens"]))
            _count_calls(stats, made, folds)
            if usage is not None:
                report.model_calls.append(_summary_call(usage, made))
            if "rejected" in made:
                _note_refusal(stats, request, summary, made, through)
                outcome = str(made["rejected"])  # issue 36
                break
            assert usage is not None  # an accepted fold always records what it cost
            summary = await self._keep_summary(ctx, request, stats, task.known, made, usage, folds)
        stats.pending = max(0, through - (summary.covers_through_seq if summary else 0))
        if folds > made_before:  # issue 36: the thread's fold health and backoff
            tx = functools.partial(self._tx, ctx)
            thread = request.thread_id
            await keep_fold_health(ctx, self.turn_store, thread, tx, fold, stats, outcome, folds)
        report.summary = stats
        return summary, folds

    async def _summarize_step(
        self, ctx: DurableContext, report: RunReport, task: _ChunkTask, fold: int
    ) -> tuple[dict[str, Any], Usage | None]:
        """One chunk's `history:summarize` and its `persist:usage:history`. The summary commits
        with its ledger row, as a model step does; the summary row is written after that,
        idempotently: a process killed in between resumes with the journaled summary, neither
        losing it nor asking for a second one."""
        async with ctx.unit_of_work():
            made = await ctx.step(
                fold_step(SUMMARIZE, fold), functools.partial(self._fold_chunk, task)
            )
            usage = Usage.model_validate(made["usage"]) if "usage" in made else None
            if usage is not None:
                await ctx.step(
                    fold_step(PERSIST_USAGE_HISTORY, fold),
                    functools.partial(
                        self._record_usage,
                        ctx,
                        task.request,
                        report,
                        "history_summary",
                        made["model"],
                        usage,
                        made.get("reserved", 0),
                    ),
                )
        return made, usage

    async def _keep_summary(
        self,
        ctx: DurableContext,
        request: RunRequest,
        stats: SummaryReport,
        known: dict[int | None, Message],
        made: dict[str, Any],
        usage: Usage,
        fold: int,
    ) -> ThreadSummary:
        """The accepted chunk's summary, stored (`persist:summary`) and counted in `stats`."""
        # What the summary now covers is never needed again: a long backlog is held in memory
        # a read page at a time, not whole.
        for seen in [s for s in known if s is not None and s <= made["covers_through_seq"]]:
            del known[seen]
        summary = ThreadSummary(
            text=made["text"],
            covers_through_seq=made["covers_through_seq"],
            model=made["model"],
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            run_id=request.run_id,
        )
        async with ctx.unit_of_work():
            await ctx.step(
                fold_step(PERSIST_SUMMARY, fold),
                functools.partial(self._save_summary, ctx, request.thread_id, summary),
            )
        stats.made = True
        stats.covers_through_seq = summary.covers_through_seq
        stats.input_messages += made["input_messages"]
        stats.input_tokens += made["input_tokens"]
        stats.compressed += int(made.get("compressed", 0))
        stats.messages_cut += int(made.get("messages_cut", 0))
        stats.clipped += 1 if made.get("clipped_chars") else 0
        return summary


def _first_task(
    request: RunRequest,
    hctx: HistoryPolicyContext,
    summarizer: Summarizer,
    policy: HistoryPolicy,
    summary: ThreadSummary | None,
    fold: dict[str, Any],
) -> _ChunkTask:
    """What the fold's first step is handed; each later step replaces what moved since (the
    summary, a budget the provider made smaller, the calls left)."""
    budget = fold_budget(policy)
    return _ChunkTask(
        request=request,
        hctx=hctx,
        summarizer=summarizer,
        summary=summary,
        through=int(fold["through"]),
        known={m.seq: m for m in (Message.model_validate(x) for x in fold["messages"])},
        budget=budget,
        cap=summary_token_cap(budget),  # the policy's; a chunk may be made smaller, not this
        calls_left=0,
        call_budget=0,
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
        stats.call_budget = stats.call_budget or _UNBOUNDED_CALLS
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
