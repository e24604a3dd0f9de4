"""PostgreSQL's waiting writes (`direct.write_later`) and savepoints (found by a review of
ab46b14): a write waits only within its savepoint."""

from __future__ import annotations

import pytest

from bounded_agents.durable.journal import INSERT_STEP
from bounded_agents.store import SqlAgentStore, direct
from tests.factories import open_unit
from tests.store.test_merged_writes import (
    _AT,
    _steps,
    _stored_steps,
    _thread_with_run,
    _touch_later,
    _updated_at,
    pg_store,
)

__all__ = ["pg_store"]


async def test_a_waiting_write_made_before_a_savepoint_survives_the_savepoints_rollback(
    pg_store: SqlAgentStore,
) -> None:
    """Holds: the SAVEPOINT is a SQLAlchemy statement, so the write waiting before it is sent
    first (inside the outer transaction, not the savepoint); rolling the savepoint back keeps
    it, and the unit commits it with its rows."""
    tid = await _thread_with_run(pg_store)
    checked: list[int] = []
    tx = await open_unit(pg_store, tid)
    await _touch_later(tx, tid, checked)
    with pytest.raises(ValueError, match="inner"):
        async with tx.connection.begin_nested():
            raise ValueError("inner")
    await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "journal", last=True)
    await tx.close(commit=True)
    assert checked == [1]
    assert await _updated_at(pg_store, tid) == _AT
    assert await _stored_steps(pg_store) == [(0, "s0")]


async def test_a_savepoints_rollback_drops_its_waiting_write_and_its_rows_stay_undone(
    pg_store: SqlAgentStore,
) -> None:
    """Found by review (failed on ab46b14): a ROLLBACK TO SAVEPOINT is a SQLAlchemy statement,
    so the write waiting inside the savepoint was sent just before it; its refused check's
    `StoreError` replaced the block's own error and the ROLLBACK TO SAVEPOINT was never sent,
    while SQLAlchemy marked the savepoint ended: the savepoint's rows (step 5) committed with
    the unit. (No project path opens a savepoint; a caller sharing the unit's transaction
    may.) Now the savepoint's rollback drops its waiting writes unsent, as a rollback does: its
    check never runs, the caller's own error comes through, step 5 is not stored."""
    tid = await _thread_with_run(pg_store)
    checked: list[int] = []
    tx = await open_unit(pg_store, tid)
    try:
        with pytest.raises(ValueError, match="inner"):
            async with tx.connection.begin_nested():
                await tx.connection.execute(INSERT_STEP, _steps(tid, 5))
                await _touch_later(tx, "no-such-thread", checked)
                raise ValueError("inner")
        assert checked == [], "dropped unsent at the savepoint's rollback"
    except BaseException:
        await tx.close(commit=False)  # not left open to block the next test's fixture
        raise
    await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "journal", last=True)
    await tx.close(commit=True)
    assert await _stored_steps(pg_store) == [(0, "s0")], "step 5 was rolled back"
