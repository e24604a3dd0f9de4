"""On a Citus cluster, every statement of a turn goes to one shard: Citus says so itself.

`citus_stat_statements` (Citus's statistics of the statements it ran, on the coordinator) keeps
the value of the distribution column for a statement it routed to one shard, and none for a
statement it sent to every shard or ran through the coordinator (an INSERT ... SELECT pulling
rows back). So the statistics are reset, real turns run (plain with a quota, with a tool call,
folding, past a dead process's run, resumed), and every statement Citus ran for them must
carry a partition key. Statements are told apart by Citus's figures, not by their SQL: the SQL
is only printed when one fails. (`EXPLAIN` would not do: Citus cannot plan a statement whose
parameters are unbound, and with them inlined it plans some statements, the data-modifying
CTEs, otherwise than it runs them.)
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import ToolCall
from bounded_agents.core.ports import RunRequest
from bounded_agents.durable import SqlJournal
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.clock import db_now
from bounded_agents.store.engine import on_citus
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import runs
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.conftest import emptied_store
from tests.factories import assistant, user
from tests.http.conftest import (
    ALICE,
    HelperAgent,
    http_settings,
    make_app,
    new_thread,
    open_client,
    post,
)
from tests.loop.conftest import CountingSummarizer, LoopEnv

pytestmark = pytest.mark.citus

HISTORY = [m for i in range(3) for m in (user(f"q{i}"), assistant(f"a{i}"))]


@dataclass(frozen=True)
class Ran:
    """One row of `citus_stat_statements`: a statement, how Citus ran it, how often."""

    executor: str
    partition_key: str | None
    calls: int
    query: str

    def __str__(self) -> str:
        return f"{self.executor} x{self.calls}: {' '.join(self.query.split())[:160]}"


class Statements:
    """Citus's statistics of this database's statements since `reset()`."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def reset(self) -> None:
        await self._conn.execute("SELECT citus_stat_statements_reset()")

    async def ran(self) -> list[Ran]:
        rows = await self._conn.fetch(
            "SELECT executor::text, partition_key, calls, query FROM citus_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return [Ran(r["executor"], r["partition_key"], r["calls"], r["query"]) for r in rows]

    async def fanned_out(self) -> list[Ran]:
        """What Citus ran without routing it to one shard: none, on a turn's path."""
        return [r for r in await self.ran() if r.partition_key is None]


@pytest.fixture
async def store(citus_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(citus_url) as store:
        yield store


@pytest.fixture
async def stats(citus_url: str) -> AsyncIterator[Statements]:
    conn = await asyncpg.connect(citus_url.replace("+asyncpg", ""))
    try:
        yield Statements(conn)
    finally:
        await conn.close()


@pytest.fixture
def env(store: SqlAgentStore) -> LoopEnv:
    return LoopEnv(store, SqlJournal(store.engine, lease_seconds=60), SqlLedger(store.engine))


def rid() -> str:
    return str(uuid.uuid4())


async def _routed(stats: Statements, at_least: int) -> None:
    """Every statement since the reset went to one shard, and there were `at_least` calls of
    them (a turn that ran no statement would pass vacuously)."""
    ran = await stats.ran()
    fanned = [str(r) for r in ran if r.partition_key is None]
    assert not fanned, "\n".join(fanned)
    assert sum(r.calls for r in ran) >= at_least, [str(r) for r in ran]


async def test_a_plain_turn_under_a_quota_sends_every_statement_to_one_shard(
    env: LoopEnv, stats: Statements
) -> None:
    """The quota's reservation and release and the ledger's booking go to the actor's shard,
    everything else to the thread's: the two colocation groups."""
    tid = await env.thread(HISTORY)
    loop = env.loop(EchoModel(), window_history(max_messages=20), quota=10**9)
    assert on_citus(env.store.engine)
    await stats.reset()
    await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="hello", run_id=rid()
    )
    await _routed(stats, at_least=8)
    keys = {r.partition_key for r in await stats.ran()}
    assert keys == {tid, "alice"}, keys


async def test_a_turn_with_a_tool_call_sends_every_statement_to_one_shard(
    env: LoopEnv, stats: Statements
) -> None:
    async def lookup(q: str) -> str:
        return f"found {q}"

    calls = [ToolCall(id="c1", name="lookup", arguments={"q": "a"})]
    model = ScriptedProvider([reply("", tool_calls=calls), reply("done")])
    tid = await env.thread(HISTORY)
    loop = env.loop(
        model, window_history(max_messages=20), tools={"lookup": FunctionTool("lookup", lookup)}
    )
    run_id = rid()
    await stats.reset()
    await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="look", run_id=run_id
    )
    await _routed(stats, at_least=10)
    assert "tool:1:c1" in await env.step_names(run_id)


