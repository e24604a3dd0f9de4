"""The ledger on both databases: one row per call, and a quota read that does not grow."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from bounded_agents.core.ports import LedgerEntry
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import MemoryLedger, SqlLedger
from bounded_agents.store.schema import ledger as ledger_table
from tests.store.test_store import captured_sql


def _entry(actor: str, prompt: int, completion: int, run: str = "r1") -> LedgerEntry:
    return LedgerEntry(
        run_id=run,
        thread_id="t",
        actor_id=actor,
        agent="a",
        purpose="chat",
        model="m",
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


async def test_tokens_used_is_the_running_total_read_by_primary_key(
    sql_store: SqlAgentStore,
) -> None:
    ledger = SqlLedger(sql_store.engine)
    assert await ledger.tokens_used("alice") == 0
    await asyncio.gather(*[ledger.record(_entry("alice", 10, 5, run=f"r{i}")) for i in range(20)])
    await ledger.record(_entry("bob", 1, 1))
    with captured_sql(sql_store) as statements:
        used = await ledger.tokens_used("alice")
    assert used == 20 * 15
    assert await ledger.tokens_used("bob") == 2
    assert len(statements) == 1
    assert "actor_usage" in statements[0] and "sum(" not in statements[0].lower()
    assert len(await ledger.entries_for_run("r3")) == 1


@pytest.mark.parametrize("kind", ["sql", "memory"])
async def test_reservations_check_and_bump_the_total_atomically(
    sql_store: SqlAgentStore, kind: str
) -> None:
    ledger: SqlLedger | MemoryLedger = (
        SqlLedger(sql_store.engine) if kind == "sql" else MemoryLedger()
    )
    # 20 at once against a limit of 50, 30 each: the first goes in, the total is then 30 and
    # the second too (30 < 50), and no other: they queue on the check, none sees a stale total.
    granted = await asyncio.gather(*[ledger.reserve("alice", 30, 50) for _ in range(20)])
    assert sum(granted) == 2
    assert await ledger.tokens_used("alice") == 60
    await ledger.release("alice", 30)
    await ledger.record_reserved(_entry("alice", 10, 5), reserved=30)  # spent 15 of the 30 held
    assert await ledger.tokens_used("alice") == 15
    assert await ledger.reserve("alice", 1000, 50)  # 15 < 50: a large call may still start
    assert not await ledger.reserve("alice", 1, 50)


async def test_rows_recorded_at_once_from_several_engines_are_numbered_one_to_n_per_actor(
    sql_store: SqlAgentStore, db_url: str
) -> None:
    """The usage bump numbers the ledger row it goes out with (one statement on PostgreSQL, one
    worker-thread call on SQLite): racing engines (processes) never share or skip a number."""
    stores = [SqlAgentStore.from_url(db_url) for _ in range(4)]
    try:
        ledgers = [SqlLedger(s.engine) for s in stores]
        await asyncio.gather(
            *[
                ledgers[i % 4].record(_entry(actor, 1, 1, run=f"{actor}-{i}"))
                for i in range(24)
                for actor in ("alice", "bob")
            ]
        )
    finally:
        await asyncio.gather(*[s.dispose() for s in stores])
    async with sql_store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(ledger_table.c.actor_id, ledger_table.c.id).order_by(
                ledger_table.c.actor_id, ledger_table.c.id
            )
        )
        ids = [tuple(r) for r in rows]
    assert ids == [("alice", i) for i in range(1, 25)] + [("bob", i) for i in range(1, 25)]
    assert await SqlLedger(sql_store.engine).tokens_used("alice") == 48
