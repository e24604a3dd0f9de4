"""The run's insert on the driver's way (`direct.write`, after `_begin_now`: issue 37), attacked
as an outsider would: dead pooled connections before and during it, races on one thread, a
keyed repeat racing its first turn, a cancellation while it waits on a lock, and its refusals
(`ThreadBusy`, `TurnInProgress`, `ThreadNotFound`) alike on the driver's way and SQLAlchemy's.
SQLite and PostgreSQL where the store is involved."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url

from bounded_agents.core.ports import Idempotency, RunRequest
from bounded_agents.durable import SqlJournal
from bounded_agents.errors import StoreError, ThreadBusy, ThreadNotFound, TurnInProgress
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import runs, threads
from tests.conftest import asyncpg_dsn, emptied_store, recorded_statements, terminate_backends


def _request(thread_id: str, key: str | None = None) -> RunRequest:
    return RunRequest(
        run_id=str(uuid.uuid4()),
        thread_id=thread_id,
        actor_id="alice",
        agent="helper",
        content="hi",
        idempotency=Idempotency(key=key, fingerprint="f") if key else None,
    )


async def _run_ids(store: SqlAgentStore, thread_id: str) -> list[str]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(sa.select(runs.c.id).where(runs.c.thread_id == thread_id))
        return [r.id for r in rows]


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url, pool_size=2, max_overflow=0, pool_timeout=5) as store:
        yield store


# --- dead pooled connections (PostgreSQL) ------------------------------------------------------


@pytest.mark.postgres
async def test_a_pooled_connection_killed_before_begin_is_retried_and_the_run_begins(
    pg_store: SqlAgentStore, postgres_url: str
) -> None:
    """The pool holds connections whose backends were terminated while idle; the run's insert
    is the first statement on one of them (no ping on that checkout). `_begin_now`'s BEGIN
    fails, the insert goes SQLAlchemy's way, fails as a disconnect, and `open_write` opens the
    unit again on a fresh connection: the run begins, once."""
    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(pg_store.engine)
    # Two connections in the pool, both idle.
    async with pg_store.engine.connect() as a, pg_store.engine.connect() as b:
        await a.execute(sa.text("SELECT 1"))
        await b.execute(sa.text("SELECT 1"))
    assert await terminate_backends(postgres_url) >= 2
    await asyncio.sleep(0.2)  # asyncpg reads the goodbye
    request = _request(tid)
    ctx = await journal.begin(request)
    assert ctx is not None
    assert await _run_ids(pg_store, tid) == [request.run_id]
    await journal.complete(request.run_id, {})


@pytest.mark.postgres
async def test_a_connection_killed_between_begin_and_the_runs_insert_is_retried(
    pg_store: SqlAgentStore, postgres_url: str
) -> None:
    """`_begin_now` sent BEGIN on a live connection; its backend is terminated before the run's
    insert goes out (a failover, an idle-in-transaction reaper, an operator). Nothing was
    written: SQLAlchemy's way took this as a dead connection and `open_write` retried the
    opening on a fresh one. The driver's way must too, not fail the turn with a 503."""
    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(pg_store.engine)
    killed: list[int] = []

    def kill_first_insert(conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if killed or not statement.lstrip().upper().startswith("INSERT INTO RUNS"):
            return
        driver = conn.connection.driver_connection
        pid = driver.get_server_pid()
        killed.append(pid)
        _kill_now(postgres_url, pid)

    seen = recorded_statements(pg_store)
    event.listen(pg_store.engine.sync_engine, "before_cursor_execute", kill_first_insert)
    try:
        request = _request(tid)
        await journal.begin(request)
    finally:
        event.remove(pg_store.engine.sync_engine, "before_cursor_execute", kill_first_insert)
    assert killed, "the test must have killed the insert's connection"
    inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT INTO RUNS")]
    assert len(inserts) == 2, "the opening was tried again on a fresh connection"
    assert await _run_ids(pg_store, tid) == [request.run_id]
    await journal.complete(request.run_id, {})


# --- the insert is seen by statement capture -----------------------------------------------------


async def test_statement_capture_sees_the_runs_insert_once(sql_store: SqlAgentStore) -> None:
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(sql_store.engine)
    seen = recorded_statements(sql_store)
    request = _request(tid)
    await journal.begin(request)
    inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT INTO RUNS")]
    assert len(inserts) == 1, seen
    await journal.complete(request.run_id, {})


# --- races on one thread, at the journal -------------------------------------------------------


async def _race(journal: SqlJournal, one: RunRequest, two: RunRequest) -> tuple[Any, Any]:
    """Both begins at once, each keeping its first unit open: the loser waits for the winner's
    first unit (PostgreSQL's unique index, SQLite's write turn), which commits here."""
    tasks = [asyncio.create_task(journal.begin(r, shared_first_unit=True)) for r in (one, two)]
    done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    first = done.pop()
    if first.exception() is None:
        async with first.result().unit_of_work():
            pass
    await asyncio.wait(tasks)
    other = tasks[1] if first is tasks[0] else tasks[0]
    if other.exception() is None:
        async with other.result().unit_of_work():
            pass
    return tasks[0].exception() or tasks[0].result(), tasks[1].exception() or tasks[1].result()


async def test_two_begins_racing_on_one_thread_one_runs_one_is_busy(
    sql_store: SqlAgentStore,
) -> None:
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(sql_store.engine)
    for i in range(5):
        first, second = _request(tid), _request(tid)
        outcomes = await asyncio.wait_for(_race(journal, first, second), 20)
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(lost) == 1, outcomes
        assert isinstance(lost[0], ThreadBusy), repr(lost[0])
        winner = second if outcomes[0] is lost[0] else first
        await journal.complete(winner.run_id, {})
        assert winner.run_id in await _run_ids(sql_store, tid)
        assert len(await _run_ids(sql_store, tid)) == i + 1


async def test_a_keyed_repeat_racing_its_first_turn_is_turn_in_progress(
    sql_store: SqlAgentStore,
) -> None:
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(sql_store.engine)
    first, repeat = _request(tid, "k1"), _request(tid, "k1")
    outcomes = await asyncio.wait_for(_race(journal, first, repeat), 20)
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(lost) == 1, outcomes
    assert isinstance(lost[0], TurnInProgress), repr(lost[0])
    winner = repeat if outcomes[0] is lost[0] else first
    assert lost[0].run_id == winner.run_id
    await journal.complete(winner.run_id, {})
    assert await _run_ids(sql_store, tid) == [winner.run_id]


# --- a turn cancelled mid-insert ------------------------------------------------------------------


async def test_a_begin_cancelled_while_its_insert_waits_leaves_nothing_and_frees_the_thread(
    sql_store: SqlAgentStore, db_url: str
) -> None:
    """The run's insert waits on a lock another connection holds (PostgreSQL: the thread row
    FOR UPDATE, which the insert's foreign key waits on; SQLite: another process's write
    lock). The turn is cancelled there (its client went away): no run row, and once the lock
    is gone the next turn on the thread begins at once."""
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(sql_store.engine)
    request = _request(tid)
    postgres = sql_store.engine.dialect.name == "postgresql"
    if postgres:
        blocker: Any = await asyncpg.connect(asyncpg_dsn(db_url))
        await blocker.execute("BEGIN")
        await blocker.execute("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE", tid)
    else:
        path = make_url(db_url).database
        assert path is not None
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
    try:
        begun = asyncio.create_task(journal.begin(request, shared_first_unit=True))
        await asyncio.sleep(0.5)
        assert not begun.done(), begun
        begun.cancel()
        if not postgres:
            # The cancelled insert is still in its worker thread, waiting for the file's lock
            # (its cancellation waits for that call: as long as the busy timeout, as it did
            # through SQLAlchemy): let it go, so the insert runs there after all, and must be
            # rolled back by the invalidated connection's close.
            asyncio.get_running_loop().call_later(0.2, blocker.execute, "ROLLBACK")
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(begun), 10)
    finally:
        if postgres:
            await blocker.execute("ROLLBACK")
            await blocker.close()
        else:
            if blocker.in_transaction:
                blocker.execute("ROLLBACK")
            blocker.close()
    assert await _run_ids(sql_store, tid) == []
    nxt = _request(tid)
    ctx = await asyncio.wait_for(journal.begin(nxt, shared_first_unit=True), 10)
    async with ctx.unit_of_work():
        pass
    await journal.complete(nxt.run_id, {})
    assert await _run_ids(sql_store, tid) == [nxt.run_id]


