"""`TurnLedger`: one way to hold quota and one way to book a call, over a ledger that reserves
and over one that can only be checked."""

from __future__ import annotations

from bounded_agents.core.ports import LedgerEntry
from bounded_agents.core.turn.ledger import TurnLedger
from bounded_agents.store.ledger import MemoryLedger


class PlainLedger:
    """Only the base `Ledger` port: no reservations, no transactions."""

    def __init__(self) -> None:
        self.inner = MemoryLedger()

    async def record(self, entry: LedgerEntry) -> None:
        await self.inner.record(entry)

    async def tokens_used(self, actor_id: str) -> int:
        return await self.inner.tokens_used(actor_id)

    async def entries_for_run(self, run_id: str) -> list[LedgerEntry]:
        return await self.inner.entries_for_run(run_id)


def _entry(tokens: int) -> LedgerEntry:
    return LedgerEntry(
        run_id="r1",
        thread_id="t1",
        actor_id="alice",
        agent="helper",
        purpose="chat",
        model="m",
        prompt_tokens=tokens,
        completion_tokens=0,
    )


async def test_a_reserving_ledger_holds_the_tokens_and_books_them_as_spent_once() -> None:
    ledger = MemoryLedger()
    turns = TurnLedger(ledger)
    assert await turns.hold("alice", 60, limit=100) == 60
    assert await ledger.tokens_used("alice") == 60, "the hold counts against the quota"
    await turns.book(_entry(40), reserved=60, tx=None)
    assert await ledger.tokens_used("alice") == 40, "the reservation became the spend"


async def test_a_reserving_ledger_refuses_a_hold_once_the_quota_is_reached() -> None:
    turns = TurnLedger(MemoryLedger())
    assert await turns.hold("alice", 100, limit=100) == 100
    assert await turns.hold("alice", 1, limit=100) is None
    await turns.release("alice", 100)
    assert await turns.hold("alice", 1, limit=100) == 1


async def test_a_plain_ledger_is_checked_not_reserved_and_booked_without_a_transaction() -> None:
    ledger = PlainLedger()
    turns = TurnLedger(ledger)
    assert not turns.joins_transactions
    assert await turns.hold("alice", 60, limit=100) == 0, "nothing is held on a plain ledger"
    await turns.release("alice", 0)
    await turns.book(_entry(100), reserved=0, tx=None)
    assert await ledger.tokens_used("alice") == 100
    assert await turns.hold("alice", 1, limit=100) is None
    assert [e.prompt_tokens for e in await ledger.entries_for_run("r1")] == [100]
