"""Taking back the runs of a dead process: claim first, by the database's clock, in batches.

Several processes sweep one database. Each reads the lapsed runs (no lock), claims each of its
batch with a compare-and-set on the run's row, and only then reads their journals, so two
sweepers never take the same run, and none holds a lock across runs (what Citus refuses across
shards); a lease is written and judged by the database's clock, so no host's clock can make a
live run look dead.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import date, datetime, time
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql

from bounded_agents.core.ports import RunRequest
from bounded_agents.durable import SqlJournal
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.clock import db_now
from bounded_agents.store.schema import runs
from tests.conftest import emptied_store, recorded_statements


def _request(thread_id: str) -> RunRequest:
    return RunRequest(
        run_id=str(uuid.uuid4()), thread_id=thread_id, actor_id="a", agent="x", content="hi"
    )


async def _lapse(store: SqlAgentStore, run_ids: list[str]) -> None:
    """Make the runs' leases lapse, by the database's clock (as a dead process leaves them)."""
    async with store.engine.begin() as conn:
        await conn.execute(
            runs.update().where(runs.c.id.in_(run_ids)).values(lease_expires_at=db_now(-1))
        )


async def _dead_runs(store: SqlAgentStore, count: int) -> list[str]:
    """`count` runs on threads of their own, begun by a process that then died."""
    dead = SqlJournal(store.engine)
    run_ids = []
    for _ in range(count):
        thread = await store.create_thread(actor_id="a", agent="x")
        request = _request(thread.id)
        await dead.begin(request)
        run_ids.append(request.run_id)
    await _lapse(store, run_ids)
    return run_ids


async def test_a_sweep_claims_at_most_its_limit_and_the_next_takes_the_rest(
    sql_store: SqlAgentStore,
) -> None:
    run_ids = await _dead_runs(sql_store, 5)
    sweeper = SqlJournal(sql_store.engine)
    first = await sweeper.claim_expired(3)
    second = await sweeper.claim_expired(3)
    assert len(first) == 3 and len(second) == 2
    assert sorted(first + second) == sorted(run_ids)
    assert await sweeper.claim_expired(3) == []  # claimed runs hold fresh leases
    assert await sweeper.expired_runs() == []


async def test_concurrent_sweepers_split_the_dead_runs_between_them(
    sql_store: SqlAgentStore,
) -> None:
    run_ids = await _dead_runs(sql_store, 12)
    sweepers = [SqlJournal(sql_store.engine) for _ in range(4)]
    batches = await asyncio.gather(*(s.claim_expired(4) for s in sweepers))
    claimed = [run_id for batch in batches for run_id in batch]
    assert len(claimed) == len(set(claimed)), "a run was claimed twice"
    assert sorted(claimed) == sorted(run_ids)


@pytest.mark.postgres
async def test_a_sweep_skips_a_run_whose_row_another_transaction_holds(postgres_url: str) -> None:
    """Each claim is one statement on one run's row: a row another transaction holds (another
    sweeper claiming it, a process whose connection hangs mid-unit) is skipped, not waited
    for, and the sweep takes the other runs; the held one is taken once it is let go."""
    async with emptied_store(postgres_url) as store:
        run_ids = await _dead_runs(store, 3)
        held = await store.engine.connect()
        try:
            await held.begin()
            thread_id = (
                await held.execute(sa.select(runs.c.thread_id).where(runs.c.id == run_ids[0]))
            ).scalar_one()
            await held.execute(  # by its key: Citus locks a row on one shard only
                sa.select(runs.c.id)
                .where(runs.c.thread_id == thread_id, runs.c.id == run_ids[0])
                .with_for_update()
            )
            sweeper = SqlJournal(store.engine)
            taken = await asyncio.wait_for(sweeper.claim_expired(10), timeout=5)
            assert sorted(taken) == sorted(run_ids[1:])
            await held.rollback()
        finally:
            await held.close()
        assert await sweeper.claim_expired(10) == [run_ids[0]]


async def test_a_claimed_run_is_reopened_without_a_second_claim_and_others_cannot_take_it(
    sql_store: SqlAgentStore,
) -> None:
    [run_id] = await _dead_runs(sql_store, 1)
    sweeper, other = SqlJournal(sql_store.engine), SqlJournal(sql_store.engine)
    assert await sweeper.claim_expired(10) == [run_id]
    assert await other.claim_expired(10) == []
    statements = recorded_statements(sql_store)
    request, _ctx = await sweeper.reopen(run_id)
    assert request.run_id == run_id
    assert not [s for s in statements if s.lstrip().upper().startswith("UPDATE")], statements
    record = await sweeper.get_run(run_id)
    assert record is not None and record.status == "running"
    await sweeper.complete(run_id, {})  # the claim's token is the one that ends it
    record = await sweeper.get_run(run_id)
    assert record is not None and record.status == "completed"


async def test_no_lease_time_is_ever_taken_from_the_hosts_clock(sql_store: SqlAgentStore) -> None:
    """Every statement of a run's life (begin, renew, journal, end, release, claim) is sent
    without a date or time parameter: lease times are computed by the database."""
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(sql_store.engine.sync_engine, "before_cursor_execute", record)
    journal = SqlJournal(sql_store.engine, lease_seconds=0.6)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    live = _request(thread.id)
    ctx = await journal.begin(live)
    async with journal.keep_alive(live.run_id):
        await asyncio.sleep(0.5)  # a renewal or two
        await ctx.step("work", _answer)
    await journal.complete(live.run_id, {})
    [dead] = await _dead_runs(sql_store, 1)
    await journal.claim_expired(5)
    await journal.reopen(dead)
    leaked = [(s, p) for s, p in sent if _has_time(p)]
    assert sent and not leaked, leaked


async def _answer(tx: object) -> str:
    return "done"


def _has_time(parameters: Any) -> bool:
    values: list[Any] = []
    if isinstance(parameters, dict):
        values = list(parameters.values())
    elif isinstance(parameters, list | tuple):
        for item in parameters:
            values.extend(item.values() if isinstance(item, dict) else [item])
    return any(isinstance(v, datetime | date | time) for v in values)


async def test_a_lease_is_dated_by_the_database(sql_store: SqlAgentStore) -> None:
    journal = SqlJournal(sql_store.engine, lease_seconds=300)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    request = _request(thread.id)
    await journal.begin(request)
    async with sql_store.engine.connect() as conn:
        left = (
            await conn.execute(
                sa.select(runs.c.lease_expires_at, db_now()).where(runs.c.id == request.run_id)
            )
        ).one()
    expires, now = left
    if expires.tzinfo is None:  # SQLite keeps naive UTC
        now = now.replace(tzinfo=None)
    assert 295 <= (expires - now).total_seconds() <= 300


def test_the_database_clock_compiles_to_statement_time_on_postgresql() -> None:
    sql = str(sa.select(db_now(90)).compile(dialect=postgresql.dialect()))
    assert "statement_timestamp()" in sql and "90.000000 seconds" in sql


async def test_the_database_clock_takes_every_offset_the_settings_allow(
    sql_store: SqlAgentStore,
) -> None:
    """A lease or retention setting may be any positive float: `1e-05` once rendered as
    `interval '1e-05 seconds'`, which PostgreSQL refuses."""
    offsets = [1e-05, -1e-05, 0.25, 86400.0, -3.15e9, 3.15e9]
    async with sql_store.engine.connect() as conn:
        now = (await conn.execute(sa.select(db_now()))).scalar_one()
        for seconds in offsets:
            shifted = (await conn.execute(sa.select(db_now(seconds)))).scalar_one()
            if not isinstance(shifted, datetime):  # SQLite's strftime text
                shifted = datetime.fromisoformat(shifted)
            if not isinstance(now, datetime):
                now = datetime.fromisoformat(now)
            assert abs((shifted - now).total_seconds() - seconds) < 5, seconds
