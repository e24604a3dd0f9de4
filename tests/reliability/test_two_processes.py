"""Two app processes on one PostgreSQL database, turns driven through both at once, and one
of them killed with SIGKILL while its turns wait on the model. The survivor's periodic sweep
resumes the dead process's runs once their leases lapse: every question is answered exactly
once, nothing is lost or doubled (messages, runs, ledger rows), and every thread takes the
next turn through the survivor.

Each process has its own fake model server (`A` thinks forever once told to), both answering
by content, since concurrent requests arrive in no order a script could know.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import ledger, messages, runs
from tests.conftest import emptied_store
from tests.providers.fake_openai import FakeOpenAI, RecordedRequest, Reply, completion
from tests.reliability.processes import App, fake_model_env

pytestmark = pytest.mark.postgres

KEY = "two-process-key"
THREADS = 8
LEASE_SECONDS = 3
"""Also the sweep's period: a dead process's run is resumed within about two of these."""


def answering(delay: Callable[[], float]) -> Callable[[RecordedRequest], Reply]:
    """A model that answers `answer: <the last user message>`, after `delay()` seconds."""

    def respond(request: RecordedRequest) -> Reply:
        sent = request.json()["messages"]
        question = next(m["content"] for m in reversed(sent) if m["role"] == "user")
        return dataclasses.replace(Reply.json(completion(f"answer: {question}")), delay=delay())

    return respond


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url) as store:
        yield store


DURABLE = [
    "sql",
    pytest.param(
        "dbos",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("dbos") is None, reason="the dbos extra is not installed"
        ),
    ),
]


@pytest.mark.parametrize("durable", DURABLE)
async def test_a_killed_process_runs_are_resumed_by_the_other_with_nothing_lost_or_doubled(
    pg_store: SqlAgentStore,
    postgres_url: str,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    durable: str,
) -> None:
    """Under DBOS too (`AGENT_DURABLE=dbos`, each process its own executor id): DBOS recovers
    only its own executor's workflows, so A's runs are B's sweep's to take over, as new
    attempts replaying A's checkpoints."""
    model_a = FakeOpenAI()
    await model_a.start()
    a_thinks: dict[str, float] = {"seconds": 0.0}
    model_a.responder = answering(lambda: a_thinks["seconds"])
    fake_openai.responder = answering(lambda: 0.0)
    env = fake_model_env(
        postgres_url,
        fake_openai.base_url,
        KEY,
        AGENT_RUN_LEASE_SECONDS=str(LEASE_SECONDS),
        AGENT_HISTORY_MAX_MESSAGES="6",
        AGENT_DURABLE=durable,
    )
    executor = uuid.uuid4().hex[:8]
    a = App(
        {
            **env,
            "AGENT_OPENAI_BASE_URL": model_a.base_url,
            "AGENT_DBOS_EXECUTOR_ID": f"a-{executor}",
        },
        tmp_path / "a.log",
    )
    b = App(
        {
            **env,
            "AGENT_OPENAI_BASE_URL": fake_openai.base_url,
            "AGENT_DBOS_EXECUTOR_ID": f"b-{executor}",
        },
        tmp_path / "b.log",
    )
    asked: dict[str, list[str]] = {}
    try:
        await a.start()
        await b.start()
        options = {"headers": {"Authorization": f"Bearer {KEY}"}, "trust_env": False}
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=60, **options) as via_a,
            httpx.AsyncClient(base_url=b.url, timeout=60, **options) as via_b,
        ):

            async def turn(client: httpx.AsyncClient, thread: str, question: str) -> int:
                asked[thread].append(question)
                r = await client.post(
                    f"/agents/assistant/threads/{thread}/messages", json={"content": question}
                )
                assert r.status_code == 200, r.text
                assert r.json()["message"]["content"] == f"answer: {question}"
                return r.status_code

            threads = []
            for i in range(THREADS):
                created = await (via_a if i % 2 else via_b).post(
                    "/agents/assistant/threads", json={}
                )
                threads.append(created.json()["id"])
                asked[threads[-1]] = []

            async def two_turns(i: int, thread: str) -> None:  # through A, then through B
                await turn(via_a, thread, f"t{i} q1 via a")
                await turn(via_b, thread, f"t{i} q2 via b")

            await asyncio.gather(*(two_turns(i, t) for i, t in enumerate(threads)))

            # A now thinks forever: half the threads get a turn through A, half through B.
            a_thinks["seconds"] = 3600.0
            in_flight = len(model_a.requests)
            doomed = [
                asyncio.create_task(turn(via_a, t, f"t{i} q3 via a (killed)"))
                for i, t in enumerate(threads[: THREADS // 2])
            ]
            survivors = asyncio.gather(
                *(
                    turn(via_b, t, f"t{i} q3 via b")
                    for i, t in enumerate(threads[THREADS // 2 :], start=THREADS // 2)
                )
            )
            for _ in range(1500):  # 30 s at most: A's model calls are in flight
                if len(model_a.requests) >= in_flight + len(doomed):
                    break
                await asyncio.sleep(0.02)
            assert len(model_a.requests) == in_flight + len(doomed), a.log.read_text()
            await a.kill_9()
            for task in doomed:
                with pytest.raises(httpx.TransportError):
                    await task
            await survivors

            # B's sweep resumes A's runs once their leases lapse; no restart, no new request.
            async with asyncio.timeout(10 * LEASE_SECONDS):
                while True:
                    async with pg_store.engine.connect() as conn:
                        statuses = Counter(
                            (await conn.execute(sa.select(runs.c.status))).scalars().all()
                        )
                    if set(statuses) == {"completed"}:
                        break
                    await asyncio.sleep(0.2)

            # Every thread takes its next turn, through the survivor.
            await asyncio.gather(*(turn(via_b, t, f"t{i} q4 via b") for i, t in enumerate(threads)))
    finally:
        await a.stop()
        await b.stop()
        await model_a.close()

    async with pg_store.engine.connect() as conn:
        stored = (
            await conn.execute(
                sa.select(
                    messages.c.thread_id,
                    messages.c.seq,
                    messages.c.role,
                    messages.c.content,
                    messages.c.run_id,
                ).order_by(messages.c.thread_id, messages.c.seq)
            )
        ).all()
        run_rows = (await conn.execute(sa.select(runs.c.id, runs.c.status))).all()
        booked = Counter((await conn.execute(sa.select(ledger.c.run_id))).scalars().all())
    turns = sum(len(q) for q in asked.values())
    assert turns == 4 * THREADS
    for thread in threads:
        rows = [r for r in stored if r.thread_id == thread]
        assert [r.seq for r in rows] == list(range(1, 2 * 4 + 1)), thread
        assert [r.role for r in rows] == ["user", "assistant"] * 4, thread
        assert [r.content for r in rows[::2]] == asked[thread]  # each once, in order
        for question, answer in zip(rows[::2], rows[1::2], strict=True):
            assert answer.content == f"answer: {question.content}"
            assert answer.run_id == question.run_id
    assert Counter(r.status for r in run_rows) == {"completed": turns}
    assert set(booked) == {r.id for r in run_rows} and set(booked.values()) == {1}
    resumed = [r for r in stored if r.role == "assistant" and "(killed)" in r.content]
    assert len(resumed) == THREADS // 2
    if durable == "dbos":  # B took A's runs over as second attempts; A's first ones cancelled
        async with pg_store.engine.connect() as conn:
            workflows = dict(
                (
                    await conn.execute(
                        sa.text("SELECT workflow_uuid, status FROM dbos.workflow_status")
                    )
                ).all()
            )
        for run in run_rows:
            if run.id in {r.run_id for r in resumed}:
                assert workflows[run.id] == "CANCELLED", workflows
                assert workflows[f"{run.id}#attempt-2"] == "SUCCESS", workflows
            else:
                assert workflows[run.id] == "SUCCESS", workflows
