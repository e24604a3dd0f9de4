"""The ledger on both databases: one row per call, and a quota read that does not grow."""

from __future__ import annotations

import asyncio

from app.core.ports import LedgerEntry
from app.store import SqlAgentStore
from app.store.ledger import SqlLedger
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
