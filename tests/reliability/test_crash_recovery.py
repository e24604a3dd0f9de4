"""Crash recovery for real: the app in a subprocess on PostgreSQL, `kill -9` while the model is
thinking (after `load:thread` was journaled), a restart that resumes the run at start-up.

The answer is stored exactly once, and the model is sent the same prompt both times.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import ledger, run_steps, runs, thread_summaries
from tests.conftest import emptied_store
from tests.providers.fake_openai import FakeOpenAI, Reply, completion
from tests.reliability.processes import App, fake_model_env, turn_in_flight

pytestmark = pytest.mark.postgres

KEY = "crash-test-key"


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url) as store:
        yield store


async def _steps(store: SqlAgentStore) -> list[str]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(sa.select(run_steps.c.name).order_by(run_steps.c.position))
        return [r.name for r in rows]


async def test_a_killed_run_resumes_at_start_up_and_answers_exactly_once(
    pg_store: SqlAgentStore,
    postgres_url: str,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
) -> None:
    fake_openai.enqueue(Reply(delay=60), Reply.json(completion("recovered answer")))
    env = fake_model_env(
        postgres_url,
        fake_openai.base_url,
        KEY,
        AGENT_RUN_LEASE_SECONDS="1",
        AGENT_HISTORY_MAX_MESSAGES="6",
    )
    headers = {"Authorization": f"Bearer {KEY}"}
    first = App(env, tmp_path / "first.log")
    second = App(env, tmp_path / "second.log")
    try:
        await first.start()
        async with httpx.AsyncClient(
            base_url=first.url, headers=headers, trust_env=False, timeout=30
        ) as client:
            created = await client.post("/agents/assistant/threads", json={"title": "crash"})
            assert created.status_code == 201, created.text
            thread_id = created.json()["id"]
            turn = await turn_in_flight(client, thread_id, "survive this", fake_openai)
            assert len(fake_openai.requests) == 1, first.log.read_text()
            assert "load:thread" in await _steps(pg_store)
            await first.kill_9()
            with pytest.raises(httpx.TransportError):
                await turn

        await asyncio.sleep(1.5)  # nobody renews the lease any more: it expires
        await second.start()  # ... and start-up resumes the run
        async with httpx.AsyncClient(
            base_url=second.url, headers=headers, trust_env=False, timeout=30
        ) as client:
            messages: list[dict[str, object]] = []
            for _ in range(200):
                page = await client.get(f"/threads/{thread_id}/messages")
                messages = page.json()["messages"]
                if any(m["role"] == "assistant" for m in messages):
                    break
                await asyncio.sleep(0.05)
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "survive this"),
            ("assistant", "recovered answer"),
        ], second.log.read_text()
        assert len(fake_openai.requests) == 2
        before, after = (r.json()["messages"] for r in fake_openai.requests)
        assert before == after, "the resumed run sent the model the same prompt"
        # The answer is stored one statement before the run is marked completed: wait for both.
        statuses: list[str] = []
        for _ in range(200):
            async with pg_store.engine.connect() as conn:
                statuses = list((await conn.execute(sa.select(runs.c.status))).scalars().all())
            if statuses != ["running"]:
                break
            await asyncio.sleep(0.05)
        assert statuses == ["completed"]
        steps = await _steps(pg_store)
        assert steps.count("load:thread") == 1 and steps.count("persist:assistant") == 1
    finally:
        await first.stop()
        await second.stop()


async def test_killed_between_summarizing_and_storing_the_summary_neither_loses_nor_repeats_it(
    pg_store: SqlAgentStore,
    postgres_url: str,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
) -> None:
    """`kill -9` after the summary was made and journaled, while its row is being written (the
    test holds a lock on `thread_summaries`, so the insert waits). The restarted process
    resumes the run: the summary is stored once, the summarizer is not called again, and the
    chat call sees it."""
    fake_openai.enqueue(
        Reply.json(completion("the user asked six questions", model="fake-model")),
        Reply.json(completion("recovered answer")),
    )
    env = fake_model_env(
        postgres_url,
        fake_openai.base_url,
        KEY,
        AGENT_RUN_LEASE_SECONDS="1",
        AGENT_HISTORY_MAX_MESSAGES="2",
        AGENT_HISTORY_SUMMARIZE="true",
    )
    thread = await pg_store.create_thread(actor_id="alice", agent="assistant", title="fold")
    from tests.factories import assistant, user

    await pg_store.append_messages(
        thread.id, [m for i in range(3) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    )
    headers = {"Authorization": f"Bearer {KEY}"}
    first = App(env, tmp_path / "first.log")
    second = App(env, tmp_path / "second.log")
    lock_conn = await pg_store.engine.connect()
    try:
        await first.start()
        lock = await lock_conn.begin()
        await lock_conn.execute(sa.text("LOCK TABLE thread_summaries IN EXCLUSIVE MODE"))
        async with httpx.AsyncClient(
            base_url=first.url, headers=headers, trust_env=False, timeout=30
        ) as client:
            turn = asyncio.create_task(
                client.post(
                    f"/agents/assistant/threads/{thread.id}/messages",
                    json={"content": "and now?"},
                )
            )
            for _ in range(400):
                if "persist:usage:history" in await _steps(pg_store):
                    break
                await asyncio.sleep(0.025)
            await asyncio.sleep(0.3)  # the summary insert is now waiting on the lock
            steps = await _steps(pg_store)
            assert "history:summarize" in steps and "persist:summary" not in steps, steps
            assert len(fake_openai.requests) == 1, "only the summarizer was called"
            await first.kill_9()
            with pytest.raises(httpx.TransportError):
                await turn
        await lock.rollback()
        await asyncio.sleep(1.5)  # the lease lapses
        await second.start()  # start-up resumes the run
        statuses: list[str] = []
        for _ in range(300):
            async with pg_store.engine.connect() as conn:
                statuses = list((await conn.execute(sa.select(runs.c.status))).scalars().all())
            if statuses == ["completed"]:
                break
            await asyncio.sleep(0.05)
        assert statuses == ["completed"], second.log.read_text()
        async with pg_store.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(thread_summaries.c.covers_through_seq, thread_summaries.c.text)
                )
            ).all()
            summary_ledger = (
                await conn.execute(
                    sa.select(sa.func.count())
                    .select_from(ledger)
                    .where(ledger.c.purpose == "history_summary")
                )
            ).scalar_one()
        assert [tuple(r) for r in rows] == [(5, "the user asked six questions")]
        assert summary_ledger == 1
        assert len(fake_openai.requests) == 2, "no second summary call after the restart"
        chat = fake_openai.requests[1].json()["messages"]
        assert "the user asked six questions" in chat[1]["content"]
        steps = await _steps(pg_store)
        assert steps.count("history:summarize") == 1 and steps.count("persist:summary") == 1
    finally:
        await lock_conn.close()
        await first.stop()
        await second.stop()