async def test_a_turn_searching_its_history_sends_every_statement_to_one_shard(
    env: LoopEnv, stats: Statements
) -> None:
    """The search names the thread: its ranked full-text query goes to the thread's shard."""
    from bounded_agents.core.search import SEARCH_TOOL_NAME, HistorySearchTool

    call = ToolCall(id="c1", name=SEARCH_TOOL_NAME, arguments={"query": "q0 a1"})
    model = ScriptedProvider([reply("", tool_calls=[call]), reply("done")])
    tid = await env.thread(HISTORY)
    tools = {SEARCH_TOOL_NAME: HistorySearchTool(env.store)}
    loop = env.loop(model, window_history(max_messages=2), tools=tools)
    await stats.reset()
    await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="find", run_id=rid()
    )
    await _routed(stats, at_least=10)
    assert any("search_vector" in r.query for r in await stats.ran())
    assert '"content": "q0"' in model.calls[1].messages[-1].content


async def test_folding_turns_send_every_statement_to_one_shard(
    env: LoopEnv, stats: Statements
) -> None:
    summarizer = CountingSummarizer()
    tid = await env.thread(HISTORY)
    loop = env.loop(EchoModel(), window_history(max_messages=2, summarize=summarizer))
    await stats.reset()
    for i in range(2):  # the second turn reads the summary the first one stored
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=f"t{i}", run_id=rid()
        )
    assert summarizer.calls, "the turn folded"
    await _routed(stats, at_least=16)


async def test_a_turn_past_a_dead_run_is_routed_and_a_resume_fans_out_only_by_run_id(
    env: LoopEnv, stats: Statements
) -> None:
    """The next turn on a thread a dead process holds releases its run by the thread. A resume
    starts from a run id alone: its lookups by that id (the run's record, the journal's thread,
    the ledger rows of its report) reach every shard, three statements once per resume, as
    docs/scale-out.md says; everything after them names the thread."""
    tid = await env.thread(HISTORY)
    async with env.store.engine.begin() as conn:
        await conn.execute(
            runs.insert().values(
                id=rid(),
                thread_id=tid,
                actor_id="alice",
                agent="helper",
                status="running",
                request="{}",
                owner="gone",
                lease_expires_at=datetime.now(UTC) - timedelta(minutes=5),
            )
        )
    failing = env.loop(ScriptedProvider([ProviderError("down")]), window_history(max_messages=20))
    run_id = rid()
    await stats.reset()
    with pytest.raises(RunFailed):
        await failing.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
        )
    await _routed(stats, at_least=4)

    await stats.reset()
    resumed = env.loop(ScriptedProvider([reply("answer")]), window_history(max_messages=20))
    await resumed.resume(run_id)
    fanned = await stats.fanned_out()
    assert sum(r.calls for r in fanned) == 3, [str(r) for r in fanned]
    assert {r.executor for r in fanned} == {"adaptive"}, "a read of every shard, nothing pulled"
    assert len([r for r in await stats.ran() if r.partition_key is not None]) >= 5


async def test_the_check_sees_a_lookup_by_run_id_reach_every_shard(
    env: LoopEnv, stats: Statements
) -> None:
    """What the tests above would catch: a statement without the thread."""
    tid = await env.thread()
    run_id = rid()
    await env.loop(EchoModel(), window_history(max_messages=20)).run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="hi", run_id=run_id
    )
    await stats.reset()
    assert await env.journal.get_run(run_id) is not None
    [fanned] = await stats.fanned_out()
    assert fanned.calls == 1 and fanned.executor == "adaptive"


