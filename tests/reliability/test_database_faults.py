"""PostgreSQL connections killed mid-run: the turn completes or fails cleanly, the pool
recovers, and the next turn works. (PostgreSQL only: it is about the server going away.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.durable import SqlJournal
from bounded_agents.errors import RunFailed, StoreError
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.testing import ScriptedProvider, reply
from tests.conftest import emptied_store, terminate_backends
from tests.factories import sql_loop

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url, pool_size=3, max_overflow=0, pool_timeout=5) as store:
        yield store


def _loop(store: SqlAgentStore, model: ScriptedProvider) -> AgentLoop:
    return sql_loop(store, model, window_history(max_messages=6))


async def test_connections_killed_during_the_model_call_do_not_break_the_turn(
    pg_store: SqlAgentStore,
    postgres_url: str,
) -> None:
    killed: list[int] = []

    async def kill_then_answer(_request: ModelRequest) -> ModelResponse:
        killed.append(await terminate_backends(postgres_url))
        return reply("survived")

    loop = _loop(pg_store, ScriptedProvider([kill_then_answer, reply("next")]))
    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="one", run_id=str(uuid.uuid4())
    )
    assert killed and killed[0] >= 1, "the test must actually have killed pooled connections"
    # pool_pre_ping noticed the dead connections and replaced them: the run finished.
    assert result.message.content == "survived"
    second = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="two", run_id=str(uuid.uuid4())
    )
    assert second.message.content == "next"
    thread = await pg_store.get_thread(tid)
    assert thread is not None
    assert [m.content for m in thread.messages] == ["one", "survived", "two", "next"]


async def test_an_unreachable_database_fails_the_turn_with_a_store_error_not_a_traceback(
    pg_store: SqlAgentStore,
) -> None:
    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    broken = SqlAgentStore.from_url(
        "postgresql+asyncpg://postgres@127.0.0.1:1/nowhere", pool_timeout=1
    )
    try:
        loop = AgentLoop(
            store=broken,
            runtime=SqlJournal(pg_store.engine),
            ledger=SqlLedger(pg_store.engine),
            model=ScriptedProvider([reply("x")]),
            agents={
                "helper": AgentDefinition(
                    name="helper", system_prompt="s", policy=window_history(max_messages=6)
                )
            },
        )
        run_id = str(uuid.uuid4())
        # The journal (reachable) checks the thread's owner in the run's insert, so the run
        # begins; its first write to the store fails it, as a one-line StoreError. It is then
        # recorded as failed, resumable, as any run the database failed mid-way.
        with pytest.raises(RunFailed) as failed:
            await loop.run_turn(
                agent="helper", thread_id=tid, actor_id="alice", content="hi", run_id=run_id
            )
        assert isinstance(failed.value.cause, StoreError)
        assert "database unreachable" in str(failed.value.cause)
        record = await SqlJournal(pg_store.engine).get_run(run_id)
        assert record is not None and record.status == "failed"
    finally:
        await broken.dispose()


async def test_checkouts_without_a_ping_retry_a_dead_connection_once(
    pg_store: SqlAgentStore, postgres_url: str
) -> None:
    """The turn's checkouts skip the ping (`retrying_first_statement`): a connection killed
    under the pool costs at most one failed statement, and the operation is retried on a fresh
    connection (the pool then replaces every older one)."""
    from sqlalchemy import event

    from bounded_agents.core.ports import RunRequest

    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(pg_store.engine)
    await pg_store.get_thread_info(tid)  # connections in the pool
    assert await terminate_backends(postgres_url) >= 1
    failures: list[object] = []

    def on_error(context: object) -> None:
        failures.append(context)

    event.listen(pg_store.engine.sync_engine, "handle_error", on_error)
    try:
        assert await pg_store.get_thread_info(tid) is not None
        request = RunRequest(
            run_id=str(uuid.uuid4()), thread_id=tid, actor_id="alice", agent="helper", content="x"
        )
        ctx = await journal.begin(request)
        handed: list[object] = []

        async def write(tx: object) -> int:
            handed.append(tx)
            return 1

        async with ctx.unit_of_work():
            await ctx.step("persist:user", write, writes=True)
        assert handed and handed[0] is not None
        await journal.complete(request.run_id, {})
    finally:
        event.remove(pg_store.engine.sync_engine, "handle_error", on_error)
    assert len(failures) <= 1, failures


async def test_a_connection_asyncpg_left_mid_state_is_retried_like_a_dead_one(
    pg_store: SqlAgentStore,
) -> None:
    """The test above failed once on SQLAlchemy 2.0: the killed backend's goodbye reached asyncpg
    at the wrong moment and the first statement raised `InternalClientError` ("cannot switch to
    state 12"), which SQLAlchemy 2.0 neither wraps nor takes for a disconnect, so it escaped the
    retry. Here every first statement of a read and of a write transaction raises it once."""
    from sqlalchemy import event

    from bounded_agents.core.ports import RunRequest

    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    journal = SqlJournal(pg_store.engine)
    raised: list[str] = []

    def left_mid_state(_cursor: object, statement: str, *_args: object) -> None:
        """Fail, once each, the first statement (the read) and the first on `runs` (begin)."""
        if not raised or ("runs" in statement and all("runs" not in s for s in raised)):
            raised.append(statement)
            raise asyncpg.InternalClientError("cannot switch to state 12")

    event.listen(pg_store.engine.sync_engine, "do_execute", left_mid_state)
    try:
        assert await pg_store.get_thread_info(tid) is not None
        request = RunRequest(
            run_id=str(uuid.uuid4()), thread_id=tid, actor_id="alice", agent="helper", content="x"
        )
        await journal.begin(request)
    finally:
        event.remove(pg_store.engine.sync_engine, "do_execute", left_mid_state)
    assert len(raised) == 2, raised
    assert (await journal.get_run(request.run_id)) is not None
