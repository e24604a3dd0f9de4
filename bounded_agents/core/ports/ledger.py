"""The token ledger's port: every model call's tokens are booked, so no spend goes unaccounted."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from bounded_agents.core.ports._frozen import _Frozen

MODEL_NAME_CHARS = 200
"""The longest model name a ledger row or a summary row keeps. The name comes from the
provider's response, so the loop cuts it to this rather than fail a turn over it."""


IDEMPOTENCY_KEY_CHARS = 255
"""The longest Idempotency-Key a run keeps (Stripe's bound too); a longer one is refused."""


class LedgerEntry(_Frozen):
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
class Ledger(Protocol):
    """Where every model call's tokens are written, so no spend goes unaccounted."""

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
]
