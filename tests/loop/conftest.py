"""Loop fixtures: a real SQL store, journal and ledger on each backend, and counting doubles."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bounded_agents.core.history import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
)
from bounded_agents.core.loop import AgentDefinition, AgentLoop, ToolBinding
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import (
    ModelProvider,
    RunRequest,
    Thread,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    Usage,
)
from bounded_agents.durable import SqlJournal
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import run_steps, runs


class FullReadStore:
    """The same database without the bounded read: the loop must fall back to `get_thread`."""

    def __init__(self, inner: SqlAgentStore) -> None:
        self.inner = inner
        self.full_reads = 0

    async def create_thread(self, *, actor_id: str, agent: str, title: str | None = None) -> Thread:
        return await self.inner.create_thread(actor_id=actor_id, agent=agent, title=title)

    async def get_thread(self, thread_id: str) -> Thread | None:
        self.full_reads += 1
        return await self.inner.get_thread(thread_id)

    async def get_thread_info(self, thread_id: str) -> Thread | None:
        return await self.inner.get_thread_info(thread_id)

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        return await self.inner.append_messages(thread_id, messages)

    async def latest_summary(self, thread_id: str) -> ThreadSummary | None:
        return await self.inner.latest_summary(thread_id)

    async def save_summary(self, thread_id: str, summary: ThreadSummary) -> None:
        await self.inner.save_summary(thread_id, summary)

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        return await self.inner.messages_after(thread_id, after_seq, limit)


class CountingStore(FullReadStore):
    """The same, with the bounded read: counts both kinds of thread read."""

    def __init__(self, inner: SqlAgentStore) -> None:
        super().__init__(inner)
        self.bounded_reads: list[int | None] = []

    async def load_thread_for_turn(self, query: ThreadTurnQuery) -> ThreadTurnPage | None:
        self.bounded_reads.append(query.message_limit)
        return await self.inner.load_thread_for_turn(query)


class CountingPolicy:
    """Wraps a policy, forwarding what it declares, counting `select` calls."""

    def __init__(self, inner: HistoryPolicy) -> None:
        self.inner = inner
        self.selects = 0
        self.read_bound = getattr(inner, "read_bound", None)
        self.fold_max_tokens = getattr(inner, "fold_max_tokens", None)
        self.summarize = getattr(inner, "summarize", None)
        self.render_summary = getattr(inner, "render_summary", None)

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        self.selects += 1
        return self.inner.select(messages, ctx)


@dataclass
class CountingSummarizer:
    text: str = "the user wants X"
    calls: list[list[Message]] = field(default_factory=list)

    async def __call__(self, dropped: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls.append(dropped)
        return HistorySummary(text=self.text, usage=Usage(prompt_tokens=50, completion_tokens=7))


@dataclass
class LoopEnv:
    store: SqlAgentStore
    journal: SqlJournal
    ledger: SqlLedger

    def loop(
        self,
        model: ModelProvider,
        policy: HistoryPolicy,
        *,
        store: Any = None,
        tools: dict[str, ToolBinding] | None = None,
        max_steps: int = 8,
        quota: int | None = None,
        agent: str = "helper",
        fold_calls: int = 2,
        fold_timeout: float | None = 120.0,
        runtime: Any = None,
    ) -> AgentLoop:
        definition = AgentDefinition(
            name=agent,
            system_prompt="You help.",
            policy=policy,
            tools=tools or {},
            max_steps=max_steps,
        )
        return AgentLoop(
            store=store or self.store,
            runtime=runtime or self.journal,
            ledger=self.ledger,
            model=model,
            agents={agent: definition},
            token_quota=quota,
            fold_calls_per_turn=fold_calls,
            fold_timeout=fold_timeout,
        )

    async def thread(self, messages: Sequence[Message] = (), actor: str = "alice") -> str:
        thread = await self.store.create_thread(actor_id=actor, agent="helper", title="t")
        if messages:
            await self.store.append_messages(thread.id, messages)
        return thread.id

    async def failed_run(
        self, run_id: str, thread_id: str, content: str, steps: Sequence[tuple[str, str]]
    ) -> None:
        """A run as an earlier version of the code left it: marked failed, with `steps`
        ((name, payload) in order) in its journal. For replay tests of old journal formats."""
        request = RunRequest(
            run_id=run_id, thread_id=thread_id, actor_id="alice", agent="helper", content=content
        )
        async with self.store.engine.begin() as conn:
            await conn.execute(
                runs.insert().values(
                    id=run_id,
                    thread_id=thread_id,
                    actor_id="alice",
                    agent="helper",
                    status="failed",
                    request=request.model_dump_json(),
                )
            )
            await conn.execute(
                run_steps.insert(),
                [
                    {
                        "thread_id": thread_id,
                        "run_id": run_id,
                        "position": i,
                        "name": name,
                        "payload": payload,
                    }
                    for i, (name, payload) in enumerate(steps)
                ],
            )

    async def step_names(self, run_id: str) -> list[str]:
        return [name for name, _ in await self.journal.steps(run_id)]

    async def step_payload(self, run_id: str, name: str) -> str:
        return next(p for n, p in await self.journal.steps(run_id) if n == name)


@pytest.fixture(scope="package")
def dbos_launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """DBOS, launched once for the loop tests (it is one instance per process), its system
    database a SQLite file of its own: workflow ids are run ids, unique across the tests'
    databases. Destroyed when the loop tests end: its queue threads draw on the global
    `random`, which hypothesis (the schemathesis tests) forbids while it generates. Tests that
    need it skip without the `dbos` extra."""
    pytest.importorskip("dbos", reason="the dbos extra is not installed")
    from bounded_agents.durable.dbos_runtime import dbos_config, destroy_dbos, launch_dbos

    path = tmp_path_factory.mktemp("dbos") / "system.sqlite"
    launch_dbos(dbos_config(f"sqlite:///{path}", executor_id=f"tests-{os.getpid()}"))
    try:
        yield path  # the system database, for a test that looks inside it
    finally:
        destroy_dbos()


RUNTIMES = ["sql", "dbos"]


@pytest.fixture(params=RUNTIMES)
def runtime_name(request: pytest.FixtureRequest) -> str:
    """The durable runtime a loop test runs on: the SQL journal, then DBOS workflows."""
    return str(request.param)


SQL_JOURNAL_ONLY = pytest.mark.parametrize("runtime_name", ["sql"])
"""For a test about the SQL journal's own rows or transactions: it runs on the SQL journal
alone (the `runtime_name` fixture's DBOS case is not generated for it, rather than skipped)."""


@pytest.fixture
def env(request: pytest.FixtureRequest, sql_store: SqlAgentStore, runtime_name: str) -> LoopEnv:
    journal: SqlJournal
    if runtime_name == "dbos":
        request.getfixturevalue("dbos_launched")
        from bounded_agents.durable.dbos_runtime import DbosRuntime

        journal = DbosRuntime(sql_store.engine, lease_seconds=60)
    else:
        journal = SqlJournal(sql_store.engine, lease_seconds=60)
    return LoopEnv(sql_store, journal, SqlLedger(sql_store.engine))