def _kill_now(url: str, pid: int) -> None:
    """Terminate backend `pid` and return once the server did, from a sync listener."""
    done = threading.Event()

    def kill() -> None:
        asyncio.run(terminate_backends(url, [pid]))
        done.set()

    threading.Thread(target=kill).start()
    assert done.wait(10)


@pytest.mark.postgres
@pytest.mark.parametrize("times", [1, 2], ids=["once", "twice"])
async def test_a_backend_killed_at_checkout_before_asyncpg_noticed_is_retried(
    pg_store: SqlAgentStore, postgres_url: str, times: int
) -> None:
    """The pooled connection's backend is terminated after the checkout's `is_closed` look and
    before the run's insert (asyncpg has not read the goodbye yet): the case the retry of the
    first statement is for. `_begin_now` meets the dead connection first. Once: the turn
    begins on a fresh connection. Twice (the retry's connection dies too): a `StoreError`,
    no run row, the thread free."""
    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(pg_store.engine)
    killed: list[int] = []

    def kill_at_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if len(killed) < times:
            pid = dbapi_connection.driver_connection.get_server_pid()
            killed.append(pid)
            _kill_now(postgres_url, pid)

    event.listen(pg_store.engine.sync_engine, "checkout", kill_at_checkout)
    request = _request(tid)
    try:
        if times == 1:
            await asyncio.wait_for(journal.begin(request), 10)
        else:
            with pytest.raises(StoreError):
                await asyncio.wait_for(journal.begin(request), 10)
    finally:
        event.remove(pg_store.engine.sync_engine, "checkout", kill_at_checkout)
    assert len(killed) == times
    if times == 1:
        assert await _run_ids(pg_store, tid) == [request.run_id]
        await journal.complete(request.run_id, {})
    else:
        assert await _run_ids(pg_store, tid) == []
        nxt = _request(tid)
        await asyncio.wait_for(journal.begin(nxt), 10)
        assert await _run_ids(pg_store, tid) == [nxt.run_id]


