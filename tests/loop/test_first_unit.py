"""The run's row commits in its first unit of work, with the user's message and `load:thread`
(one commit less per turn), on SQLite and PostgreSQL. What that must not cost: a run that fails
before that commit is still recorded as failed and can be resumed; one cancelled before it
leaves nothing behind, not even a held connection or SQLite's write turn; a second turn on the
thread meanwhile is refused as busy, not let in."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from app.core.history import window_history
from app.core.ports import ThreadTurnPage, ThreadTurnQuery
from app.errors import RunFailed, StoreError, ThreadBusy
from app.providers.echo import EchoModel
from app.store import SqlAgentStore
from app.store.schema import messages, runs
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
    env: LoopEnv,
) -> None:
    tid = await env.thread([user("q0"), assistant("a0")])
    store = HeldRead(env.store)
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
async def test_a_run_cancelled_before_its_first_commit_leaves_nothing_held(env: LoopEnv) -> None:
    """Cancelled while its first unit is open: no run row, no message, and the next turn on
    the thread gets in at once (the connection and, on SQLite, the write turn were given back)."""
    tid = await env.thread()
    store = HeldRead(env.store)
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
    env: LoopEnv,
) -> None:
    """The first turn's run row is not committed yet when the second arrives: the second waits
    for it (PostgreSQL's unique index, SQLite's write turn) and is then refused, never let in
    beside it."""
    tid = await env.thread()
    store = HeldRead(env.store)
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
