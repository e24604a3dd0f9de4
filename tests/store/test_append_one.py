"""A run's one message (every message the loop writes) in one round trip: one statement on
PostgreSQL (the seq bump as a data-modifying CTE), one worker-thread call on SQLite (the bump and
the insert together). The guard against storing a run's message twice holds on both ways a
statement may take: the driver's, inside a unit of work, and SQLAlchemy's, on an instrumented
engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from bounded_agents.core.messages import MAX_TOOL_ARGUMENT_DEPTH, Message, ToolCall
from bounded_agents.core.ports import ThreadTurnQuery
from bounded_agents.errors import DuplicateMessage, InvalidContent, ThreadNotFound
from bounded_agents.store import SqlAgentStore, direct
from bounded_agents.store.engine import on_citus
from bounded_agents.store.schema import messages, threads
from bounded_agents.store.tx import open_write
from tests.conftest import emptied_store, worker_calls
from tests.factories import assistant, nested, open_unit, tool_answer, user

WAYS = ["driver", "sqlalchemy"]


@contextmanager
def _instrumented(store: SqlAgentStore, way: str) -> Iterator[None]:
    """On the "sqlalchemy" way, an `after_cursor_execute` listener (what OpenTelemetry adds):
    the store then sends every statement through SQLAlchemy's Core execute."""
    if way == "driver":
        yield
        return

    def after(*_args: Any) -> None:
        return None

    event.listen(store.engine.sync_engine, "after_cursor_execute", after)
    try:
        yield
    finally:
        event.remove(store.engine.sync_engine, "after_cursor_execute", after)


async def _append_in_unit(
    store: SqlAgentStore, thread_id: str, message: Message, *, touch_thread: bool = True
) -> list[Message]:
    """`message` appended in a unit of work of its own, committed. `touch_thread=False`: the
    unit's first statement leaves the thread row alone, so the append's own statement is the
    one that waits for another transaction's lock on it."""
    if touch_thread:
        tx = await open_unit(store, thread_id)
    else:
        tx = await open_write(store.engine, "test", lambda conn: conn.execute(sa.select(1)))
    try:
        stored = await store.append_messages(thread_id, [message], tx=tx)
    except BaseException:
        await tx.close(commit=False)
        raise
    await tx.close(commit=True)
    return stored


@pytest.fixture(params=WAYS)
async def way(request: pytest.FixtureRequest, sql_store: SqlAgentStore) -> AsyncIterator[str]:
    with _instrumented(sql_store, request.param):
        yield str(request.param)


async def _rows(store: SqlAgentStore, thread_id: str) -> list[tuple[Any, ...]]:
    async with store.engine.connect() as conn:
        found = await conn.execute(
            sa.select(messages.c.seq, messages.c.role, messages.c.content, messages.c.tokens_before)
            .where(messages.c.thread_id == thread_id)
            .order_by(messages.c.seq)
        )
        return [tuple(r) for r in found]


async def _thread_counters(store: SqlAgentStore, thread_id: str) -> tuple[int, int]:
    async with store.engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(threads.c.last_seq, threads.c.total_tokens).where(
                    threads.c.id == thread_id
                )
            )
        ).one()
    return int(row[0]), int(row[1])


async def test_a_runs_message_gets_the_next_seq_and_the_running_token_total(
    sql_store: SqlAgentStore, way: str
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user("q0"), tool_answer(0, 4000)])
    before_seq, before_tokens = await _thread_counters(sql_store, thread.id)
    stored = await _append_in_unit(sql_store, thread.id, user("q1", run_id="r1"))
    assert [m.seq for m in stored] == [before_seq + 1] == [3]
    rows = await _rows(sql_store, thread.id)
    assert rows[-1] == (3, "user", "q1", before_tokens)
    last_seq, total = await _thread_counters(sql_store, thread.id)
    assert last_seq == 3 and total > before_tokens
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.messages[-1].run_id == "r1"


