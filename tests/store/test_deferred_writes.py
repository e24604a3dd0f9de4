"""Deferred writes (`bounded_agents.store.direct.write_later`, issue 37): a write nothing waits
for (a ledger row, the run's end) rides, on SQLite, in the unit's next call to the worker
thread (or its COMMIT) instead of a hop of its own; on PostgreSQL it waits for the transaction's
next statement (`tests/store/test_merged_writes.py`); on Citus it is sent at once. Either way the
statements, their order and their transaction are the same, a failure is the deferred write's
own, and a rollback leaves nothing of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.errors import StoreError
from bounded_agents.store import SqlAgentStore, direct, driver
from bounded_agents.store.engine import on_citus
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import ledger
from tests.conftest import worker_calls
from tests.factories import TOUCH_THREAD, ledger_entry, open_unit
from tests.store.test_direct_writes import announced

_AT = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)


async def _ledger_ids(store: SqlAgentStore) -> list[int]:
    async with store.engine.connect() as conn:
        return list((await conn.scalars(sa.select(ledger.c.id).order_by(ledger.c.id))).all())


async def _updated_at(store: SqlAgentStore, thread_id: str) -> Any:
    loaded = await store.get_thread(thread_id)
    assert loaded is not None
    return loaded.updated_at


def _sqlite(store: SqlAgentStore) -> bool:
    return store.engine.dialect.name == "sqlite"


async def test_a_ledger_row_rides_in_the_units_next_call_and_keeps_its_place(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    with announced(sql_store) as seen, worker_calls() as calls:
        await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
        sent_by_record = list(calls)
        await direct.write(tx.connection, TOUCH_THREAD, {"tid": thread.id, "at": _AT}, "touch")
    await tx.close(commit=True)
    if _sqlite(sql_store):
        assert sent_by_record == [], "deferred: no hop of its own"
        assert calls == ["_after_deferred"], "the ledger's two statements and the touch: one hop"
    else:
        assert calls == [], "asyncpg has no worker thread"
    if _sqlite(sql_store) or on_citus(sql_store.engine):  # on Citus: sent at once, alone
        statements = [" ".join(s.split())[:30] for s, _driver in seen]
        assert statements[-1].startswith("UPDATE threads"), "announced in its place: before it"
        assert any("actor_usage" in s for s, _ in seen[:-1])
    else:  # PostgreSQL: the ledger's statement, as CTEs in front of the touch, one statement
        assert len(seen) == 1, "one round trip"
        statement = " ".join(seen[0][0].split())
        assert statement.startswith("WITH usage_bumped AS (INSERT INTO actor_usage")
        assert "waited_write AS (INSERT INTO ledger" in statement
        assert ") UPDATE threads" in statement, "the touch is the statement's own"
    assert await _ledger_ids(sql_store) == [1]
    assert await _updated_at(sql_store, thread.id) == _AT


async def test_a_deferred_write_last_in_its_unit_is_sent_with_the_commit(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    with worker_calls() as calls:
        await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
        await tx.close(commit=True)
    if _sqlite(sql_store):
        assert calls == ["_deferred_then_commit"], "the writes and the COMMIT: one hop"
    assert await _ledger_ids(sql_store) == [1]


async def test_a_rollback_drops_a_deferred_write_unsent(sql_store: SqlAgentStore) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    with worker_calls() as calls:
        await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
        await tx.close(commit=False)
    assert "_after_deferred" not in calls
    assert await _ledger_ids(sql_store) == []
    # Nothing of it is left on the pooled connection for the next unit to send.
    tx = await open_unit(sql_store, thread.id)
    with worker_calls() as calls:
        await direct.write(tx.connection, TOUCH_THREAD, {"tid": thread.id, "at": _AT}, "touch")
    await tx.close(commit=True)
    if _sqlite(sql_store):
        assert calls == ["run_statement"]
    assert await _ledger_ids(sql_store) == []


async def test_a_deferred_writes_failure_is_its_own_and_the_unit_rolls_back_whole(
    sql_store: SqlAgentStore,
) -> None:
    """A ledger row whose number is taken breaks the primary key: on SQLite the failure comes
    back from the next call, named by the ledger's operation, not by the touch that sent it."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    before = await _updated_at(sql_store, thread.id)
    async with sql_store.engine.begin() as conn:
        await conn.execute(ledger.insert(), {**ledger_entry(thread.id).model_dump(), "id": 1})
    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(StoreError, match=r"^ledger_record: database error \(\w*Error\)"):
            await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
            await direct.write(tx.connection, TOUCH_THREAD, {"tid": thread.id, "at": _AT}, "touch")
        assert not tx.connection.invalidated, "a database's refusal, not a lost call"
    finally:
        await tx.close(commit=False)
    assert await _ledger_ids(sql_store) == [1]
    assert await _updated_at(sql_store, thread.id) == before, "the touch rolled back with it"


