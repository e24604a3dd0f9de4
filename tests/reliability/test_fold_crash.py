"""`kill -9` in the middle of a fold, for real: the app in a subprocess on PostgreSQL (the SQL
journal, then DBOS workflows), its summarizer and chat model the fake OpenAI server.

A backlog folds in two chunks. The first is stored; the process is killed while the second
is being summarized. The restarted process resumes the run: it does not ask for the first
chunk again, asks for the second (never journaled), which now comes back cut at
`finish_reason: length` and is refused. The turn goes on with the degraded prompt, and the
process is killed again while the chat model thinks. The third process replays everything,
the refusal included: no summarizer call at all, the chat prompt byte for byte the same, one
answer stored, the cut summary never stored. (Under DBOS the first restart is DBOS's own
recovery of the attempt; the second, the sweep's new attempt once the lease lapsed, which
replays the first attempt's steps.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bounded_agents.core.summary import DEFAULT_HISTORY_SUMMARY_INSTRUCTION
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import ledger, messages, run_steps, runs, thread_summaries
from tests.conftest import emptied_store
from tests.factories import assistant, user
from tests.providers.fake_openai import FakeOpenAI, RecordedRequest, Reply, completion
from tests.reliability.processes import App, fake_model_env

pytestmark = pytest.mark.postgres

KEY = "fold-crash-key"
FIRST_CHUNK = "- the first chunk: order ORD-1"


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url) as store:
        yield store


def _is_summary(request: RecordedRequest) -> bool:
    return bool(
        request.json()["messages"][0]["content"].startswith(
            DEFAULT_HISTORY_SUMMARY_INSTRUCTION[:60]
        )
    )


class Script:
    """Summarizer: the first chunk's summary, then a hang, then a cut answer. Chat: a hang,
    then an answer."""

    def __init__(self) -> None:
        self.summaries: list[RecordedRequest] = []
        self.chats: list[RecordedRequest] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        if _is_summary(request):
            self.summaries.append(request)
            return [
                Reply.json(completion(FIRST_CHUNK)),
                Reply(delay=60),
                Reply.json(completion("- the second ch", finish_reason="length")),
            ][min(len(self.summaries), 3) - 1]
        self.chats.append(request)
        return Reply(delay=60) if len(self.chats) == 1 else Reply.json(completion("answered"))


async def _wait(condition: Callable[[], Awaitable[bool]], what: str, tries: int = 600) -> None:
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _steps(store: SqlAgentStore) -> list[str]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(sa.select(run_steps.c.name).order_by(run_steps.c.position))
        return [r.name for r in rows]


@pytest.mark.parametrize("durable", ["sql", "dbos"])
async def test_a_fold_killed_twice_resumes_without_asking_again_for_what_it_journaled(
    pg_store: SqlAgentStore,
    postgres_url: str,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    durable: str,
) -> None:
    if durable == "dbos":
        pytest.importorskip("dbos", reason="the dbos extra is not installed")
    script = Script()
    fake_openai.responder = script
    settings = {
        "AGENT_HISTORY_MAX_MESSAGES": "2",
        "AGENT_HISTORY_SUMMARIZE": "true",
        "AGENT_HISTORY_FOLD_MAX_TOKENS": "160",
        "AGENT_HISTORY_FOLD_CALLS_PER_TURN": "2",
        "AGENT_HISTORY_FOLD_TIMEOUT_SECONDS": "50",
    }
    if durable == "dbos":
        # DBOS recovers its executor's workflows at launch; a run whose recovery was killed
        # too is taken back by the sweep once its lease lapses, as a new attempt.
        settings.update(
            AGENT_DURABLE="dbos",
            AGENT_DBOS_EXECUTOR_ID=f"fold-crash-{uuid.uuid4().hex[:8]}",
        )
    settings["AGENT_RUN_LEASE_SECONDS"] = "1"
    env = fake_model_env(postgres_url, fake_openai.base_url, KEY, **settings)
    thread = await pg_store.create_thread(actor_id="alice", agent="assistant", title="fold")
    await pg_store.append_messages(
        thread.id,
        [m for i in range(6) for m in (user(f"q{i} ORD-{i} " * 6), assistant(f"a{i} " * 12))],
    )
    headers = {"Authorization": f"Bearer {KEY}"}
    apps = [App(env, tmp_path / f"app{n}.log") for n in range(3)]

    async def counts(summaries: int, chats: int) -> bool:
        return len(script.summaries) >= summaries and len(script.chats) >= chats

    try:
        await apps[0].start()
        async with httpx.AsyncClient(
            base_url=apps[0].url, headers=headers, trust_env=False, timeout=30
        ) as client:
            turn = asyncio.create_task(
                client.post(
                    f"/agents/assistant/threads/{thread.id}/messages",
                    json={"content": "and now?"},
                )
            )
            await _wait(lambda: counts(2, 0), "the second chunk's summarizer call")
            await asyncio.sleep(0.3)
            stored = [text for _, text in await _summaries(pg_store)]
            assert stored == [FIRST_CHUNK], "the first chunk is stored before the kill"
            await apps[0].kill_9()
            with pytest.raises(httpx.TransportError):
                await turn

        await asyncio.sleep(1.5)  # the lease lapses
        await apps[1].start()  # start-up resumes the run
        await _wait(lambda: counts(3, 1), "the resumed run's chat call")
        await asyncio.sleep(0.3)
        await apps[1].kill_9()

        await asyncio.sleep(1.5)
        await apps[2].start()
        await _wait(lambda: counts(3, 2), "the third attempt's chat call")

        async def completed() -> bool:
            async with pg_store.engine.connect() as conn:
                statuses = (await conn.execute(sa.select(runs.c.status))).scalars().all()
            return list(statuses) == ["completed"]

        await _wait(completed, "the run's end")
        logs = "\n".join(a.log.read_text() for a in apps)
        assert len(script.summaries) == 3, logs
        first, second, third = (r.json()["messages"][1]["content"] for r in script.summaries)
        assert "q0 ORD-0" in first
        assert FIRST_CHUNK in second and "q0 ORD-0" not in second, "chunk 1 is not sent again"
        assert third == second, "the chunk never journaled is asked for again, unchanged"
        before, after = (r.json()["messages"] for r in script.chats)
        assert before == after, "the replayed refusal builds the same prompt"
        assert any(FIRST_CHUNK in m["content"] for m in after), "the stored chunk rides"
        assert any("q5 ORD-5" in m["content"] for m in after), "the owed message rides"

        assert [t for _, t in await _summaries(pg_store)] == [FIRST_CHUNK]
        async with pg_store.engine.connect() as conn:
            answers = (
                (
                    await conn.execute(
                        sa.select(messages.c.content).where(
                            messages.c.role == "assistant", messages.c.run_id.is_not(None)
                        )
                    )
                )
                .scalars()
                .all()
            )
            booked = (
                (
                    await conn.execute(
                        sa.select(ledger.c.purpose).where(ledger.c.purpose == "history_summary")
                    )
                )
                .scalars()
                .all()
            )
        assert list(answers) == ["answered"]
        assert len(booked) == 2, "the first chunk and the refused (billed) one, once each"
        if durable == "sql":
            steps = await _steps(pg_store)
            assert steps.count("history:summarize") == 1
            assert steps.count("history:summarize:2") == 1
    finally:
        for app in apps:
            await app.stop()


async def _summaries(store: SqlAgentStore) -> list[tuple[int, str]]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(thread_summaries.c.covers_through_seq, thread_summaries.c.text).order_by(
                thread_summaries.c.covers_through_seq
            )
        )
        return [(int(r[0]), str(r[1])) for r in rows]
