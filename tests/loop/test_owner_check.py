"""A turn handed no thread sends no ownership read when the runtime checks the owner in the
run's insert (`SqlJournal`, issue 37), and still refuses another actor's thread; a runtime that
does not (`InlineRuntime`) is checked by the loop's own read, as before. SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import event

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.ports import DurableContext, RunRequest
from bounded_agents.durable import InlineRuntime, SqlJournal
from bounded_agents.errors import ThreadNotFound
from bounded_agents.store.engine import on_citus
from bounded_agents.testing import ScriptedProvider, reply
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv


def _statements(env: LoopEnv) -> tuple[list[str], Any]:
    sent: list[str] = []

    def on_statement(*args: Any) -> None:
        sent.append(" ".join(str(args[2]).split()).upper())

    return sent, on_statement


async def _turn(loop: AgentLoop, tid: str, actor: str = "alice", thread: Any = None) -> Any:
    return await loop.run_turn(
        agent="helper",
        thread_id=tid,
        actor_id=actor,
        content="go",
        run_id=str(uuid.uuid4()),
        thread=thread,
    )


@SQL_JOURNAL_ONLY
async def test_a_turn_without_its_thread_reads_no_thread_and_refuses_a_stranger(
    env: LoopEnv,
) -> None:
    tid = await env.thread()
    loop = env.loop(ScriptedProvider([reply("one"), reply("two")]), window_history(10))
    sent, on_statement = _statements(env)
    sync = env.store.engine.sync_engine
    event.listen(sync, "before_cursor_execute", on_statement)
    try:
        result = await _turn(loop, tid)
    finally:
        event.remove(sync, "before_cursor_execute", on_statement)
    assert result.message.content == "one"
    # The ownership read (`get_thread_info`'s statement): the thread's row by its id.
    reads = [i for i, s in enumerate(sent) if s.startswith("SELECT THREADS.ID, THREADS.ACTOR_ID")]
    inserts = [i for i, s in enumerate(sent) if s.startswith("INSERT INTO RUNS")]
    assert len(inserts) == 1
    if on_citus(env.store.engine):  # the journal's read, just before the insert, in its tx
        assert reads == [inserts[0] - 1]
    else:  # none at all: the insert's own WHERE checks the owner
        assert reads == []
        assert "FROM THREADS WHERE" in sent[inserts[0]]
    with pytest.raises(ThreadNotFound):
        await _turn(loop, tid, actor="mallory")
    with pytest.raises(ThreadNotFound):
        await _turn(loop, str(uuid.uuid4()))


@SQL_JOURNAL_ONLY
async def test_a_runtime_that_does_not_check_the_owner_is_checked_by_the_loop(
    env: LoopEnv,
) -> None:
    tid = await env.thread()
    loop = env.loop(ScriptedProvider([reply("one")]), window_history(10), runtime=InlineRuntime())
    with pytest.raises(ThreadNotFound):
        await _turn(loop, tid, actor="mallory")
    assert (await _turn(loop, tid)).message.content == "one"


@SQL_JOURNAL_ONLY
async def test_a_turn_handed_its_thread_reads_no_owner_even_on_citus(env: LoopEnv) -> None:
    """The HTTP route loads the thread and passes it: the loop checks it in memory and tells
    the journal (`owner_checked`), so no owner read is sent, on Citus either (where the journal
    would otherwise read it before the run's insert)."""
    tid = await env.thread()
    thread = await env.store.get_thread_info(tid)
    assert thread is not None
    loop = env.loop(ScriptedProvider([reply("one")]), window_history(10))
    sent, on_statement = _statements(env)
    sync = env.store.engine.sync_engine
    event.listen(sync, "before_cursor_execute", on_statement)
    try:
        result = await _turn(loop, tid, thread=thread)
    finally:
        event.remove(sync, "before_cursor_execute", on_statement)
    assert result.message.content == "one"
    owner_reads = [s for s in sent if s.startswith("SELECT THREADS.") and "PAGE" not in s]
    assert owner_reads == []
    with pytest.raises(ThreadNotFound):  # a thread of another actor's, handed in: refused
        await _turn(loop, tid, actor="mallory", thread=thread)


class _AuditedJournal(SqlJournal):
    """A journal subclass written to the port's `begin` signature (found by review: the loop
    once passed it a keyword of its own, and every turn handed its thread failed)."""

    async def begin(
        self, request: RunRequest, *, shared_first_unit: bool = False
    ) -> DurableContext:
        return await super().begin(request, shared_first_unit=shared_first_unit)


@SQL_JOURNAL_ONLY
async def test_a_journal_subclass_with_the_ports_begin_answers_turns_handed_their_thread(
    env: LoopEnv,
) -> None:
    tid = await env.thread()
    thread = await env.store.get_thread_info(tid)
    journal = _AuditedJournal(env.store.engine)
    loop = env.loop(
        ScriptedProvider([reply("one"), reply("two")]), window_history(10), runtime=journal
    )
    assert (await _turn(loop, tid, thread=thread)).message.content == "one"
    assert (await _turn(loop, tid)).message.content == "two"
    with pytest.raises(ThreadNotFound):
        await _turn(loop, tid, actor="mallory")