# --- SQLAlchemy's way (`after_cursor_execute` listeners) keeps the mapping ---------------------


def _after_listener(store: SqlAgentStore) -> Any:
    def after(*_args: Any) -> None:
        pass

    event.listen(store.engine.sync_engine, "after_cursor_execute", after)
    return after


@pytest.mark.parametrize("way", ["driver", "sqlalchemy"])
async def test_a_busy_thread_and_a_used_key_are_refused_alike_on_either_way(
    sql_store: SqlAgentStore, way: str
) -> None:
    tid = (await sql_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(sql_store.engine)
    listener = _after_listener(sql_store) if way == "sqlalchemy" else None
    try:
        holder = _request(tid, "k")
        await journal.begin(holder)
        with pytest.raises(ThreadBusy) as busy:
            await journal.begin(_request(tid))
        assert not isinstance(busy.value, TurnInProgress)
        with pytest.raises(TurnInProgress) as repeat:
            await journal.begin(_request(tid, "k"))
        assert repeat.value.run_id == holder.run_id
        await journal.complete(holder.run_id, {})
        with pytest.raises(TurnInProgress):  # the key stays used once its run ended
            await journal.begin(_request(tid, "k"))
    finally:
        if listener is not None:
            event.remove(sql_store.engine.sync_engine, "after_cursor_execute", listener)
    assert await _run_ids(sql_store, tid) == [holder.run_id]


@pytest.mark.postgres
@pytest.mark.parametrize("way", ["driver", "sqlalchemy"])
async def test_a_thread_erased_while_a_shared_first_unit_begins_is_not_found(
    postgres_url: str, way: str
) -> None:
    async with emptied_store(postgres_url) as store:
        journal = SqlJournal(store.engine)
        listener = _after_listener(store) if way == "sqlalchemy" else None
        try:
            tid = (await store.create_thread(actor_id="alice", agent="helper")).id
            request = _request(tid)
            async with store.engine.connect() as deleting:
                await deleting.begin()
                await deleting.execute(sa.delete(threads).where(threads.c.id == tid))
                begun = asyncio.create_task(journal.begin(request, shared_first_unit=True))
                await asyncio.sleep(0.3)
                assert not begun.done()
                await deleting.commit()
            with pytest.raises(ThreadNotFound):
                await begun
        finally:
            if listener is not None:
                event.remove(store.engine.sync_engine, "after_cursor_execute", listener)
        assert await _run_ids(store, tid) == []
