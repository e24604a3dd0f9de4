"""PostgreSQL's waiting writes (`bounded_agents.store.direct.write_later`, issue 37): a write
nothing waits for (a ledger row, the run's end) waits on the connection for the transaction's
next statement. Before any statement but the unit's last rows it goes first, alone, and its
check runs; with the unit's last rows (`write_many(last=True)`) it goes as ONE statement, the
rows a data-modifying CTE: one round trip less. Never on Citus, where the rows and the write
live on different shards. Counted at the engine's listeners (what the database ran) and at
asyncpg's calls (the round trips)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

from bounded_agents.durable.journal import INSERT_STEP
from bounded_agents.errors import InvalidContent, StoreError
from bounded_agents.store import SqlAgentStore, direct, driver
from bounded_agents.store.engine import on_citus
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import ledger, run_steps, runs
from bounded_agents.store.tx import SqlTransaction
from tests.conftest import emptied_store
from tests.factories import TOUCH_THREAD, ledger_entry, open_unit
from tests.store.test_direct_writes import announced

_AT = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
_RUN = "run-1"


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url) as store:
        if on_citus(store.engine):
            pytest.skip(
                "PostgreSQL's merge: never on Citus (test_merged_writes.py's "
                "test_on_citus_nothing_waits_and_nothing_is_merged checks it)"
            )
        yield store


@contextmanager
def driver_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """asyncpg's statement calls (one round trip each) made while the block runs, by name."""
    calls: list[str] = []
    for name in ("execute", "fetch", "executemany"):
        original = getattr(asyncpg.Connection, name)

        def counting(self: Any, *args: Any, _name: str = name, _f: Any = original) -> Any:
            calls.append(_name)
            return _f(self, *args)

        monkeypatch.setattr(asyncpg.Connection, name, counting)
    yield calls
    monkeypatch.undo()


async def _thread_with_run(store: SqlAgentStore) -> str:
    thread = await store.create_thread(actor_id="alice", agent="helper")
    async with store.engine.begin() as conn:
        await conn.execute(
            runs.insert(),
            {
                "id": _RUN,
                "thread_id": thread.id,
                "actor_id": "alice",
                "agent": "helper",
                "status": "running",
                "request": "{}",
                "owner": "me",
            },
        )
    return thread.id


def _steps(thread_id: str, *positions: int) -> list[dict[str, Any]]:
    return [
        {"thread_id": thread_id, "run_id": _RUN, "position": p, "name": f"s{p}", "payload": "{}"}
        for p in positions
    ]


async def _stored_steps(store: SqlAgentStore) -> list[tuple[int, str]]:
    async with store.engine.connect() as conn:
        found = await conn.execute(
            sa.select(run_steps.c.position, run_steps.c.name).order_by(run_steps.c.position)
        )
        return [(r[0], r[1]) for r in found]


async def _updated_at(store: SqlAgentStore, thread_id: str) -> Any:
    loaded = await store.get_thread(thread_id)
    assert loaded is not None
    return loaded.updated_at


def _one_row(seen: list[int]) -> driver.Check:
    def check(outcome: driver.Outcome) -> StoreError | None:
        seen.append(outcome.rowcount)
        return StoreError("touch: no such thread") if outcome.rowcount != 1 else None

    return check


async def _touch_later(tx: SqlTransaction, tid: str, seen: list[int]) -> None:
    params = {"tid": tid, "at": _AT}
    await direct.write_later(tx.connection, TOUCH_THREAD, params, "touch", check=_one_row(seen))


async def test_on_postgresql_a_waiting_write_and_the_units_last_rows_are_one_statement(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    checked: list[int] = []
    with announced(pg_store) as seen, driver_calls(monkeypatch) as calls:
        await _touch_later(tx, tid, checked)
        assert seen == [] and calls == [], "it waits: nothing sent, nothing announced"
        await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0, 1), "unit", last=True)
    await tx.close(commit=True)
    assert calls == ["execute"], "one round trip for both: no executemany of the rows"
    assert len(seen) == 1 and seen[0][1], "one statement, announced as the database ran it"
    statement = " ".join(seen[0][0].split())
    assert statement.startswith("WITH merged_rows AS (INSERT INTO run_steps")
    assert ") UPDATE threads SET updated_at" in statement
    assert checked == [1], "the waiting write's check ran on the statement's own row count"
    assert await _stored_steps(pg_store) == [(0, "s0"), (1, "s1")]
    assert await _updated_at(pg_store, tid) == _AT


