"""The loop's side of the fold backoff (issue 36): skip a fold the thread's backoff holds, and
keep the thread's fold health after one that changed it.

Kept out of `core/turn/*` so the turn pipeline only calls it (two calls in `FoldPhase._fold`).
Every decision reads journaled data (the fold `load:thread` recorded, with the thread's
`FoldHealth` in it), and the write is its own journaled step (`persist:fold_health[:n]`): a
replay decides as the run did and does not write again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from bounded_agents.core.checkpoints import PERSIST_FOLD_HEALTH, fold_step
from bounded_agents.core.fold_health import (
    backoff_after,
    fold_clock,
    journaled_health,
    may_fold,
    owed_count,
    same_health,
    turns_left,
)
from bounded_agents.core.ports import DurableContext, FoldHealth, JsonValue, Transaction
from bounded_agents.core.report import SummaryReport


class FoldHealthWriter(Protocol):
    """Where the health is written: the turn store's `save_fold_health` (any object with it)."""

    async def save_fold_health(
        self, thread_id: str, health: FoldHealth | None, *, tx: Transaction | None = None
    ) -> None: ...


def _health(fold: Mapping[str, Any], stats: SummaryReport) -> FoldHealth | None:
    """The health the fold journaled (`load:thread`), else what this run last knew (a mid-run
    refold's fold journals none)."""
    return journaled_health(fold) if "health" in fold else stats.health


def backoff_holds(fold: Mapping[str, Any], stats: SummaryReport, covered: int) -> bool:
    """True when this fold must not be attempted: the thread's backoff after failed folds has
    turns left. Fills `stats` (outcome `backoff`, turns left, what stays owed) when it holds.

    Decided once per turn, on the fold `load:thread` journaled: a mid-run refold (whose fold
    journals no health) is held only when the turn's fold was, and may otherwise retry a
    blip within the turn's `fold_calls_per_turn`, as before the backoff."""
    if "health" not in fold and stats.health is not None:
        if stats.outcome != "backoff":
            return False
        stats.pending = owed_count(fold, covered)
        return True
    health = _health(fold, stats)
    clock = fold_clock(fold)
    stats.health = health
    if may_fold(health, clock):
        return False
    stats.outcome = "backoff"
    stats.failures = health.failures if health is not None else 0
    stats.backoff_turns = turns_left(health, clock)
    stats.pending = owed_count(fold, covered)
    return True


async def keep_fold_health(
    ctx: DurableContext,
    writer: FoldHealthWriter,
    thread_id: str,
    fold: Mapping[str, Any],
    stats: SummaryReport,
    outcome: str | None,
    fold_no: int,
    *,
    writes: bool,
) -> None:
    """After a fold attempt (`outcome`: None for a stored summary, else the refusal reason):
    the report's health figures, and the thread's `FoldHealth` stored when it changed, as
    step `persist:fold_health[:fold_no]` (named after the run's last fold chunk, so unique).
    `writes`: the step is handed the unit's transaction (`TurnDeps.shares_transactions`)."""
    before = _health(fold, stats)
    clock = fold_clock(fold)
    after = backoff_after(outcome, before, clock, stats.pending)
    stats.health = after
    stats.outcome = "ok" if outcome is None else outcome
    stats.failures = after.failures if after is not None else 0
    stats.backoff_turns = turns_left(after, clock)
    if same_health(before, after):
        return

    async def save(tx: Transaction | None) -> JsonValue:
        await writer.save_fold_health(thread_id, after, tx=tx)
        return {"failures": after.failures if after is not None else 0}

    async with ctx.unit_of_work():
        await ctx.step(fold_step(PERSIST_FOLD_HEALTH, fold_no), save, writes=writes)


__all__ = ["FoldHealthWriter", "backoff_holds", "keep_fold_health"]
