"""A waiting write nothing checks, in front of the unit's next write (PostgreSQL, issue 37):
`bounded_agents.store.waiting.send_after_waiting`. The answer unit's ledger row used to go
alone before the answer's insert; now its statement's parts are data-modifying CTEs of the
insert, one round trip. What must hold: both writes land, the statement returns the next
write's own rows, a failure is named by the write whose table the database names, a write
with a check (or a CTE name in common) is still sent apart, and the rules that keep the
statements apart read SQL as it is written (`split_with`)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from bounded_agents.core.ports import LedgerEntry
from bounded_agents.durable.journal import INSERT_STEP
from bounded_agents.errors import DuplicateMessage, InvalidContent, StoreError
from bounded_agents.store import SqlAgentStore, direct
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import ledger
from bounded_agents.store.waiting import split_with
from tests.factories import assistant, ledger_entry, open_unit
from tests.store.test_direct_writes import announced
from tests.store.test_merged_writes import (
    _RUN,
    _steps,
    _thread_with_run,
    _touch_later,
    driver_calls,
    pg_store,
)

__all__ = ["pg_store"]  # the fixture, used by name


async def _ledger_ids(store: SqlAgentStore) -> list[int]:
    async with store.engine.connect() as conn:
        return list((await conn.scalars(sa.select(ledger.c.id).order_by(ledger.c.id))).all())


@pytest.mark.postgres
async def test_a_waiting_ledger_row_rides_in_front_of_the_answers_insert_in_one_round_trip(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    with announced(pg_store) as seen, driver_calls(monkeypatch) as calls:
        await SqlLedger(pg_store.engine).record(ledger_entry(tid, _RUN), tx=tx)
        assert calls == [], "it waits"
        stored = await pg_store.append_messages(tid, [assistant("done", run_id=_RUN)], tx=tx)
    await tx.close(commit=True)
    assert calls == ["fetch"], "one round trip for the ledger row and the answer"
    assert len(seen) == 1
    statement = " ".join(seen[0][0].split())
    assert statement.startswith("WITH usage_bumped AS (INSERT INTO actor_usage")
    assert "waited_write AS (INSERT INTO ledger" in statement
    assert "), bumped AS (UPDATE threads" in statement, "the insert's own CTE follows"
    assert [m.seq for m in stored] == [1], "what came back is the insert's own row"
    assert await _ledger_ids(pg_store) == [1]
    assert await SqlLedger(pg_store.engine).tokens_used("alice") == 15
    loaded = await pg_store.get_thread(tid)
    assert loaded is not None and [m.content for m in loaded.messages] == ["done"]


@pytest.mark.postgres
async def test_a_duplicate_answer_behind_a_waiting_ledger_row_is_still_a_duplicate(
    pg_store: SqlAgentStore,
) -> None:
    tid = await _thread_with_run(pg_store)
    await pg_store.append_messages(tid, [assistant("first", run_id=_RUN)])
    tx = await open_unit(pg_store, tid)
    try:
        await SqlLedger(pg_store.engine).record(ledger_entry(tid, _RUN), tx=tx)
        with pytest.raises(DuplicateMessage):
            await pg_store.append_messages(tid, [assistant("again", run_id=_RUN)], tx=tx)
    finally:
        await tx.close(commit=False)
    assert await _ledger_ids(pg_store) == [], "the unit rolled back whole"
    loaded = await pg_store.get_thread(tid)
    assert loaded is not None and [m.content for m in loaded.messages] == ["first"]


@pytest.mark.postgres
async def test_a_failure_of_the_next_write_is_named_by_its_own_operation(
    pg_store: SqlAgentStore,
) -> None:
    """The run_steps key refuses the second step: the database names run_steps, which the
    waiting ledger row does not write, so the error is the step's ("unit"), not the ledger's."""
    tid = await _thread_with_run(pg_store)
    step = _steps(tid, 0)[0]
    tx = await open_unit(pg_store, tid)
    try:
        await direct.write(tx.connection, INSERT_STEP, step, "unit")
        await SqlLedger(pg_store.engine).record(ledger_entry(tid, _RUN), tx=tx)
        with pytest.raises(StoreError, match=r"^unit: database error \(\w+\)$"):
            await direct.write(tx.connection, INSERT_STEP, step, "unit")
    finally:
        await tx.close(commit=False)
    assert await _ledger_ids(pg_store) == []


@pytest.mark.postgres
async def test_a_refusal_naming_no_table_is_named_by_both_writes_of_the_prefixed_statement(
    pg_store: SqlAgentStore,
) -> None:
    """f752ee4: a refusal of the waiting ledger row's DATA (a DataError: too long a value, a
    NUL, an out-of-range number) carries no table name, so `send_after_waiting` names it by the
    next write's operation: the turn fails with `InvalidContent("append_messages: the database
    refused the data ...")`, i.e. blames the answer's text, which was fine. Before the commit
    the ledger row went alone and the error was `ledger_record`'s. The database names no table,
    so nothing tells which of the two it was: the error names both."""
    tid = await _thread_with_run(pg_store)
    entry = ledger_entry(tid, _RUN)
    bad = LedgerEntry(**{**entry.model_dump(), "purpose": "p" * 40})  # ledger.purpose is 32
    tx = await open_unit(pg_store, tid)
    try:
        await SqlLedger(pg_store.engine).record(bad, tx=tx)
        with pytest.raises(InvalidContent) as caught:
            await pg_store.append_messages(tid, [assistant("done", run_id=_RUN)], tx=tx)
    finally:
        await tx.close(commit=False)
    assert str(caught.value).startswith("ledger_record or append_messages: the database refused")


@pytest.mark.postgres
async def test_a_waiting_write_with_a_check_goes_alone_before_the_next_write(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    checked: list[int] = []
    with announced(pg_store) as seen, driver_calls(monkeypatch) as calls:
        await _touch_later(tx, tid, checked)
        await pg_store.append_messages(tid, [assistant("done", run_id=_RUN)], tx=tx)
    await tx.close(commit=True)
    assert calls == ["execute", "fetch"], "its check needs its own outcome: two round trips"
    assert [" ".join(s.split())[:14] for s, _ in seen] == ["UPDATE threads", "WITH bumped AS"]
    assert checked == [1], "its check ran on its own row count"
    loaded = await pg_store.get_thread(tid)
    assert loaded is not None and [m.content for m in loaded.messages] == ["done"]


_BUMPED_TITLE = sa.text(
    "WITH bumped AS (SELECT id FROM threads WHERE id = :tid) "
    "UPDATE threads SET title = :title WHERE id IN (SELECT id FROM bumped)"
)


@pytest.mark.postgres
async def test_a_cte_name_in_common_keeps_the_two_statements_apart(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer's insert has a CTE named `bumped`; a waiting write with one of that name
    cannot be put in front of it (one name, two meanings), so it goes first, alone."""
    tid = await _thread_with_run(pg_store)
    tx = await open_unit(pg_store, tid)
    with driver_calls(monkeypatch) as calls:
        params = {"tid": tid, "title": "touched"}
        await direct.write_later(tx.connection, _BUMPED_TITLE, params, "touch")
        await pg_store.append_messages(tid, [assistant("done", run_id=_RUN)], tx=tx)
    await tx.close(commit=True)
    assert calls == ["execute", "fetch"]
    loaded = await pg_store.get_thread(tid)
    assert loaded is not None and loaded.title == "touched"
    assert [m.content for m in loaded.messages] == ["done"]


def test_split_with_reads_a_with_list_and_its_main_statement() -> None:
    assert split_with(" UPDATE t SET a = 1 ") == ([], "UPDATE t SET a = 1")
    sql = (
        "WITH a AS (SELECT '(' AS p, f(1, (2)) FROM t), b AS (DELETE FROM u) INSERT INTO v SELECT 1"
    )
    assert split_with(sql) == (
        [("a", "SELECT '(' AS p, f(1, (2)) FROM t"), ("b", "DELETE FROM u")],
        "INSERT INTO v SELECT 1",
    )
    quoted = 'WITH a AS (UPDATE "odd)name" SET x = 1) DELETE FROM w'
    assert split_with(quoted) == ([("a", 'UPDATE "odd)name" SET x = 1')], "DELETE FROM w")


@pytest.mark.parametrize(
    "sql",
    [
        "WITH RECURSIVE r AS (SELECT 1) SELECT * FROM r",
        "WITH a AS MATERIALIZED (SELECT 1) SELECT * FROM a",
        "WITH a AS (SELECT (1) SELECT 1",
        "WITH a AS (SELECT 'open) SELECT 1",
    ],
)
def test_split_with_refuses_what_it_does_not_read(sql: str) -> None:
    assert split_with(sql) is None
