"""The summarizer calls of one fold step: quota held per call, the cost journaled as one."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bounded_agents.core.fold_health import unrelated_fold
from bounded_agents.core.messages import (
    Message,
    storable_text,
)
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    RunRequest,
    Summarizer,
    ThreadSummary,
    Usage,
)
from bounded_agents.core.summary import (
    fold_rejection,
)
from bounded_agents.core.tokens import MESSAGE_ALLOWANCE, estimate_message_tokens
from bounded_agents.core.turn.calls import booked_model, provider_boundary
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.prompt import summary_tokens
from bounded_agents.core.turn.spend import release, reserve
from bounded_agents.errors import (
    ProviderContextExceeded,
    ProviderError,
    QuotaExceeded,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class FoldCalls:
    """The summarizer calls of one `history:summarize` step, and what they cost together.

    Each call holds its quota like a chat call (its input plus the summary's cap) and gives it
    back if it fails; a call that answered is booked whatever becomes of its answer, since the
    provider billed it. The step journals the sum (`cost`) and `persist:usage:history` books it
    as one ledger row."""

    def __init__(
        self, deps: TurnDeps, request: RunRequest, summarizer: Summarizer, budget: int
    ) -> None:
        self.deps = deps
        self.request = request
        self.summarizer = summarizer
        self.budget = budget
        """The run's summarizer call budget, journaled so a resumed run keeps to it."""
        self.count = 0
        self.usage: Usage | None = None
        self.model: str | None = None
        self.reserved = 0

    async def call(
        self, chunk: list[Message], ctx: HistoryPolicyContext, tokens: int, cap: int
    ) -> HistorySummary:
        """One call handed `tokens` estimated tokens, its answer allowed `cap`: both are held
        against the quota, and the input alone is booked when the summarizer reports none."""
        self.count += 1
        reserved = await reserve(self.deps, self.request.actor_id, tokens + cap)
        try:
            # The timeout outside the boundary: a hang is `TimeoutError`, not a provider error.
            async with (
                asyncio.timeout(self.deps.limits.fold_timeout),
                provider_boundary("history summary"),
            ):
                made = await self.summarizer(chunk, ctx)
        except BaseException:
            await release(self.deps, self.request.actor_id, reserved)
            raise
        self.reserved += reserved
        usage = made.usage or Usage(
            estimated=True,
            prompt_tokens=tokens,
            completion_tokens=estimate_message_tokens(Message(role="assistant", content=made.text)),
        )
        self.usage = usage if self.usage is None else _added(self.usage, usage)
        self.model = self.model or booked_model(made.model, self.deps.model)
        return made

    async def compress(self, text: str, ctx: HistoryPolicyContext, cap: int) -> str | None:
        """`text` folded into itself by one more call, or None if that call failed or its
        answer is refused or no shorter. Asked for half the cap, so the next folds have room
        before the summary needs compressing again.

        A summary larger than what this agent's summarizer has refused to compress before
        (`LearnedSizes.compress_cap`) is compressed by its OLDEST part that fits, the rest kept
        verbatim after it: a model with a small context still shortens the summary, oldest
        facts first, instead of refusing it and leaving only the clip."""
        head, tail = _split_for_context(
            text, self.deps.learned.compress_cap.get(self.request.agent)
        )
        over = ThreadSummary(text=head, covers_through_seq=0)
        target = max(MESSAGE_ALLOWANCE + 1, cap // 2)
        task = ctx.model_copy(
            update={"summary": over, "summary_max_tokens": target, "fold_task": "compress"}
        )
        try:
            made = await self.call([], task, summary_tokens(over), target)
        except ProviderContextExceeded:
            tokens = summary_tokens(over)
            self.deps.learned.compress_cap[self.request.agent] = min(
                self.deps.learned.compress_cap.get(self.request.agent, tokens), max(1, tokens // 2)
            )
            log.warning("run %s: the summary is too long to compress at once", self.request.run_id)
            return None
        except (ProviderError, TimeoutError, QuotaExceeded):
            # The quota too: the fold's own call was made and billed, and must be booked
            # (with its reservation) by the step's `persist:usage:history`, not lost with it.
            log.warning("run %s: compressing the summary failed", self.request.run_id)
            return None
        shorter = storable_text(made.text).strip()
        if fold_rejection(made.model_copy(update={"text": shorter})) is not None:
            return None
        if unrelated_fold(shorter, [], head) is not None:  # issue 36: junk for the notes
            return None
        if len(shorter) >= len(head.strip()):
            return None
        return f"{shorter}\n{tail}".strip() if tail else shorter

    def cost(self) -> dict[str, Any]:
        if self.usage is None:
            return {"calls": self.count, "budget": self.budget}
        return {
            "calls": self.count,
            "budget": self.budget,
            "usage": self.usage.model_dump(mode="json"),
            "model": self.model or booked_model(None, self.deps.model),
            "reserved": self.reserved,
        }

    def rejected(self, reason: str, chunk: list[Message], tokens: int) -> dict[str, Any]:
        return {
            **self.cost(),
            "rejected": reason,
            "last_seq": chunk[-1].seq if chunk else None,
            "input_messages": len(chunk),
            "input_tokens": tokens,
        }


_CUT_MARK = "\n[... {n:,} characters left out: too long for the summarizer ...]\n"


def halved_message(message: Message) -> Message | None:
    """`message` with its text and each tool result cut to half (their head and end kept),
    for a summarizer that refused it whole; None when nothing in it is long enough to cut."""

    def half(text: str) -> str:
        if len(text) < 200:
            return text
        keep = len(text) // 4
        return text[:keep] + _CUT_MARK.format(n=len(text) - 2 * keep) + text[-keep:]

    results = [r.model_copy(update={"content": half(r.content)}) for r in message.tool_results]
    shorter = message.model_copy(update={"content": half(message.content), "tool_results": results})
    return None if shorter == message else shorter


def _split_for_context(text: str, limit: int | None) -> tuple[str, str]:
    """(the oldest lines of `text` within `limit` estimated tokens, the rest); the whole text
    and "" when it fits or no limit is known. At least one line goes in the head."""
    if limit is None or summary_tokens(ThreadSummary(text=text, covers_through_seq=0)) <= limit:
        return text, ""
    lines = text.strip().splitlines()
    budget = max(0, (limit - MESSAGE_ALLOWANCE) * 4)
    size, cut = 0, 0
    for cut, line in enumerate(lines, start=1):
        size += len(line) + 1
        if size > budget and cut > 1:
            cut -= 1
            break
    return "\n".join(lines[:cut]), "\n".join(lines[cut:])


def _added(a: Usage, b: Usage) -> Usage:
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        cached_tokens=(a.cached_tokens or 0) + (b.cached_tokens or 0) or None,
        cache_write_tokens=(a.cache_write_tokens or 0) + (b.cache_write_tokens or 0) or None,
        estimated=a.estimated or b.estimated,
    )


__all__ = ["FoldCalls", "halved_message"]