async def test_the_window_and_the_turns_over_http_send_every_statement_to_one_shard(
    store: SqlAgentStore, stats: Statements
) -> None:
    """The HTTP paths of a turn and of `GET /threads/{id}/window`, with the module's own
    journal and ledger (in the store's database)."""
    from bounded_agents.module import AgentModule

    module = AgentModule.for_root(
        store=store,
        model=EchoModel(),
        agents=[HelperAgent],
        history={"max_messages": 4, "summarize": True},
        settings=http_settings(),
    )
    async with AsyncExitStack() as stack:
        client = await open_client(stack, make_app(module))
        thread = await new_thread(client)
        await stats.reset()
        for content in ["one", "/read_page https://example.org/citus", "three", "four"]:
            answered = await post(client, thread, content)
            assert answered.status_code == 200, answered.text
        window = await client.get(f"/threads/{thread}/window", headers=ALICE)
        assert window.status_code == 200 and window.json()["summarizes"], window.text
        await _routed(stats, at_least=40)


async def test_a_sweep_and_a_prune_reach_every_shard_only_to_find_their_runs(
    env: LoopEnv, stats: Statements
) -> None:
    """The one read that finds the runs (lapsed, or prunable) goes to every shard, as it must:
    the runs could be anywhere. Each claim, mark and delete after it names its run's thread,
    and goes to that shard alone (no lock across shards, what Citus refuses)."""
    loop = env.loop(EchoModel(), window_history(max_messages=20))
    threads = [await env.thread() for _ in range(6)]
    done = [
        (
            await loop.run_turn(
                agent="helper", thread_id=t, actor_id="alice", content="hi", run_id=rid()
            )
        ).run_id
        for t in threads
    ]
    dead = SqlJournal(env.store.engine)
    lapsed = []
    for t in threads[:4]:
        request = RunRequest(
            run_id=rid(), thread_id=t, actor_id="alice", agent="helper", content="q"
        )
        await dead.begin(request)
        lapsed.append(request.run_id)
    async with env.store.engine.begin() as conn:
        await conn.execute(
            runs.update().where(runs.c.id.in_(lapsed)).values(lease_expires_at=db_now(-1))
        )
        await conn.execute(runs.update().where(runs.c.id.in_(done)).values(updated_at=db_now(-60)))

    await stats.reset()
    assert sorted(await env.journal.claim_expired(10)) == sorted(lapsed)
    [found] = await stats.fanned_out()
    assert found.calls == 1 and found.executor == "adaptive"
    claims = [r for r in await stats.ran() if r.partition_key is not None]
    assert sum(r.calls for r in claims) == len(lapsed)

    await stats.reset()
    assert await env.journal.prune_steps(30, limit=100) == len(done)
    [found] = await stats.fanned_out()
    assert found.calls == 1 and found.executor == "adaptive"
    routed = [r for r in await stats.ran() if r.partition_key is not None]
    assert {r.partition_key for r in routed} == set(threads)
    assert sum(r.calls for r in routed) == 2 * len(threads)  # a mark and a delete per thread


async def test_erasing_a_message_and_a_thread_sends_every_statement_to_one_shard(
    store: SqlAgentStore, stats: Statements
) -> None:
    """The erasure routes (`bounded_agents.store.erase`): the lock, the live-run check and every
    delete name the thread."""
    from bounded_agents.module import AgentModule

    module = AgentModule.for_root(
        store=store,
        model=EchoModel(),
        agents=[HelperAgent],
        history={"max_messages": 4, "fold_messages": 4, "summarize": True},
        settings=http_settings(),
    )
    async with AsyncExitStack() as stack:
        client = await open_client(stack, make_app(module))
        thread = await new_thread(client)
        for content in ["one", "two", "three", "four", "five"]:
            answered = await post(client, thread, content)
            assert answered.status_code == 200, answered.text
        await stats.reset()
        erased = await client.delete(f"/threads/{thread}/messages/1", headers=ALICE)
        assert erased.status_code == 204, erased.text
        gone = await client.delete(f"/threads/{thread}", headers=ALICE)
        assert gone.status_code == 204, gone.text
        await _routed(stats, at_least=15)
