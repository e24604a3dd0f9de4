"""A unit of work's later writes through the driver (`bounded_agents.store.direct`): SQLAlchemy's
own SQL, seen by the engine's listeners, taken only inside a transaction the driver says is open,
and a failure that rolls the unit back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection

from bounded_agents.core.ports import ThreadTurnQuery
from bounded_agents.durable.journal import INSERT_STEP
from bounded_agents.errors import InvalidContent, StoreError
from bounded_agents.store import SqlAgentStore, direct, driver, waiting
from bounded_agents.store.driver import raw_connection
from bounded_agents.store.engine import ConnectionLost, is_dead_connection, on_citus
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.onehop import OneHopConnection
from bounded_agents.store.schema import actor_usage, ledger, run_steps, threads
from bounded_agents.store.tx import SqlTransaction, open_write
from tests.conftest import emptied_store, terminate_backends, worker_calls
from tests.factories import TOUCH_THREAD, ledger_entry, open_unit, tool_answer, user

_INSERT = ledger.insert()


@contextmanager
def announced(store: SqlAgentStore) -> Iterator[list[tuple[str, bool]]]:
    """(statement, sent by the driver's way) for every statement announced to the engine:
    SQLAlchemy hands its listeners a cursor, the driver's way hands them none."""
    seen: list[tuple[str, bool]] = []

    def before(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        seen.append((statement, cursor is None))

    event.listen(store.engine.sync_engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", before)


async def _ledger_rows(store: SqlAgentStore) -> list[tuple[Any, ...]]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(ledger.c.actor_id, ledger.c.id, ledger.c.prompt_tokens).order_by(ledger.c.id)
        )
        return [tuple(r) for r in rows]


async def test_writes_inside_a_unit_take_the_driver_and_send_sqlalchemys_own_sql(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    book = SqlLedger(sql_store.engine)

    # The COMMIT inside: on PostgreSQL the row waits for the unit's next statement, which it
    # goes before (`direct.write_later`), here the COMMIT.
    tx = await open_unit(sql_store, thread.id)
    with announced(sql_store) as driver_way:
        await book.record(ledger_entry(thread.id), tx=tx)
        await tx.close(commit=True)

    async def no_driver(_conn: Any) -> None:
        return None

    monkeypatch.setattr(direct, "_open_driver", no_driver)
    tx = await open_unit(sql_store, thread.id)
    with announced(sql_store) as sqlalchemy_way:
        await book.record(ledger_entry(thread.id, "run-2"), tx=tx)
        await tx.close(commit=True)

    # The usage bump and the ledger row: one statement on PostgreSQL (a data-modifying CTE),
    # two in one worker-thread call on SQLite, two statements on Citus.
    n = 2 if sql_store.engine.dialect.name == "sqlite" or on_citus(sql_store.engine) else 1
    assert [by_driver for _, by_driver in driver_way] == [True] * n
    assert [by_driver for _, by_driver in sqlalchemy_way] == [False] * n
    assert [sql for sql, _ in driver_way] == [sql for sql, _ in sqlalchemy_way]
    assert await _ledger_rows(sql_store) == [("alice", 1, 10), ("alice", 2, 10)]
    assert await book.tokens_used("alice") == 30


async def test_a_transactions_first_write_takes_the_drivers_way_on_both_databases(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    with announced(sql_store) as seen:
        # No shared unit: the ledger's own transaction opens with its first write. On
        # PostgreSQL `direct` has SQLAlchemy's asyncpg adapter send its BEGIN first (it went
        # through SQLAlchemy for that BEGIN before issue 37); on Citus the ledger is two
        # statements. On SQLite sqlite3 begins at the first write itself.
        await SqlLedger(sql_store.engine).record(ledger_entry(thread.id))
    two = on_citus(sql_store.engine) or sql_store.engine.dialect.name == "sqlite"
    assert [by_driver for _, by_driver in seen] == ([True, True] if two else [True])
    assert await _ledger_rows(sql_store) == [("alice", 1, 10)]


async def test_a_driver_error_is_a_store_error_naming_the_operation_and_the_unit_rolls_back(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    row = {**ledger_entry(thread.id).model_dump(), "id": 1}
    tx = await open_unit(sql_store, thread.id)
    try:
        await direct.write(tx.connection, _INSERT, row, "ledger_record")
        with pytest.raises(StoreError, match=r"^ledger_record: database error \(\w+\)$"):
            await direct.write(tx.connection, _INSERT, row, "ledger_record")  # same key
    finally:
        await tx.close(commit=False)
    assert await _ledger_rows(sql_store) == []
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.title is None, "the unit's first write rolled back too"


async def test_a_foreign_key_refusal_is_a_missing_parent_naming_the_operation(
    sql_store: SqlAgentStore,
) -> None:
    """A journal row of a run that is not there: the journal reads this class as
    `ThreadNotFound` for the run's insert, so it must not be the plain `StoreError` of any
    other failure, on either driver."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    step = {
        "thread_id": thread.id,
        "run_id": "no-such-run",
        "position": 0,
        "name": "n",
        "payload": "",
    }
    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(driver.MissingParent, match=r"^journal_step: database error \(\w+\)$"):
            await direct.write(tx.connection, INSERT_STEP, step, "journal_step")
    finally:
        await tx.close(commit=False)


def test_a_driver_timeout_is_named_as_sqlalchemys_way_names_it() -> None:
    """asyncpg's statement timeout (a `TimeoutError`, which Python makes an `OSError`) reads as
    `wrap_db_errors` words it, not as a database error of class TimeoutError (found by review:
    the run's insert said "begin_run: database error (TimeoutError)" once it took this way)."""
    error = driver.driver_error("begin_run", TimeoutError())
    assert type(error) is StoreError
    assert str(error) == "begin_run: the database did not answer in time"


async def test_a_failure_injected_at_the_listener_fails_the_write_before_it_is_sent(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")

    def refuse(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "INSERT INTO ledger" in statement:
            raise RuntimeError("injected")

    event.listen(sql_store.engine.sync_engine, "before_cursor_execute", refuse)
    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
            # On PostgreSQL the row waits for the unit's next statement (`direct.write_later`),
            # here its COMMIT: announced, and refused, as it is about to be sent.
            await tx.close(commit=True)
    finally:
        event.remove(sql_store.engine.sync_engine, "before_cursor_execute", refuse)
        # Committed on purpose: had the refused write reached the database, its rows would stay.
        await tx.close(commit=True)
    async with sql_store.engine.connect() as conn:
        usage = await conn.execute(sa.select(sa.func.count()).select_from(actor_usage))
        # The bump goes out with the row it numbers (one statement on PostgreSQL, one
        # worker-thread call on SQLite, both statements announced first): neither was sent.
        # On Citus the row is numbered by what the bump returned, so the bump went first;
        # the unit a failed write leaves is rolled back by its caller, never committed.
        sent = 1 if on_citus(sql_store.engine) else 0
        assert usage.scalar() == sent, "the usage bump was sent without its ledger row"
    assert await _ledger_rows(sql_store) == []


def test_an_outcome_gives_its_one_row_or_says_what_is_wrong() -> None:
    assert driver.Outcome([(7, 8)], 1).scalar_one() == 7
    assert driver.Outcome([], 0).one_or_none() is None
    with pytest.raises(StoreError, match="no row"):
        driver.Outcome([], 0).scalar_one()
    with pytest.raises(StoreError, match="more than one row"):
        driver.Outcome([(1,), (2,)], 2).one_or_none()


async def test_many_rows_go_as_one_driver_call_and_land_as_sqlalchemy_would_write_them(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    rows = [{**ledger_entry(thread.id).model_dump(), "id": n} for n in (1, 2, 3)]
    calls: list[object] = []
    real = direct.guarded

    async def counting(conn: Any, operation: str, call: Any) -> Any:
        calls.append(call)
        return await real(conn, operation, call)

    monkeypatch.setattr(direct, "guarded", counting)  # SQLite's worker-thread call
    monkeypatch.setattr(waiting, "guarded", counting)  # asyncpg's, after the waiting writes
    tx = await open_unit(sql_store, thread.id)
    try:
        with announced(sql_store) as seen:
            await direct.write_many(tx.connection, _INSERT, rows, "ledger_record")
            await direct.write_many(tx.connection, _INSERT, [], "ledger_record")  # nothing sent
    finally:
        await tx.close(commit=True)
    assert len(calls) == 1, "three rows, one driver call"
    assert len(seen) == 1 and seen[0][1], "one statement, by the driver's way"
    assert await _ledger_rows(sql_store) == [("alice", n, 10) for n in (1, 2, 3)]


_RETITLE = (
    threads.update().where(threads.c.id == sa.bindparam("tid")).values(title=sa.bindparam("t"))
)


async def test_a_units_first_write_opens_the_transaction_it_rolls_back_or_commits_with(
    sql_store: SqlAgentStore,
) -> None:
    """The first write of a unit takes the driver's way: on SQLite sqlite3's implicit BEGIN is
    SQLAlchemy's BEGIN there; on PostgreSQL `direct` has SQLAlchemy's asyncpg adapter send its
    BEGIN first, by the adapter's own method. Either way it is inside the unit, and it is
    SQLAlchemy's transaction: its rollback undoes the write, its commit keeps it."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper", title="before")

    async def retitle(title: str) -> SqlTransaction:
        return await open_write(
            sql_store.engine,
            "test",
            lambda conn: direct.write(conn, _RETITLE, {"tid": thread.id, "t": title}, "test"),
        )

    with announced(sql_store) as seen:
        tx = await retitle("rolled back")
    await tx.close(commit=False)
    assert [by_driver for _, by_driver in seen] == [True]
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.title == "before"

    tx = await retitle("committed")
    await tx.close(commit=True)
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.title == "committed"


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url) as store:
        yield store


async def test_on_postgresql_a_failed_begin_leaves_the_first_write_to_sqlalchemy(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`direct` sends a unit's BEGIN itself, by SQLAlchemy's asyncpg adapter's own method, so
    the first write can take the driver's way. When that BEGIN fails (here: once, as on a
    connection that died in the pool), nothing is raised from it: the write goes SQLAlchemy's
    way, which begins again, and the unit commits as SQLAlchemy's transaction."""
    thread = await pg_store.create_thread(actor_id="alice", agent="helper", title="before")
    async with pg_store.engine.connect() as conn:
        adapter_class = type((await conn.get_raw_connection()).dbapi_connection)
    start = adapter_class._start_transaction
    failed: list[bool] = []

    async def fail_once(self: Any) -> None:
        if not failed:
            failed.append(True)
            raise asyncpg.ConnectionDoesNotExistError("connection was closed mid-operation")
        await start(self)

    monkeypatch.setattr(adapter_class, "_start_transaction", fail_once)
    with announced(pg_store) as seen:
        tx = await open_write(
            pg_store.engine,
            "test",
            lambda conn: direct.write(conn, _RETITLE, {"tid": thread.id, "t": "after"}, "test"),
        )
        await direct.write(tx.connection, _RETITLE, {"tid": thread.id, "t": "again"}, "test")
    await tx.close(commit=True)
    assert failed == [True]
    assert [by_driver for _, by_driver in seen] == [False, True]
    loaded = await pg_store.get_thread(thread.id)
    assert loaded is not None and loaded.title == "again"


@pytest.mark.postgres
async def test_on_postgresql_a_write_whose_connection_died_is_a_lost_connection(
    pg_store: SqlAgentStore, postgres_url: str
) -> None:
    """The unit's backend is terminated (a failover, an operator) before its next driver-way
    write: the write fails as `ConnectionLost`, which `is_dead_connection` reads, with the
    connection invalidated, as SQLAlchemy's own statement would leave it, so a unit's opening
    is tried again on a fresh connection (`open_write`) for this reason and not by the accident
    of a rollback failing after it (found by review); the unit rolls back cleanly."""
    thread = await pg_store.create_thread(actor_id="alice", agent="helper", title="before")
    tx = await open_unit(pg_store, thread.id)
    try:
        pid = (await raw_connection(tx.connection)).driver_connection.get_server_pid()
        assert await terminate_backends(postgres_url, [pid]) == 1
        with pytest.raises(ConnectionLost) as lost:
            at = datetime.now(UTC)
            await direct.write(tx.connection, TOUCH_THREAD, {"tid": thread.id, "at": at}, "touch")
        assert is_dead_connection(lost.value)
        assert tx.connection.invalidated
    finally:
        await tx.close(commit=False)
    loaded = await pg_store.get_thread(thread.id)
    assert loaded is not None and loaded.title == "before"


async def test_on_postgresql_a_begin_that_times_out_is_not_sent_again(
    pg_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BEGIN that waited out the statement timeout (a partition) fails the write at once,
    its connection invalidated: falling back to SQLAlchemy's way would send it again and wait
    as long again (found by review: a unit's opening took twice the timeout)."""
    thread = await pg_store.create_thread(actor_id="alice", agent="helper", title="before")
    async with pg_store.engine.connect() as conn:
        adapter_class = type((await conn.get_raw_connection()).dbapi_connection)
    starts: list[bool] = []

    async def times_out(_self: Any) -> None:
        starts.append(True)
        raise TimeoutError

    monkeypatch.setattr(adapter_class, "_start_transaction", times_out)
    with pytest.raises(StoreError, match="did not answer in time"):
        await open_write(
            pg_store.engine,
            "test",
            lambda conn: direct.write(conn, _RETITLE, {"tid": thread.id, "t": "after"}, "test"),
        )
    assert starts == [True]
    monkeypatch.undo()
    loaded = await pg_store.get_thread(thread.id)
    assert loaded is not None and loaded.title == "before"


async def test_an_engine_with_after_execute_listeners_keeps_every_statement_sqlalchemys(
    sql_store: SqlAgentStore,
) -> None:
    """Instrumentation that needs SQLAlchemy's cursor and context (OpenTelemetry's, Sentry's)
    listens after execution too: with such a listener, nothing takes the driver's way."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user("q"), tool_answer(1, 100)])
    after: list[str] = []

    def on_after(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        assert cursor is not None
        after.append(statement)

    event.listen(sql_store.engine.sync_engine, "after_cursor_execute", on_after)
    try:
        with announced(sql_store) as seen:
            tx = await open_unit(sql_store, thread.id)
            await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
            page = await sql_store.load_thread_for_turn(
                ThreadTurnQuery(thread_id=thread.id, message_limit=10), tx=tx
            )
            await tx.close(commit=True)
        await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=thread.id, message_limit=5))
    finally:
        event.remove(sql_store.engine.sync_engine, "after_cursor_execute", on_after)
    assert page is not None and len(page.messages) == 2
    assert seen and not [sql for sql, by_driver in seen if by_driver]
    assert len(after) == len(seen) + 1


async def test_data_the_database_refuses_is_invalid_content_as_through_sqlalchemy(
    sql_store: SqlAgentStore,
) -> None:
    """PostgreSQL enforces `ledger.model`'s 200 characters (SQLite stores any length)."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    entry = ledger_entry(thread.id).model_copy(update={"model": "m" * 300})
    tx = await open_unit(sql_store, thread.id)
    try:
        if sql_store.engine.dialect.name == "postgresql":
            with pytest.raises(InvalidContent, match=r"^ledger_record: the database refused"):
                await SqlLedger(sql_store.engine).record(entry, tx=tx)
                await tx.close(commit=True)  # the row waits for the unit's next statement
        else:
            await SqlLedger(sql_store.engine).record(entry, tx=tx)
    finally:
        await tx.close(commit=False)


async def test_a_missing_parameter_is_refused_not_sent_as_null(sql_store: SqlAgentStore) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(sa.exc.InvalidRequestError, match="required"):
            await direct.write(tx.connection, _RETITLE, {"t": "no id"}, "test")
    finally:
        await tx.close(commit=False)


async def test_parameters_go_through_the_dialects_own_bind_processors(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A datetime reaches SQLite as SQLAlchemy's own string, not sqlite3's default adapter's."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    at = datetime(2026, 12, 1, 8, 0, 0, tzinfo=UTC)

    async def touch() -> list[Any]:
        sent: list[Any] = []

        def before(_conn: Any, _cursor: Any, _sql: str, params: Any, *_args: Any) -> None:
            sent.append(params)

        event.listen(sql_store.engine.sync_engine, "before_cursor_execute", before)
        tx = await open_unit(sql_store, thread.id)
        try:
            sent.clear()
            await direct.write(tx.connection, TOUCH_THREAD, {"tid": thread.id, "at": at}, "test")
        finally:
            event.remove(sql_store.engine.sync_engine, "before_cursor_execute", before)
            await tx.close(commit=True)
        return [tuple(p) if not isinstance(p, dict) else p for p in sent]

    by_driver = await touch()

    async def no_driver(_conn: Any) -> None:
        return None

    monkeypatch.setattr(direct, "_open_driver", no_driver)
    assert by_driver == await touch()
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.updated_at == at


async def test_a_cancelled_driver_call_invalidates_its_connection(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As SQLAlchemy does: a statement still queued in the SQLite worker thread must not leave
    a transaction open on a connection that goes back to the pool."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")

    async def cancelled(*_args: Any) -> driver.Outcome:
        raise asyncio.CancelledError

    tx = await open_unit(sql_store, thread.id)
    try:
        with monkeypatch.context() as patched:
            if sql_store.engine.dialect.name == "sqlite":  # every worker-thread call, pairs too
                patched.setattr(OneHopConnection, "call", cancelled)
            else:  # every asyncpg call from here on: the unit's BEGIN went before
                patched.setattr(asyncpg.Connection, "execute", cancelled)
                patched.setattr(asyncpg.Connection, "fetch", cancelled)
            with pytest.raises(asyncio.CancelledError):
                await SqlLedger(sql_store.engine).record(ledger_entry(thread.id), tx=tx)
                # On SQLite the ledger's write waits for the unit's next call (it is deferred),
                # on PostgreSQL for the next statement: this one, which sends both.
                at = datetime(2030, 1, 1, tzinfo=UTC)
                params = {"tid": thread.id, "at": at}
                await direct.write(tx.connection, TOUCH_THREAD, params, "test")
        assert tx.connection.invalidated
    finally:
        await tx.close(commit=False)
    assert await _ledger_rows(sql_store) == []


def _ledger_rows_for(thread_id: str, *ids: int) -> list[dict[str, Any]]:
    return [{**ledger_entry(thread_id).model_dump(), "id": i} for i in ids]


async def test_a_units_last_write_and_its_commit_are_one_worker_thread_call_on_sqlite(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    sqlite = sql_store.engine.dialect.name == "sqlite"
    commits: list[int] = []

    def on_commit(_conn: Any) -> None:
        commits.append(1)

    event.listen(sql_store.engine.sync_engine, "commit", on_commit)
    try:
        tx = await open_unit(sql_store, thread.id)
        with worker_calls() as calls:
            rows = _ledger_rows_for(thread.id, 1, 2)
            await direct.write_many(tx.connection, _INSERT, rows, "test", last=True)
            await tx.close(commit=True)
    finally:
        event.remove(sql_store.engine.sync_engine, "commit", on_commit)
    assert commits == [1], "SQLAlchemy still commits, and its listeners see it"
    if sqlite:
        assert calls == ["run_many_and_commit"], "the commit rode with the write: no hop of its own"
    assert await _ledger_rows(sql_store) == [("alice", 1, 10), ("alice", 2, 10)]
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.title == "in a unit", "the unit's first write committed"


async def test_a_failed_last_write_leaves_the_unit_to_roll_back_whole(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(StoreError, match=r"^test: database error"):
            # The same id twice: the second row breaks the primary key, before the COMMIT.
            rows = _ledger_rows_for(thread.id, 1, 1)
            await direct.write_many(tx.connection, _INSERT, rows, "test", last=True)
    finally:
        await tx.close(commit=False)
    assert await _ledger_rows(sql_store) == []
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.title is None, "the unit's first write rolled back too"
    # The connection is clean for the next unit: nothing of that one is left open on it.
    tx = await open_unit(sql_store, thread.id)
    await direct.write_many(tx.connection, _INSERT, _ledger_rows_for(thread.id, 1), "t", last=True)
    await tx.close(commit=True)
    assert await _ledger_rows(sql_store) == [("alice", 1, 10)]


async def test_a_commit_that_fails_in_the_same_call_leaves_the_unit_to_roll_back_whole(
    sqlite_url: str,
) -> None:
    """SQLite only: only there does the COMMIT ride with the unit's last write."""
    async with emptied_store(sqlite_url) as sql_store:
        await _a_failed_commit_rolls_back(sql_store)


async def _a_failed_commit_rolls_back(sql_store: SqlAgentStore) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    try:
        # A foreign key checked at COMMIT: the rows go in, then the COMMIT itself fails.
        await tx.connection.exec_driver_sql("PRAGMA defer_foreign_keys=ON")
        step = {"thread_id": thread.id, "run_id": "no-such-run", "position": 0, "name": "x"}
        with pytest.raises(StoreError, match=r"^test: database error \(IntegrityError\)$"):
            await direct.write_many(
                tx.connection, INSERT_STEP, [{**step, "payload": "{}"}], "test", last=True
            )
    finally:
        await tx.close(commit=False)
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.title is None, "the unit's first write rolled back too"
    async with sql_store.engine.connect() as conn:
        steps = await conn.execute(sa.select(sa.func.count()).select_from(run_steps))
        assert steps.scalar() == 0
    tx = await open_unit(sql_store, thread.id)  # the connection is clean for the next unit
    await direct.write_many(tx.connection, _INSERT, _ledger_rows_for(thread.id, 1), "t", last=True)
    await tx.close(commit=True)
    assert await _ledger_rows(sql_store) == [("alice", 1, 10)]


async def test_the_raw_connection_is_read_without_a_greenlet_until_the_connection_is_invalid(
    sql_store: SqlAgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`driver.raw_connection` skips `get_raw_connection`'s greenlet hand-over while SQLAlchemy
    holds the connection, and asks it (which reconnects) once the connection was invalidated."""
    asked: list[int] = []
    original = AsyncConnection.get_raw_connection

    async def counted(self: AsyncConnection) -> Any:
        asked.append(1)
        return await original(self)

    monkeypatch.setattr(AsyncConnection, "get_raw_connection", counted)
    async with sql_store.engine.connect() as conn:
        await conn.execute(sa.select(1))
        held = await driver.raw_connection(conn)
        assert asked == [] and held is conn.sync_connection.connection  # type: ignore[union-attr]
        assert held.driver_connection is not None
        await conn.invalidate()
        await conn.rollback()  # as SQLAlchemy requires before it reconnects
        again = await driver.raw_connection(conn)
        assert asked == [1]
        assert again.driver_connection is not None and again is not held