async def test_a_deferred_writes_check_fails_the_call_that_sent_it(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    before = await _updated_at(sql_store, thread.id)

    def one_row(outcome: driver.Outcome) -> StoreError | None:
        return StoreError("touch: no such thread") if outcome.rowcount != 1 else None

    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(StoreError, match=r"^touch: no such thread$"):
            params = {"tid": "no-such-thread", "at": _AT}
            await direct.write_later(tx.connection, TOUCH_THREAD, params, "touch", check=one_row)
            await direct.write(tx.connection, TOUCH_THREAD, {"tid": thread.id, "at": _AT}, "touch")
        assert not tx.connection.invalidated
    finally:
        await tx.close(commit=False)
    assert await _updated_at(sql_store, thread.id) == before


async def test_a_check_that_fails_at_the_commit_leaves_nothing_and_a_clean_connection(
    sql_store: SqlAgentStore,
) -> None:
    """On SQLite a unit whose last write is deferred sends it with the COMMIT: a failed check
    there comes out of the commit (through SQLAlchemy's), nothing of the unit is kept, and the
    pooled connection serves the next unit."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    before = await _updated_at(sql_store, thread.id)

    def refuse(_outcome: driver.Outcome) -> StoreError:
        return StoreError("touch: refused by its check")

    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(StoreError, match=r"^touch: refused by its check$"):
            params = {"tid": thread.id, "at": _AT}
            await direct.write_later(tx.connection, TOUCH_THREAD, params, "touch", check=refuse)
            await tx.close(commit=True)  # SQLite: sent, and refused, with the COMMIT
    finally:
        await tx.close(commit=False)  # closed once either way
    assert await _updated_at(sql_store, thread.id) == before
    tx = await open_unit(sql_store, thread.id)
    await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
    await tx.close(commit=True)
    assert await _ledger_ids(sql_store) == [1]


async def test_a_deferred_write_refused_at_the_commit_leaves_nothing_and_a_clean_connection(
    sql_store: SqlAgentStore,
) -> None:
    """The same with the database refusing the write (a ledger number already taken): the
    error names the deferred write, and its unit's first write is gone with it."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    async with sql_store.engine.begin() as conn:
        await conn.execute(ledger.insert(), {**ledger_entry(thread.id).model_dump(), "id": 1})
    tx = await open_unit(sql_store, thread.id)  # its first write: the thread's title
    try:
        with pytest.raises(StoreError, match=r"ledger_record"):
            await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
            await tx.close(commit=True)
    finally:
        await tx.close(commit=False)
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.title is None, "the unit rolled back whole"
    tx = await open_unit(sql_store, thread.id)
    await direct.write(tx.connection, TOUCH_THREAD, {"tid": thread.id, "at": _AT}, "touch")
    await tx.close(commit=True)
    assert await _ledger_ids(sql_store) == [1]
    assert await _updated_at(sql_store, thread.id) == _AT


async def test_a_ledger_row_in_a_transaction_of_its_own_is_sent_at_once_in_one_call(
    sql_store: SqlAgentStore,
) -> None:
    """Outside a journal's unit nothing would carry a deferred write but the COMMIT: the row is
    sent at once, its bump and insert in one worker-thread call (`write_together`), as before
    deferral existed."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    with worker_calls() as calls:
        await SqlLedger(sql_store.engine).record(ledger_entry(thread.id))
    if _sqlite(sql_store):
        assert calls == ["run_together", "_deferred_then_commit"], calls
    assert await _ledger_ids(sql_store) == [1]