async def test_on_postgresql_a_waiting_with_statement_takes_the_rows_into_its_list(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger's row is itself a `WITH` statement (the usage bump, then the row it numbers):
    the rows join its list."""
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    with announced(pg_store) as seen, driver_calls(monkeypatch) as calls:
        await SqlLedger(pg_store.engine).record(ledger_entry(tid, _RUN), tx=tx)
        await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit", last=True)
    await tx.close(commit=True)
    assert calls == ["fetch"] and len(seen) == 1
    statement = " ".join(seen[0][0].split())
    assert statement.startswith("WITH merged_rows AS (INSERT INTO run_steps")
    assert "), usage_bumped AS (INSERT INTO actor_usage" in statement
    assert await _stored_steps(pg_store) == [(0, "s0")]
    async with pg_store.engine.connect() as conn:
        numbered = await conn.execute(sa.select(ledger.c.id, ledger.c.run_id))
        assert [tuple(r) for r in numbered] == [(1, _RUN)]
    assert await SqlLedger(pg_store.engine).tokens_used("alice") == 15


async def test_on_postgresql_only_the_last_waiting_write_merges_the_earlier_go_first_alone(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    checked: list[int] = []
    with announced(pg_store) as seen, driver_calls(monkeypatch) as calls:
        await SqlLedger(pg_store.engine).record(ledger_entry(tid, _RUN), tx=tx)
        await _touch_later(tx, tid, checked)
        await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit", last=True)
    await tx.close(commit=True)
    assert calls == ["fetch", "execute"]
    statements = [" ".join(sql.split())[:40] for sql, _by_driver in seen]
    assert statements[0].startswith("WITH usage_bumped AS (INSERT INTO actor_"), statements
    assert statements[1].startswith("WITH merged_rows AS (INSERT INTO run_ste"), statements
    assert checked == [1]
    assert await _stored_steps(pg_store) == [(0, "s0")]


async def test_on_postgresql_a_waiting_write_before_rows_that_are_not_last_goes_first_checked(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the unit's last rows (`last=False`), nor a SQLAlchemy execute: the waiting write is
    sent first, alone, and its check runs then; a check that refuses fails that later call."""
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    checked: list[int] = []
    with announced(pg_store) as seen, driver_calls(monkeypatch) as calls:
        await _touch_later(tx, tid, checked)
        await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit")
        assert checked == [1]
        await _touch_later(tx, tid, checked)
        await tx.connection.execute(sa.select(sa.func.count()).select_from(run_steps))
    await tx.close(commit=True)
    assert calls == ["execute", "executemany", "execute"], "the SELECT is SQLAlchemy's own"
    assert [(" ".join(sql.split())[:22], by_driver) for sql, by_driver in seen] == [
        ("UPDATE threads SET upd", True),
        ("INSERT INTO run_steps ", True),
        ("UPDATE threads SET upd", True),
        ("SELECT count(*) AS cou", False),
    ]
    assert checked == [1, 1]

    before = await _updated_at(pg_store, tid)
    tx = await open_unit(pg_store, tid)
    try:
        with pytest.raises(StoreError, match=r"^touch: no such thread$"):
            await _touch_later(tx, "no-such-thread", checked)
            await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 5), "unit")
        assert not tx.connection.invalidated
    finally:
        await tx.close(commit=False)
    with pytest.raises(StoreError, match=r"^touch: no such thread$"):
        tx = await open_unit(pg_store, tid)
        try:
            await _touch_later(tx, "no-such-thread", checked)
            await tx.connection.execute(sa.select(1))  # through SQLAlchemy: sent before it
        finally:
            await tx.close(commit=False)
    assert await _stored_steps(pg_store) == [(0, "s0")]
    assert await _updated_at(pg_store, tid) == before


async def test_on_postgresql_a_refused_check_in_the_merged_statement_leaves_nothing(
    pg_store: SqlAgentStore,
) -> None:
    tid = await _thread_with_run(pg_store)
    checked: list[int] = []
    tx = await open_unit(pg_store, tid)  # its first write: the thread's title
    try:
        with pytest.raises(StoreError, match=r"^touch: no such thread$"):
            await _touch_later(tx, "no-such-thread", checked)
            await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit", last=True)
        assert checked == [0], "checked on the merged statement's outcome"
        assert not tx.connection.invalidated, "a refusal, not a lost call"
    finally:
        await tx.close(commit=False)
    assert await _stored_steps(pg_store) == [], "the rows that rode with it rolled back"
    loaded = await pg_store.get_thread(tid)
    assert loaded is not None and loaded.title is None, "the unit rolled back whole"
    # The connection is clean for the next unit: nothing of that one waits on it.
    tx = await open_unit(pg_store, tid)
    await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit", last=True)
    await tx.close(commit=True)
    assert await _stored_steps(pg_store) == [(0, "s0")]


_ZERO_TOUCH = sa.text(
    "UPDATE threads SET title = 'x' WHERE id = :tid AND 1 / CAST(:zero AS integer) = 1"
)
"""A waiting write the database refuses with an error that names no table (division by zero)."""


async def test_on_postgresql_a_merged_failure_naming_no_table_is_named_by_both_parts(
    pg_store: SqlAgentStore,
) -> None:
    """PostgreSQL names no table for a refused value: nothing tells the waiting write's part
    from the rows' part, so the error names both (it named the unit's rows alone before)."""
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    try:
        await direct.write_later(tx.connection, _ZERO_TOUCH, {"tid": tid, "zero": 0}, "touch")
        with pytest.raises(InvalidContent, match=r"^touch or unit: the database refused"):
            await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit", last=True)
    finally:
        await tx.close(commit=False)
    assert await _stored_steps(pg_store) == []


