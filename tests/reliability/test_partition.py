"""A PostgreSQL that stops answering: packets dropped without a reset, as in a network partition
(a TCP proxy in the test that stops forwarding). Without a statement timeout a turn waited for
the kernel's retransmits, a quarter of an hour; with `AGENT_DB_STATEMENT_TIMEOUT` it fails with a
one-line `StoreError` (503 over HTTP) within a few timeouts, keeps what it had committed, and
the thread takes its next turn once the database answers again."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.errors import RunFailed, StoreError
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.migrate import MIGRATION_LOCK_KEY
from bounded_agents.testing import ScriptedProvider, reply
from tests.conftest import emptied_store
from tests.factories import sql_loop

pytestmark = pytest.mark.postgres

TIMEOUT = 1.0
"""The statement timeout of these tests, in seconds."""


class Partition:
    """A TCP proxy to PostgreSQL that forwards until `cut` is set, then drops every byte both
    ways without closing anything, as a partitioned network does; new connections are
    accepted and hear nothing."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.cut = False
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                if not self.cut:
                    sink.write(data)
                    await sink.drain()
        finally:
            sink.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture
async def partition(postgres_url: str) -> AsyncIterator[Partition]:
    url = make_url(postgres_url)
    proxy = Partition(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def pg_store(postgres_url: str, partition: Partition) -> AsyncIterator[SqlAgentStore]:
    url = make_url(postgres_url).set(host="127.0.0.1", port=partition.port)
    async with emptied_store(
        url.render_as_string(hide_password=False), pool_size=3, statement_timeout=TIMEOUT
    ) as store:
        yield store


def _loop(store: SqlAgentStore, model: ScriptedProvider) -> AgentLoop:
    return sql_loop(store, model, window_history(max_messages=6))


async def test_a_turn_on_a_database_that_stopped_answering_fails_with_a_store_error_in_time(
    pg_store: SqlAgentStore, partition: Partition
) -> None:
    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id
    model = ScriptedProvider([reply("never")])
    partition.cut = True
    started = time.monotonic()
    with pytest.raises(StoreError, match="did not answer in time"):
        async with asyncio.timeout(60):  # without the statement timeout: this fires instead
            await _loop(pg_store, model).run_turn(
                agent="helper", thread_id=tid, actor_id="alice", content="q", run_id="r1"
            )
    assert time.monotonic() - started < 15 * TIMEOUT  # 3 s measured: a read, its retry, a connect
    assert model.calls == [], "nothing was committed, so the model was never called"


async def test_a_partition_during_the_model_call_keeps_the_question_and_the_next_turn_answers(
    pg_store: SqlAgentStore, partition: Partition
) -> None:
    tid = (await pg_store.create_thread(actor_id="alice", agent="helper")).id

    async def cut_then_answer(_request: ModelRequest) -> ModelResponse:
        partition.cut = True
        return reply("lost in the partition")

    model = ScriptedProvider([cut_then_answer, reply("after")])
    loop = _loop(pg_store, model)
    started = time.monotonic()
    with pytest.raises(RunFailed, match="did not answer in time"):
        async with asyncio.timeout(60):
            await loop.run_turn(
                agent="helper", thread_id=tid, actor_id="alice", content="one", run_id="r1"
            )
    # About six timeouts (6.0 s measured; 9.7 s while the run's end was tried four times after
    # a timeout, `worth_retrying`): the answer's lease check, closing its dead connection,
    # the unit's retry on a new one, connecting to record the failure. Bounded well under the
    # 60 s hang.
    assert time.monotonic() - started < 15 * TIMEOUT
    partition.cut = False
    second = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="two", run_id=str(uuid.uuid4())
    )
    assert second.message.content == "after"
    thread = await pg_store.get_thread(tid)
    assert thread is not None
    # The question committed before the model call stays; the answer the partition took was
    # never stored (its run failed), and the next turn carries on after it.
    assert [m.content for m in thread.messages] == ["one", "two", "after"]
    assert len(model.calls) == 2


async def test_start_up_migrations_wait_for_the_lock_past_the_statement_timeout(
    postgres_url: str,
) -> None:
    """`AGENT_MIGRATE_ON_START` migrates through the store (`create_schema`): a replica that
    waits for another one's migration lock, or a migration rewriting a large table, is not a
    database that stopped answering. Held to the timeout, it failed start-up after 1 s."""
    store = SqlAgentStore.from_url(postgres_url, statement_timeout=TIMEOUT)
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        migrating = asyncio.create_task(store.create_schema())
        await asyncio.sleep(3 * TIMEOUT)
        assert not migrating.done(), migrating  # still waiting for the lock, not failed
        await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
        async with asyncio.timeout(60):
            await migrating
        # The store's own statements are held to it.
        with pytest.raises(StoreError, match="did not answer in time"):
            async with wrap_db_errors("sleep"), store.engine.connect() as conn:
                await conn.execute(sa.text("SELECT pg_sleep(:s)"), {"s": 3 * TIMEOUT})
    finally:
        await holder.close()
        await store.dispose()
