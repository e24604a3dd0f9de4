"""Spend and quota: reservations before a call, ledger rows after it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bounded_agents.core.calibration import MIN_SAMPLE_TOKENS
from bounded_agents.core.checkpoints import usage_recorded_payload
from bounded_agents.core.messages import Message, to_chat_messages
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    JsonValue,
    LedgerEntry,
    ModelRequest,
    RunRequest,
    Transaction,
    Usage,
    supports_token_counting,
)
from bounded_agents.core.report import LedgerRow, RunReport
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.core.turn.calls import legacy_summarize
from bounded_agents.core.turn.constants import COMPLETION_RESERVE
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.errors import ProviderError, QuotaExceeded

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


async def keep_learned_ratios(deps: TurnDeps) -> None:
    """After a turn: save the token ratios it moved (`CalibratedCounter.unsaved`), in a write
    of their own, so the next process starts from them. Most turns move none and write
    nothing. A failed save is logged, never the turn's failure (it is retried after the
    next turn)."""
    counter = deps.learned.tokens
    moved = counter.unsaved()
    if not moved:
        return
    try:
        saved = await deps.ledger.save_ratios(moved)
    except Exception:
        log.warning("saving the learned token ratios %s failed", moved, exc_info=True)
        return
    if saved:
        counter.mark_saved(moved)


COUNT_SAMPLE_TOKENS = 4000
"""At most this many estimated tokens of a fold's messages are sent to be counted exactly."""


async def count_before_learning(deps: TurnDeps, messages: Sequence[Message]) -> None:
    """Before a fold, where the model has reported no usage yet (a new process without saved
    ratios, a new model) and can count exactly (`TokenCountingProvider`: Anthropic's free
    count endpoint), its ratio is learned from an exact count of the fold's first messages:
    the first chunk is then sized in the model's tokens, not refused and halved. Asked once
    per model and process, whatever it answers; a failed count is logged and changes nothing."""
    name, counter = deps.model_name, deps.learned.tokens
    if name in deps.learned.counted or counter.learned(name) is not None:
        return
    if not supports_token_counting(deps.model):
        return
    deps.learned.counted.add(name)
    sample: list[Message] = []
    estimated = 0
    for message in messages:
        cost = estimate_message_tokens(message)
        if sample and estimated + cost > COUNT_SAMPLE_TOKENS:
            break
        sample.append(message)
        estimated += cost
    if estimated < MIN_SAMPLE_TOKENS:
        return
    request = ModelRequest(messages=to_chat_messages(sample), purpose="count")
    try:
        exact = await deps.model.count_tokens(request)
    except ProviderError as exc:
        log.warning("counting a fold's tokens with %s failed: %s", name, exc)
        return
    counter.observe(name, sum(estimate_message_tokens(m) for m in request.messages), exact)


async def reserve(deps: TurnDeps, actor_id: str, tokens: int) -> int:
    """Hold `tokens` of the actor's quota for a model call about to start, or refuse it with
    `QuotaExceeded`: checked before every model call, so neither concurrent runs nor the later
    calls of one run spend past the quota unchecked. Returns what was held (0 without a quota,
    or with a ledger that can only be checked)."""
    quota = deps.limits.token_quota
    if quota is None:
        return 0
    held = await deps.ledger.hold(actor_id, tokens, quota)
    if held is not None:
        return held
    raise QuotaExceeded(actor_id, await deps.raw_ledger.tokens_used(actor_id), quota)


async def release(deps: TurnDeps, actor_id: str, reserved: int) -> None:
    """Give back what `reserve` held for a call that failed; a failure to do so is logged,
    never raised: the call's own failure is what the caller must see."""
    if not reserved:
        return
    try:
        await deps.ledger.release(actor_id, reserved)
    except Exception:
        log.exception("could not give back %d reserved tokens of %s", reserved, actor_id)


async def legacy_summarize_reserved(
    deps: TurnDeps, actor_id: str, summarizer: Any, drop: list[Message], hctx: HistoryPolicyContext
) -> JsonValue:
    """The old path's summary call, its quota held like a chat call's. What was held rides in
    the journaled payload: `persist:usage:history` gives it back even in a later attempt."""
    reserved = await reserve(
        deps, actor_id, sum(estimate_message_tokens(m) for m in drop) + COMPLETION_RESERVE
    )
    try:
        recorded = await legacy_summarize(summarizer, drop, hctx)
    except BaseException:
        await release(deps, actor_id, reserved)
        raise
    return {**recorded, "reserved": reserved} if reserved else recorded


async def record_usage(
    deps: TurnDeps,
    request: RunRequest,
    report: RunReport,
    call: tuple[str, str, Usage],
    *,
    reserved: int = 0,
    tx: Transaction | None = None,
) -> JsonValue:
    """Book one model call, `call` being (purpose, model, usage): in `tx` when given, so the
    row commits with the checkpoint it belongs to (see `DurableContext.step`'s `record`)."""
    purpose, model, usage = call
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
    await deps.ledger.book(entry, reserved, tx)
    report.ledger.append(ledger_row(entry))
    return usage_recorded_payload()


def ledger_row(entry: LedgerEntry) -> LedgerRow:
    """A ledger entry as the run's report lists it."""
    return LedgerRow(
        purpose=entry.purpose,
        model=entry.model,
        prompt_tokens=entry.prompt_tokens,
        completion_tokens=entry.completion_tokens,
        estimated=entry.estimated,
        cached_tokens=entry.cached_tokens,
        cache_write_tokens=entry.cache_write_tokens,
    )


__all__ = ["ledger_row", "legacy_summarize_reserved", "record_usage", "release", "reserve"]
