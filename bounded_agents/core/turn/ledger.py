"""Any `Ledger` lifted to what a turn needs: one way to hold quota and one way to book a call.

A ledger may hold tokens while a call is in flight (`QuotaReserver`), may write its rows in
a unit of work's transaction (`TransactionalLedger`) and may keep the learned token ratios
(`RatioBook`). Which it can is asked once, here, so the
spend phase has one path and the fallbacks live in one place; each method makes exactly the
ledger calls the phase made before (no extra query).
"""

from __future__ import annotations

from collections.abc import Mapping

from bounded_agents.core.ports import (
    Ledger,
    LedgerEntry,
    QuotaReserver,
    RatioBook,
    Transaction,
    TransactionalLedger,
    supports_ledger_transactions,
    supports_ratio_book,
    supports_reservations,
)


class TurnLedger:
    """`ledger` as a turn uses it: `hold`, `release`, `book`, whatever powers it has."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._tx: TransactionalLedger | None = (
            ledger if supports_ledger_transactions(ledger) else None
        )
        self._reserving: QuotaReserver | None = ledger if supports_reservations(ledger) else None
        self._ratios: RatioBook | None = ledger if supports_ratio_book(ledger) else None

    @property
    def joins_transactions(self) -> bool:
        """Whether its rows can join a unit of work's transaction."""
        return self._tx is not None

    async def hold(self, actor_id: str, tokens: int, limit: int) -> int | None:
        """What was held of the actor's quota for a call about to start (0 with a ledger that
        can only be checked), or None when the quota refuses it."""
        if self._reserving is not None:
            return tokens if await self._reserving.reserve(actor_id, tokens, limit) else None
        return 0 if await self.ledger.tokens_used(actor_id) < limit else None

    async def release(self, actor_id: str, reserved: int) -> None:
        """Give back what `hold` held for a call that failed (nothing was held: nothing to do)."""
        if reserved and self._reserving is not None:
            await self._reserving.release(actor_id, reserved)

    async def book(self, entry: LedgerEntry, reserved: int, tx: Transaction | None) -> None:
        """One call's row; what `hold` held for it becomes the spend in the same write (the
        total never counts both), inside `tx` when the ledger joins it."""
        if reserved and self._reserving is not None:
            await self._reserving.record_reserved(entry, reserved, tx=tx)
        elif tx is not None and self._tx is not None:
            await self._tx.record(entry, tx=tx)
        else:
            await self.ledger.record(entry)

    async def saved_ratios(self) -> dict[str, float]:
        """The token ratios an earlier process saved (none without a `RatioBook`)."""
        return await self._ratios.load_ratios() if self._ratios is not None else {}

    async def save_ratios(self, ratios: Mapping[str, float]) -> bool:
        """Keep `ratios` for later processes; False when the ledger cannot."""
        if self._ratios is None:
            return False
        await self._ratios.save_ratios(ratios)
        return True


__all__ = ["TurnLedger"]
