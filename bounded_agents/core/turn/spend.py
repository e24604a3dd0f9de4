"""Spend and quota: reservations before a call, ledger rows after it."""

from __future__ import annotations

import logging
from typing import Any

from bounded_agents.core.checkpoints import usage_recorded_payload
from bounded_agents.core.messages import (
    Message,
)
from bounded_agents.core.ports import (
    DurableContext,
    HistoryPolicyContext,
    JsonValue,
    LedgerEntry,
    RunRequest,
    Usage,
)
from bounded_agents.core.report import (
    RunReport,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.calls import (
    _summarize,
)
from bounded_agents.core.turn.constants import (
    COMPLETION_RESERVE,
)
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.prompts import (
    _ledger_row,
)
from bounded_agents.errors import (
    LeaseLost,
    QuotaExceeded,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class SpendPhase(TurnDeps):
    async def _reserve(self, actor_id: str, tokens: int) -> int:
        """Hold `tokens` of the actor's quota for a model call about to start, or refuse it
        with `QuotaExceeded`: checked before every model call, so neither concurrent runs nor
        the later calls of one run spend past the quota unchecked. Returns what was held (0
        without a quota, or with a ledger that can only be checked)."""
        quota = self.token_quota
        if quota is None:
            return 0
        held = await self.turn_ledger.hold(actor_id, tokens, quota)
        if held is not None:
            return held
        raise QuotaExceeded(actor_id, await self.ledger.tokens_used(actor_id), quota)

    async def _release(self, actor_id: str, reserved: int) -> None:
        if not reserved:
            return
        try:
            await self.turn_ledger.release(actor_id, reserved)
        except Exception:  # the call's own failure is what the caller must see
            log.exception("could not give back %d reserved tokens of %s", reserved, actor_id)

    async def _summarize_reserved(
        self, actor_id: str, summarizer: Any, drop: list[Message], hctx: HistoryPolicyContext
    ) -> JsonValue:
        """The summary's call, its quota held like a chat call's. What was held rides in the
        journaled payload: `persist:usage:history` gives it back even in a later attempt."""
        reserved = await self._reserve(
            actor_id, sum(estimate_message_tokens(m) for m in drop) + COMPLETION_RESERVE
        )
        try:
            recorded = await _summarize(summarizer, drop, hctx)
        except BaseException:
            await self._release(actor_id, reserved)
            raise
        return {**recorded, "reserved": reserved} if reserved else recorded

    async def _record_usage(
        self,
        ctx: DurableContext | None,
        request: RunRequest,
        report: RunReport,
        purpose: str,
        model: str,
        usage: Usage,
        reserved: int = 0,
    ) -> JsonValue:
        """Book one model call. With `ctx`, in its unit of work, so the row commits with the
        checkpoint it belongs to; if this process lost the run's lease meanwhile, the call was
        still paid for: it is booked on its own before the step fails."""
        entry = LedgerEntry(
            run_id=request.run_id,
            thread_id=request.thread_id,
            actor_id=request.actor_id,
            agent=request.agent,
            purpose=purpose,
            model=model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            estimated=usage.estimated,
            cached_tokens=usage.cached_tokens or 0,
            cache_write_tokens=usage.cache_write_tokens or 0,
        )
        try:
            tx = await self._tx(ctx) if ctx is not None else None
        except LeaseLost:
            await self.turn_ledger.book(entry, reserved, None)
            raise
        await self.turn_ledger.book(entry, reserved, tx)
        report.ledger.append(_ledger_row(entry))
        return usage_recorded_payload()
