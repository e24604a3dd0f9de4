"""Crash recovery for real: the app in a subprocess on PostgreSQL, `kill -9` while the model is
thinking (after `load:thread` was journaled), a restart that resumes the run at start-up.

The answer is stored exactly once, and the model is sent the same prompt both times.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from app.store import SqlAgentStore
from app.store.schema import run_steps, runs
from tests.conftest import emptied_store
from tests.providers.fake_openai import FakeOpenAI, Reply, completion
from tests.reliability.processes import App

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
    env = {
        **os.environ,
        "AGENT_DATABASE_URL": postgres_url,
        "AGENT_MODEL": "openai",
        "AGENT_OPENAI_BASE_URL": fake_openai.base_url,
        "AGENT_OPENAI_MODEL": "fake-model",
        "AGENT_API_KEYS": f"{KEY}=alice",
        "AGENT_RUN_LEASE_SECONDS": "1",
        "AGENT_HISTORY_MAX_MESSAGES": "6",
    }
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
            turn = asyncio.create_task(
                client.post(
                    f"/agents/assistant/threads/{thread_id}/messages",
                    json={"content": "survive this"},
                )
            )
            for _ in range(400):  # the model call is in flight: load:thread was journaled
                if fake_openai.requests:
                    break
                await asyncio.sleep(0.025)
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
