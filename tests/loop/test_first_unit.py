"""The run's row commits in its first unit of work, with the user's message and `load:thread`
(one commit less per turn), on SQLite and PostgreSQL. What that must not cost: a run that fails
before that commit is still recorded as failed and can be resumed; one cancelled before it
leaves nothing behind, not even a held connection or SQLite's write turn; a second turn on the
thread meanwhile is refused as busy, not let in."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.core.history import window_history
from bounded_agents.core.ports import RunRequest, ThreadTurnPage, ThreadTurnQuery
from bounded_agents.errors import RunFailed, StoreError, ThreadBusy
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import messages, runs
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv

POLICY = window_history(max_messages=6)


def rid() -> str:
    return str(uuid.uuid4())


class HeldRead(SqlAgentStore):
    """The store itself (so every write joins the unit), its turn read held at a gate, or
    failing once."""

    def __init__(self, inner: SqlAgentStore) -> None:
        super().__init__(inner.engine)
        self.gate: asyncio.Event | None = None
        self.reading = asyncio.Event()
        self.fail_once = False

    async def load_thread_for_turn(
        self, query: ThreadTurnQuery, *, tx: Any = None
    ) -> ThreadTurnPage | None:
        self.reading.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_once:
            self.fail_once = False
            raise StoreError("load_thread_for_turn: database error (OperationalError)")
        return await super().load_thread_for_turn(query, tx=tx)


@pytest.fixture
async def held(env: LoopEnv) -> AsyncIterator[HeldRead]:
    """A `HeldRead` on the test's store. A store of its own: its dispose closes the driver
    connections its reads took (the thread check takes one), then the engine it shares with
    `env.store`, which disposing again later is harmless."""
    store = HeldRead(env.store)
    yield store
    await store.dispose()


async def _run_rows(env: LoopEnv, run_id: str) -> list[Any]:
    async with env.store.engine.connect() as conn:
        found = await conn.execute(
            sa.select(runs.c.status, runs.c.error_code).where(runs.c.id == run_id)
        )
        return list(found.all())


async def _user_messages(env: LoopEnv, thread_id: str) -> list[str]:
    async with env.store.engine.connect() as conn:
        found = await conn.execute(
            sa.select(messages.c.content).where(
                messages.c.thread_id == thread_id, messages.c.role == "user"
            )
        )
        return list(found.scalars())


@SQL_JOURNAL_ONLY
async def test_a_run_that_fails_in_its_first_unit_is_recorded_failed_and_resumes(
    env: LoopEnv, held: HeldRead
) -> None:
    tid = await env.thread([user("q0"), assistant("a0")])
    store = held
    store.fail_once = True
    run_id = rid()
    with pytest.raises(RunFailed):
        await env.loop(EchoModel(), POLICY, store=store).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="lost?", run_id=run_id
        )
    assert await _run_rows(env, run_id) == [("failed", "store_error")]
    assert await _user_messages(env, tid) == ["q0"], "the unit's message rolled back with it"
    record = await env.journal.get_run(run_id)
    assert record is not None and record.request.content == "lost?"

    result = await env.loop(EchoModel(), POLICY, store=store).resume(run_id)

    assert "lost?" in result.message.content
    assert await _run_rows(env, run_id) == [("completed", None)]
    assert await _user_messages(env, tid) == ["q0", "lost?"]


@SQL_JOURNAL_ONLY
async def test_a_run_cancelled_before_its_first_commit_leaves_nothing_held(
    env: LoopEnv, held: HeldRead
) -> None:
    """Cancelled while its first unit is open: no run row, no message, and the next turn on
    the thread gets in at once (the connection and, on SQLite, the write turn were given back)."""
    tid = await env.thread()
    store = held
    store.gate = asyncio.Event()
    run_id = rid()
    turn = asyncio.create_task(
        env.loop(EchoModel(), POLICY, store=store).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="never", run_id=run_id
        )
    )
    await asyncio.wait_for(store.reading.wait(), 10)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn

    assert await _run_rows(env, run_id) == []
    assert await _user_messages(env, tid) == []
    store.gate = None
    result = await asyncio.wait_for(
        env.loop(EchoModel(), POLICY, store=store).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="next", run_id=rid()
        ),
        10,
    )
    assert "next" in result.message.content


@SQL_JOURNAL_ONLY
async def test_a_second_turn_while_the_first_unit_is_open_is_refused_as_busy(
    env: LoopEnv, held: HeldRead
) -> None:
    """The first turn's run row is not committed yet when the second arrives: the second waits
    for it (PostgreSQL's unique index, SQLite's write turn) and is then refused, never let in
    beside it."""
    tid = await env.thread()
    store = held
    store.gate = asyncio.Event()
    first = asyncio.create_task(
        env.loop(EchoModel(delay=0.5), POLICY, store=store).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="first", run_id=rid()
        )
    )
    await asyncio.wait_for(store.reading.wait(), 10)
    second = asyncio.create_task(
        env.loop(EchoModel(), POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="second", run_id=rid()
        )
    )
    await asyncio.sleep(0.1)
    assert not second.done(), "it waits for the open first unit"
    store.gate.set()
    with pytest.raises(ThreadBusy):
        await asyncio.wait_for(second, 10)
    assert "first" in (await asyncio.wait_for(first, 10)).message.content
    assert await _user_messages(env, tid) == ["first"]


def _request(tid: str, content: str = "hello") -> RunRequest:
    return RunRequest(
        run_id=rid(), thread_id=tid, actor_id="alice", agent="helper", content=content
    )


@SQL_JOURNAL_ONLY
async def test_a_cancel_before_the_first_unit_takes_over_leaves_nothing(env: LoopEnv) -> None:
    """The journal on its own: begun with a shared first unit, cancelled inside `keep_alive`
    before any unit took it over. The transaction is rolled back, the journal forgets the run,
    and the thread and (on SQLite) the write turn are free at once."""
    journal = env.journal
    tid = await env.thread()
    request = _request(tid)
    await journal.begin(request, shared_first_unit=True)
    with pytest.raises(asyncio.CancelledError):
        async with journal.keep_alive(request.run_id):
            raise asyncio.CancelledError

    assert await _run_rows(env, request.run_id) == []
    assert await journal.get_run(request.run_id) is None
    assert request.run_id not in journal._first_units and request.run_id not in journal._owners
    other = _request(tid)
    await asyncio.wait_for(journal.begin(other), 10)  # committed at once: the thread was free
    assert await _run_rows(env, other.run_id) == [("running", None)]


@SQL_JOURNAL_ONLY
async def test_a_failure_before_the_first_unit_takes_over_is_recorded_by_fail(
    env: LoopEnv,
) -> None:
    journal = env.journal
    tid = await env.thread()
    request = _request(tid, "kept")
    await journal.begin(request, shared_first_unit=True)
    with pytest.raises(RuntimeError):
        async with journal.keep_alive(request.run_id):
            raise RuntimeError("before the first unit")
    await journal.fail(request.run_id, "internal", "before the first unit", {})

    assert await _run_rows(env, request.run_id) == [("failed", "internal")]
    record = await journal.get_run(request.run_id)
    assert record is not None and record.request.content == "kept"
    assert request.run_id not in journal._first_units and request.run_id not in journal._owners


@SQL_JOURNAL_ONLY
async def test_a_first_unit_committed_without_its_acknowledgement_is_still_ended(
    env: LoopEnv,
) -> None:
    """The first unit's COMMIT landed but the journal never heard (its after-commit hook did
    not run): `fail` finds the row where it meant to insert one, and ends it as any run, so the
    thread is not held for a whole lease."""
    journal = env.journal
    tid = await env.thread()
    request = _request(tid)
    await journal.begin(request, shared_first_unit=True)
    unit = journal._first_units[request.run_id][0]
    unit._tx.after_commit.clear()  # the acknowledgement that never came
    await unit._tx.close(commit=True)
    assert await _run_rows(env, request.run_id) == [("running", None)]

    await journal.fail(request.run_id, "internal", "lost ack", {})

    assert await _run_rows(env, request.run_id) == [("failed", "internal")]
    await asyncio.wait_for(journal.begin(_request(tid)), 10)  # not busy


@SQL_JOURNAL_ONLY
async def test_recording_an_unbegun_failure_is_retried(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database fault that sank the first unit may still be there when `fail` records the
    run: it is retried, as recording any run's end is, rather than losing the run."""
    journal = env.journal
    tid = await env.thread()
    request = _request(tid)
    await journal.begin(request, shared_first_unit=True)
    async with journal.keep_alive(request.run_id):
        pass
    insert = journal._insert_ended_run
    calls = []

    async def flaky(values: dict[str, Any]) -> None:
        calls.append(values["id"])
        if len(calls) == 1:
            raise StoreError("end_run: database error (OperationalError)")
        await insert(values)

    monkeypatch.setattr(journal, "_insert_ended_run", flaky)
    await journal.fail(request.run_id, "store_error", "down", {})

    assert calls == [request.run_id, request.run_id]
    assert await _run_rows(env, request.run_id) == [("failed", "store_error")]
