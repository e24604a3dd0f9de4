"""The token ledger's port: every model call's tokens are booked, so no spend goes unaccounted."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from bounded_agents.core.ports.durable import Transaction
from bounded_agents.core.ports.frozen import Frozen

MODEL_NAME_CHARS = 200
"""The longest model name a ledger row or a summary row keeps. The name comes from the
provider's response, so the loop cuts it to this rather than fail a turn over it."""


IDEMPOTENCY_KEY_CHARS = 255
"""The longest Idempotency-Key a run keeps (Stripe's bound too); a longer one is refused."""


class LedgerEntry(Frozen):
    run_id: str
    thread_id: str
    actor_id: str
    agent: str
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    estimated: bool = False
    """The figures are the token estimate, not the provider's count (see `Usage.estimated`)."""
    cached_tokens: int = 0
    """Of `prompt_tokens`, those the provider served from its prompt cache (0 when it did not
    say): booked apart so cost figures can price them differently."""
    cache_write_tokens: int = 0
    """Of `prompt_tokens`, those the provider wrote to its prompt cache (0 when it did not
    say): Anthropic bills them at 1.25x or 2x the input price, so a cost figure needs them."""


@runtime_checkable
class QuotaReserver(Protocol):
    """Every ledger: it holds tokens for a model call while it is in flight, so a quota
    holds under concurrency. The actor's total counts spent AND reserved tokens; a call may
    start only while that total is below the quota, checked and bumped in one atomic step."""

    async def reserve(self, actor_id: str, tokens: int, limit: int) -> bool:
        """Add `tokens` to the actor's total if it is below `limit`, atomically; False (and
        nothing added) when it is not."""
        ...

    async def release(self, actor_id: str, tokens: int) -> None:
        """Give back a reservation whose call failed (it spent nothing the ledger knows of)."""
        ...

    async def record_reserved(
        self, entry: LedgerEntry, reserved: int, *, tx: Transaction | None = None
    ) -> None:
        """`record(entry)` and give back the call's reservation, in one transaction: the
        total goes from reserved to spent without a moment in which it counts neither."""
        ...


@runtime_checkable
class Ledger(QuotaReserver, Protocol):
    """Where every model call's tokens are written, so no spend goes unaccounted, and the
    reservations that hold a quota under concurrency (`QuotaReserver`)."""

    async def record(self, entry: LedgerEntry) -> None: ...

    async def tokens_used(self, actor_id: str) -> int:
        """All tokens (prompt + completion) the actor has spent, for quotas."""
        ...

    async def entries_for_run(self, run_id: str) -> list[LedgerEntry]: ...


__all__ = [
    "IDEMPOTENCY_KEY_CHARS",
    "MODEL_NAME_CHARS",
    "Ledger",
    "LedgerEntry",
    "QuotaReserver",
]