async def test_a_runs_message_stored_twice_is_a_duplicate_and_changes_nothing(
    sql_store: SqlAgentStore, way: str
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await _append_in_unit(sql_store, thread.id, assistant("first", run_id="r1"))
    counters = await _thread_counters(sql_store, thread.id)
    with pytest.raises(DuplicateMessage):
        await _append_in_unit(sql_store, thread.id, assistant("again", run_id="r1"))
    with pytest.raises(DuplicateMessage):
        await sql_store.append_messages(thread.id, [assistant("again", run_id="r1")])
    assert await _thread_counters(sql_store, thread.id) == counters
    assert [r[2] for r in await _rows(sql_store, thread.id)] == ["first"]


async def test_a_runs_message_for_an_unknown_thread_is_thread_not_found(
    sql_store: SqlAgentStore, way: str
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    try:
        with pytest.raises(ThreadNotFound):
            await sql_store.append_messages("no-such-thread", [user("q", run_id="r")], tx=tx)
    finally:
        await tx.close(commit=False)


async def test_racing_appends_of_one_runs_message_store_it_once(
    sql_store: SqlAgentStore, db_url: str, way: str
) -> None:
    """The second append waits for the first's lock on the thread row. On PostgreSQL its guard
    (a NOT EXISTS in the statement's snapshot) cannot see the first's message, so the unique
    index refuses it: that, too, must be `DuplicateMessage`, not a store error."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    other = SqlAgentStore.from_url(db_url)  # another process's engine
    try:
        with _instrumented(other, way):
            first = await open_unit(sql_store, thread.id)
            await sql_store.append_messages(thread.id, [assistant("a", run_id="r1")], tx=first)
            second = asyncio.create_task(
                _append_in_unit(other, thread.id, assistant("b", run_id="r1"), touch_thread=False)
            )
            await asyncio.sleep(0.3)  # the second is waiting (for the row lock, or SQLite's)
            assert not second.done()
            await first.close(commit=True)
            with pytest.raises(DuplicateMessage):
                await second
    finally:
        await other.dispose()
    assert [r[2] for r in await _rows(sql_store, thread.id)] == ["a"]
    assert (await _thread_counters(sql_store, thread.id))[0] == 1


async def test_a_runs_message_is_one_round_trip(sql_store: SqlAgentStore) -> None:
    """Counted where it is cheap to count: statements sent on PostgreSQL, worker-thread calls
    on SQLite (where the bump and the insert are two statements in one call). On Citus it is
    two statements, each on the thread's shard (tests/store/test_citus_routing.py)."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    tx = await open_unit(sql_store, thread.id)
    sent: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    event.listen(sql_store.engine.sync_engine, "before_cursor_execute", before)
    try:
        with worker_calls() as calls:
            await sql_store.append_messages(thread.id, [user("q", run_id="r")], tx=tx)
    finally:
        event.remove(sql_store.engine.sync_engine, "before_cursor_execute", before)
        await tx.close(commit=True)
    if sql_store.engine.dialect.name == "sqlite":
        assert calls == ["run_together"], calls
        assert len(sent) == 2, sent
    elif on_citus(sql_store.engine):  # two statements, each routed to the thread's shard
        assert [s.split()[0] for s in sent] == ["UPDATE", "INSERT"], sent
    else:
        assert len(sent) == 1 and sent[0].startswith("WITH bumped AS"), sent


async def test_on_sqlite_every_statement_announced_is_one_the_database_ran(
    sqlite_url: str,
) -> None:
    """A message's bump and insert go in one worker-thread call, both announced first. The
    insert runs even when the bump found no row (it then inserts nothing, by `changes()`), so
    a listener that logs, counts or replays statements never sees one that did not run."""
    async with emptied_store(sqlite_url) as store:
        thread = await store.create_thread(actor_id="alice", agent="helper")
        await _append_in_unit(store, thread.id, assistant("first", run_id="r1"))
        tx = await open_unit(store, thread.id)
        announced: list[str] = []
        ran: list[str] = []

        def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            announced.append(statement)

        driver = (await direct.raw_connection(tx.connection)).driver_connection
        await driver.set_trace_callback(ran.append)
        event.listen(store.engine.sync_engine, "before_cursor_execute", before)
        try:
            with pytest.raises(DuplicateMessage):
                await store.append_messages(thread.id, [assistant("again", run_id="r1")], tx=tx)
        finally:
            event.remove(store.engine.sync_engine, "before_cursor_execute", before)
            await driver.set_trace_callback(None)
            await tx.close(commit=False)
        assert [s.split()[0] for s in announced] == ["UPDATE", "INSERT", "SELECT"]
        # SQLite's trace also reports, as `-- ...` comments, what runs inside a statement: the
        # search index's triggers and FTS5's own reads (migration 0011), not statements sent.
        statements = [s for s in ran if not s.startswith("--")]
        assert [s.split()[0] for s in statements] == ["UPDATE", "INSERT", "SELECT"], ran
        assert [r[2] for r in await _rows(store, thread.id)] == ["first"]


@pytest.mark.parametrize("depth", [200, 1000])
async def test_a_tool_call_nested_too_deep_to_read_back_is_refused_and_the_thread_stays_readable(
    sql_store: SqlAgentStore, depth: int
) -> None:
    """pydantic writes JSON about 250 levels deep but reads back only about 200: stored, such a
    message would make every later read of the thread fail. The store refuses it as the loop
    refuses a model's (`MAX_TOOL_ARGUMENT_DEPTH`), naming the nesting, and writes nothing."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    deep = ToolCall(id="c", name="f", arguments={"data": nested(depth)})
    fine = ToolCall(id="c", name="f", arguments={"data": nested(MAX_TOOL_ARGUMENT_DEPTH - 2)})
    for batch in (
        [assistant("run message", run_id="r1").model_copy(update={"tool_calls": [deep]})],
        [user("q"), assistant("a").model_copy(update={"tool_calls": [deep]})],
    ):
        with pytest.raises(InvalidContent, match="nest deeper than"):
            await sql_store.append_messages(thread.id, batch)
    stored = await sql_store.append_messages(
        thread.id, [assistant("ok", run_id="r2").model_copy(update={"tool_calls": [fine]})]
    )
    assert [m.seq for m in stored] == [1]
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=thread.id))
    assert page is not None and page.messages[0].tool_calls == [fine]