async def test_on_postgresql_a_merged_statements_failure_is_named_by_the_part_that_failed(
    pg_store: SqlAgentStore,
) -> None:
    """A ledger number already taken: the ledger's operation; a journal row already stored:
    the unit's. Either way the unit rolls back whole."""
    tid = await _thread_with_run(pg_store)
    async with pg_store.engine.begin() as conn:
        await conn.execute(ledger.insert(), {**ledger_entry(tid, _RUN).model_dump(), "id": 1})
        await conn.execute(run_steps.insert(), _steps(tid, 7))
    for entry, position, named in (
        (ledger_entry(tid, _RUN), 0, "ledger_record"),
        (ledger_entry(tid, _RUN).model_copy(update={"actor_id": "bob"}), 7, "unit"),
    ):
        tx = await open_unit(pg_store, tid)
        try:
            with pytest.raises(StoreError, match=rf"^{named}: database error \(\w+\)$"):
                await SqlLedger(pg_store.engine).record(entry, tx=tx)
                rows = _steps(tid, position)
                await direct.write_many(tx.connection, INSERT_STEP, rows, "unit", last=True)
        finally:
            await tx.close(commit=False)
    assert await _stored_steps(pg_store) == [(7, "s7")]
    assert await SqlLedger(pg_store.engine).tokens_used("bob") == 0
    loaded = await pg_store.get_thread(tid)
    assert loaded is not None and loaded.title is None


async def test_on_postgresql_a_waiting_write_is_sent_before_the_commit_and_dropped_by_a_rollback(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = await _thread_with_run(pg_store)
    checked: list[int] = []
    tx = await open_unit(pg_store, tid)
    await _touch_later(tx, tid, checked)
    await tx.close(commit=False)
    assert checked == [], "never sent"
    tx = await open_unit(pg_store, tid)  # the same pooled connection: nothing left on it
    with driver_calls(monkeypatch) as calls:
        await tx.close(commit=True)
    assert calls == ["execute"] and checked == [], "the COMMIT alone (asyncpg's `execute`)"
    assert await _updated_at(pg_store, tid) != _AT

    tx = await open_unit(pg_store, tid)
    await _touch_later(tx, tid, checked)
    await tx.close(commit=True)
    assert checked == [1]
    assert await _updated_at(pg_store, tid) == _AT


async def test_on_postgresql_a_refused_check_at_the_commit_rolls_the_unit_back(
    pg_store: SqlAgentStore,
) -> None:
    """SQLAlchemy takes a transaction whose commit raised as ended and gives its connection back
    unreset: the unit is rolled back before the error leaves, and the connection is clean."""
    tid = await _thread_with_run(pg_store)
    checked: list[int] = []
    tx = await open_unit(pg_store, tid)
    with pytest.raises(StoreError, match=r"^touch: no such thread$"):
        await _touch_later(tx, "no-such-thread", checked)
        await tx.close(commit=True)
    loaded = await pg_store.get_thread(tid)
    assert loaded is not None and loaded.title is None, "the unit's first write rolled back"
    tx = await open_unit(pg_store, tid)
    await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit", last=True)
    await tx.close(commit=True)
    assert await _stored_steps(pg_store) == [(0, "s0")]


async def test_on_postgresql_a_cancelled_merged_statement_invalidates_its_connection(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    try:
        await _touch_later(tx, tid, [])

        async def cancelled(*_args: Any) -> Any:
            raise asyncio.CancelledError

        with monkeypatch.context() as patched:
            patched.setattr(asyncpg.Connection, "execute", cancelled)
            with pytest.raises(asyncio.CancelledError):
                rows = _steps(tid, 0)
                await direct.write_many(tx.connection, INSERT_STEP, rows, "unit", last=True)
        assert tx.connection.invalidated
    finally:
        await tx.close(commit=False)
    assert await _stored_steps(pg_store) == []


@pytest.mark.citus
async def test_on_citus_nothing_waits_and_nothing_is_merged(citus_url: str) -> None:
    """Citus keeps a unit's run rows and an actor's ledger rows on different shards: the ledger
    row (two statements there) and a later write are sent at once, the rows on their own."""
    async with emptied_store(citus_url) as store:
        assert on_citus(store.engine)
        tid = await _thread_with_run(store)
        tx = await open_unit(store, tid)
        checked: list[int] = []
        with announced(store) as seen:
            await SqlLedger(store.engine).record(ledger_entry(tid, _RUN), tx=tx)
            await _touch_later(tx, tid, checked)
            sent_before_the_rows = len(seen)
            assert checked == [1], "checked at once"
            await direct.write_many(tx.connection, INSERT_STEP, _steps(tid, 0), "unit", last=True)
        await tx.close(commit=True)
        statements = [" ".join(sql.split())[:22] for sql, _by_driver in seen]
        assert sent_before_the_rows == 3, statements
        assert statements[-1] == "INSERT INTO run_steps ", statements
        assert not [s for s in statements if s.startswith("WITH")], statements
        assert await _stored_steps(store) == [(0, "s0")]
