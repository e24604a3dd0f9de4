"""Pure helpers of the turn: prompts, fold ranges, what the policy declares, report rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bounded_agents.core.messages import (
    ChatMessage,
    Message,
    payload_bytes,
    to_chat_messages,
)
from bounded_agents.core.policies import (
    summary_renderer,
)
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySelection,
    LedgerEntry,
    ThreadSummary,
    ThreadTurnPage,
)
from bounded_agents.core.report import (
    LedgerRow,
    RunReport,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.public import (
    AgentDefinition,
)


def _history_prompt(
    definition: AgentDefinition,
    summary: ThreadSummary | None,
    keep: Sequence[Message],
    omitted: int = 0,
) -> list[ChatMessage]:
    """The system prompt, the summary (when there is one), the note on what is left out (when
    a fold is overdue and the cap left messages out) and the kept messages."""
    prompt = [ChatMessage(role="system", content=definition.system_prompt)]
    if summary is not None:
        prompt.append(
            ChatMessage(role="system", content=summary_renderer(definition.policy)(summary.text))
        )
    if omitted:
        prompt.append(ChatMessage(role="system", content=omission_note(omitted)))
    prompt.extend(to_chat_messages(keep))
    return prompt


def omission_note(omitted: int) -> str:
    """What the model is told when a fold is overdue (the summarizer failed, refused or ran out
    of calls this turn) and `omitted` older messages are neither summarized nor sent."""
    noun = "message" if omitted == 1 else "messages"
    return (
        f"{omitted:,} earlier {noun} of this thread are not included here and are not in any "
        "summary yet. If the user refers to something you cannot see, say so rather than guess."
    )


DEGRADED_SHARE = 1
"""While a fold is overdue, the unsummarized messages sent besides the kept window may be as
many, and as many estimated tokens, as the kept window itself times this: the prompt holds at
most twice the window, however long the summarizer stays down."""


def _degraded_history(
    fold: Mapping[str, Any], covered: int, keep: Sequence[Message]
) -> tuple[list[Message], int]:
    """(the newest messages the fold owed but did not cover, within the cap; how many it owed
    and leaves out). Only messages the turn read (journaled with the fold) can ride, so a
    replay builds the same prompt; older ones the read skipped are left out and counted."""
    through = int(fold["through"])
    owed = [
        m
        for m in (Message.model_validate(x) for x in fold["messages"])
        if covered < (m.seq or 0) <= through
    ]
    budget_messages = max(1, len(keep)) * DEGRADED_SHARE
    budget_tokens = max(1, sum(estimate_message_tokens(m) for m in keep)) * DEGRADED_SHARE
    taken: list[Message] = []
    tokens = 0
    for message in reversed(owed):
        cost = estimate_message_tokens(message)
        if len(taken) >= budget_messages or tokens + cost > budget_tokens:
            break
        taken.append(message)
        tokens += cost
    taken.reverse()
    return [m.model_copy(update={"seq": None}) for m in taken], through - covered - len(taken)


def _fold_range(page: ThreadTurnPage, selection: HistorySelection) -> tuple[int, int]:
    """(the summary's boundary, the last seq the turn must fold): through the newest message
    `select` dropped, and through every message the read skipped, so none is left both out of
    the prompt and out of the summary. Equal when there is nothing to fold."""
    boundary = page.summary.covers_through_seq if page.summary is not None else 0
    through = max((m.seq or 0 for m in selection.drop), default=boundary)
    if page.skipped:
        through = max(through, boundary + page.skipped)
    return boundary, through


def _page_context(
    hctx: HistoryPolicyContext, page: ThreadTurnPage, idle_seconds: float | None = None
) -> HistoryPolicyContext:
    """What `select` learns from the read: the summary, where its messages start, and how
    long the thread sat idle before this turn (None: not measured, as in a preview)."""
    return hctx.model_copy(
        update={
            "summary": page.summary,
            "skipped": page.skipped,
            "tokens_before": page.tokens_before,
            "reported_tokens": page.reported_tokens,
            "idle_seconds": idle_seconds,
        }
    )


def _ledger_row(entry: LedgerEntry) -> LedgerRow:
    return LedgerRow(
        purpose=entry.purpose,
        model=entry.model,
        prompt_tokens=entry.prompt_tokens,
        completion_tokens=entry.completion_tokens,
        estimated=entry.estimated,
        cached_tokens=entry.cached_tokens,
        cache_write_tokens=entry.cache_write_tokens,
    )


def _count_read(report: RunReport, messages: list[Message]) -> None:
    report.rows_read = len(messages)
    report.bytes_read = sum(payload_bytes(m) for m in messages)


def _summary_tokens(summary: ThreadSummary | None) -> int:
    if summary is None:
        return 0
    return estimate_message_tokens(Message(role="system", content=summary.text))
