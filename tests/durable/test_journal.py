"""SqlJournal on both databases: the lease, its renewal, and claiming runs back."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from bounded_agents.core.ports import RunRequest
from bounded_agents.durable import SqlJournal
from bounded_agents.errors import RunNotFound, ThreadBusy, ThreadNotFound
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import runs, threads
from tests.conftest import emptied_store


def _request(thread_id: str) -> RunRequest:
    return RunRequest(
        run_id=str(uuid.uuid4()), thread_id=thread_id, actor_id="a", agent="x", content="hi"
    )


async def _expire(store: SqlAgentStore, run_id: str) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(
            runs.update()
            .where(runs.c.id == run_id)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )


async def test_one_live_run_per_thread(sql_store: SqlAgentStore) -> None:
    journal = SqlJournal(sql_store.engine)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    first = _request(thread.id)
    await journal.begin(first)
    with pytest.raises(ThreadBusy):
        await journal.begin(_request(thread.id))
    await journal.complete(first.run_id, {"status": "completed"})
    await journal.begin(_request(thread.id))  # the lease went with the run


async def test_a_run_on_an_unknown_thread_is_refused(sql_store: SqlAgentStore) -> None:
    with pytest.raises(ThreadNotFound):
        await SqlJournal(sql_store.engine).begin(_request(str(uuid.uuid4())))


async def test_an_expired_lease_no_longer_holds_the_thread_and_its_run_stays_resumable(
    sql_store: SqlAgentStore,
) -> None:
    journal = SqlJournal(sql_store.engine)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    dead = _request(thread.id)
    await journal.begin(dead)
    assert await journal.expired_runs() == []
    await _expire(sql_store, dead.run_id)
    assert await journal.expired_runs() == [dead.run_id]
    fresh = _request(thread.id)
    await journal.begin(fresh)
    record = await journal.get_run(dead.run_id)
    assert record is not None and record.status == "failed" and record.error_code == "lease_expired"
    with pytest.raises(ThreadBusy):  # resuming it now would interleave with the fresh run
        await journal.reopen(dead.run_id)
    await journal.complete(fresh.run_id, {})
    request, _ctx = await journal.reopen(dead.run_id)
    assert request == dead


async def test_keep_alive_renews_the_lease_during_a_long_step(sql_store: SqlAgentStore) -> None:
    journal = SqlJournal(sql_store.engine, lease_seconds=1.2)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    run = _request(thread.id)
    await journal.begin(run)
    async with journal.keep_alive(run.run_id):
        await asyncio.sleep(3.0)  # well past the 1.2 s lease: only renewals keep it alive
        assert await journal.expired_runs() == []
        with pytest.raises(ThreadBusy):
            await journal.begin(_request(thread.id))


async def test_reopening_a_live_run_or_an_unknown_one_is_refused(sql_store: SqlAgentStore) -> None:
    journal = SqlJournal(sql_store.engine)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    live = _request(thread.id)
    await journal.begin(live)
    with pytest.raises(ThreadBusy):
        await journal.reopen(live.run_id)
    with pytest.raises(RunNotFound):
        await journal.reopen(str(uuid.uuid4()))


async def test_a_process_that_lost_its_lease_can_no_longer_write_or_end_the_run(
    sql_store: SqlAgentStore,
) -> None:
    from bounded_agents.errors import LeaseLost

    stalled, taker = SqlJournal(sql_store.engine), SqlJournal(sql_store.engine)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    run = _request(thread.id)

    async def value(v: str) -> str:
        return v

    ctx_a = await stalled.begin(run)
    await ctx_a.step("persist:user", lambda tx: value("a1"))
    await _expire(sql_store, run.run_id)  # the first process stalls past its lease...
    _request_b, ctx_b = await taker.reopen(run.run_id)  # ... and another takes the run over

    with pytest.raises(LeaseLost):
        await ctx_a.step("load:thread", lambda tx: value("from the stalled process"))
    await stalled.fail(run.run_id, "lease_lost", "lost", {})  # must not touch the new attempt

    assert await ctx_b.step("persist:user", lambda tx: value("never run")) == "a1"  # replayed
    await ctx_b.step("load:thread", lambda tx: value("from the taker"))
    record = await taker.get_run(run.run_id)
    assert record is not None and record.status == "running"
    await taker.complete(run.run_id, {"ok": True})
    assert await taker.steps(run.run_id) == [
        ("persist:user", '"a1"'),
        ("load:thread", '"from the taker"'),
    ]
    record = await taker.get_run(run.run_id)
    assert record is not None and record.status == "completed" and record.report == {"ok": True}


async def test_a_lease_lost_at_the_units_check_books_the_paid_call_alone_and_commits_nothing(
    sql_store: SqlAgentStore,
) -> None:
    """The lease check is a unit's first statement; on SQLite it is deferred into the unit's
    first call to the worker thread (here the COMMIT's), so `LeaseLost` comes back from the
    commit rather than from the opening. Either way: the model call that waited for this
    commit is booked on its own (it was paid), and nothing of the unit is written."""
    from bounded_agents.core.ports import JsonValue, Transaction
    from bounded_agents.errors import LeaseLost

    stalled, taker = SqlJournal(sql_store.engine), SqlJournal(sql_store.engine)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    run = _request(thread.id)
    ctx = await stalled.begin(run)
    booked: list[tuple[JsonValue, bool]] = []

    async def book(value: JsonValue, tx: Transaction | None) -> None:
        booked.append((value, tx is not None))

    async def value(v: str) -> str:
        return v

    await ctx.step("persist:user", lambda tx: value("u"))
    await ctx.step("model:1", lambda tx: value("paid"), writes=True, record=book)
    assert booked == [], "the call's row waits for the next commit"
    await _expire(sql_store, run.run_id)
    await taker.reopen(run.run_id)
    with pytest.raises(LeaseLost):
        async with ctx.unit_of_work():
            await ctx.step("persist:answer", lambda tx: value("a"), writes=True)
    assert booked[-1] == ("paid", False), "booked on its own after the unit failed"
    assert await taker.steps(run.run_id) == [("persist:user", '"u"')]


@pytest.mark.parametrize("shared", [False, True])
async def test_a_run_on_another_actors_or_agents_thread_is_refused_and_leaves_no_row(
    sql_store: SqlAgentStore, shared: bool
) -> None:
    """Issue 37: `begin` checks the owner in the run's own insert (the loop sends no read of
    its own): another actor's thread, or the actor's thread of another agent, is refused as
    missing, even while a run holds it (busy would say it exists), and nothing is written."""
    journal = SqlJournal(sql_store.engine)
    thread = await sql_store.create_thread(actor_id="a", agent="x")
    held = _request(thread.id)
    await journal.begin(held)
    strangers = [
        RunRequest(
            run_id=str(uuid.uuid4()), thread_id=thread.id, actor_id="b", agent="x", content="hi"
        ),
        RunRequest(
            run_id=str(uuid.uuid4()), thread_id=thread.id, actor_id="a", agent="y", content="hi"
        ),
    ]
    for request in strangers:
        with pytest.raises(ThreadNotFound):
            await journal.begin(request, shared_first_unit=shared)
    await journal.complete(held.run_id, {})
    for request in strangers:  # with the thread free again: still refused
        with pytest.raises(ThreadNotFound):
            await journal.begin(request, shared_first_unit=shared)
    async with sql_store.engine.connect() as conn:
        ids = (await conn.execute(runs.select().where(runs.c.thread_id == thread.id))).all()
    assert [row.id for row in ids] == [held.run_id]
    mine = _request(thread.id)  # the refusals left the thread's lease free
    await journal.begin(mine)
    await journal.complete(mine.run_id, {})


@pytest.mark.postgres
async def test_a_thread_deleted_while_its_runs_insert_waits_on_it_is_not_found(
    postgres_url: str,
) -> None:
    """The run's insert reads its thread, then its foreign key waits for a transaction that
    deletes that thread; once that commits, the database refuses the insert's reference. The
    insert goes the driver's way (issue 37), so that refusal is the driver's, not SQLAlchemy's
    `IntegrityError`: still `ThreadNotFound`, and no run row is left."""
    async with emptied_store(postgres_url) as store:
        journal = SqlJournal(store.engine)
        thread = await store.create_thread(actor_id="a", agent="x")
        request = _request(thread.id)
        async with store.engine.connect() as deleting:
            await deleting.begin()
            await deleting.execute(sa.delete(threads).where(threads.c.id == thread.id))
            begun = asyncio.create_task(journal.begin(request))
            await asyncio.sleep(0.3)  # the insert now waits for the deleted row's lock
            assert not begun.done()
            await deleting.commit()
        with pytest.raises(ThreadNotFound):
            await begun
        async with store.engine.connect() as conn:
            left = await conn.execute(sa.select(runs.c.id).where(runs.c.id == request.run_id))
            assert left.first() is None
