"""The DBOS runtime for real (`AGENT_DURABLE=dbos`): the app in a subprocess on PostgreSQL (its
DBOS system tables in the same database, schema `dbos`), `kill -9` while the model is thinking,
a restart with the same DBOS executor id.

The lease is 60 s here, so nothing but DBOS's own recovery at `DBOS.launch()` can resume the run
within the test: the restarted process takes the run over at once (its lease was held under the
attempt's own token), replays `load:thread` from DBOS's step record, sends the model the same
prompt and stores one answer. While the run is live, a second turn on its thread gets 409.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import messages, run_steps, runs
from tests.conftest import emptied_store
from tests.providers.fake_openai import FakeOpenAI, Reply, completion
from tests.reliability.processes import App, fake_model_env, turn_in_flight

pytestmark = [pytest.mark.postgres]
pytest.importorskip("dbos", reason="the dbos extra is not installed")

KEY = "dbos-test-key"


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlAgentStore]:
    async with emptied_store(postgres_url) as store:
        yield store


async def _dbos_steps(store: SqlAgentStore, run_id: str) -> list[tuple[str, str, bool]]:
    """(workflow id, step name, failed) of every DBOS checkpoint of the run's attempts."""
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT workflow_uuid, function_name, error IS NOT NULL AS failed "
                "FROM dbos.operation_outputs WHERE workflow_uuid = :rid "
                "OR workflow_uuid LIKE :attempts ORDER BY workflow_uuid, function_id"
            ),
            {"rid": run_id, "attempts": f"{run_id}#attempt-%"},
        )
        return [(r.workflow_uuid, r.function_name, r.failed) for r in rows]


async def _workflows(store: SqlAgentStore, run_id: str) -> list[tuple[str, str, str]]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT workflow_uuid, status, executor_id FROM dbos.workflow_status "
                "WHERE workflow_uuid = :rid OR workflow_uuid LIKE :attempts"
            ),
            {"rid": run_id, "attempts": f"{run_id}#attempt-%"},
        )
        return [(r.workflow_uuid, r.status, r.executor_id) for r in rows]


async def _wait(condition: object, tries: int = 400) -> None:
    for _ in range(tries):
        if await condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)


async def test_a_killed_dbos_run_is_recovered_by_dbos_at_restart_and_answers_once(
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
        AGENT_DURABLE="dbos",
        AGENT_DBOS_EXECUTOR_ID=f"crash-test-{uuid.uuid4().hex[:8]}",
        AGENT_RUN_LEASE_SECONDS="60",
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
            created = await client.post("/agents/assistant/threads", json={"title": "dbos"})
            assert created.status_code == 201, created.text
            thread_id = created.json()["id"]
            turn = await turn_in_flight(client, thread_id, "survive this", fake_openai)
            assert len(fake_openai.requests) == 1, first.log.read_text()

            # The lease is the thread's lock under DBOS too: a second turn is refused.
            busy = await client.post(
                f"/agents/assistant/threads/{thread_id}/messages", json={"content": "me too"}
            )
            assert busy.status_code == 409, busy.text
            assert busy.json()["error"]["code"] == "thread_busy"

            async with pg_store.engine.connect() as conn:
                run_id = (await conn.execute(sa.select(runs.c.id))).scalar_one()
            steps = [name for _, name, _ in await _dbos_steps(pg_store, run_id)]
            assert "load:thread" in steps, steps
            await first.kill_9()
            with pytest.raises(httpx.TransportError):
                await turn

        await second.start()  # same executor id: DBOS.launch() recovers the attempt
        async with httpx.AsyncClient(
            base_url=second.url, headers=headers, trust_env=False, timeout=30
        ) as client:
            answered: list[dict[str, object]] = []

            async def has_answer() -> bool:
                nonlocal answered
                page = await client.get(f"/threads/{thread_id}/messages")
                answered = page.json()["messages"]
                return any(m["role"] == "assistant" for m in answered)

            await _wait(has_answer)
        assert [(m["role"], m["content"]) for m in answered] == [
            ("user", "survive this"),
            ("assistant", "recovered answer"),
        ], second.log.read_text()
        assert len(fake_openai.requests) == 2
        before, after = (r.json()["messages"] for r in fake_openai.requests)
        assert before == after, "the recovered run sent the model the same prompt"

        async def ended() -> bool:
            async with pg_store.engine.connect() as conn:
                status = (await conn.execute(sa.select(runs.c.status))).scalar_one()
            return bool(status != "running")

        await _wait(ended)
        async with pg_store.engine.connect() as conn:
            assert (await conn.execute(sa.select(runs.c.status))).scalar_one() == "completed"
            stored = (
                await conn.execute(
                    sa.select(sa.func.count())
                    .select_from(messages)
                    .where(messages.c.role == "assistant")
                )
            ).scalar_one()
            journaled = (
                await conn.execute(sa.select(sa.func.count()).select_from(run_steps))
            ).scalar_one()
        assert stored == 1
        assert journaled == 0, "the SQL journal holds no steps of a DBOS run"
        checkpoints = await _dbos_steps(pg_store, run_id)
        names = [name for _, name, _ in checkpoints]
        assert names.count("load:thread") == 1, checkpoints
        assert names.count("persist:user") == 1, checkpoints
        assert names.count("persist:assistant") == 1, checkpoints
        assert {workflow for workflow, _, _ in checkpoints} == {run_id}, "one attempt, recovered"
        workflows = await _workflows(pg_store, run_id)
        assert [(w, s) for w, s, _ in workflows] == [(run_id, "SUCCESS")], workflows
        assert "Recovering 1 workflows" in second.log.read_text()  # DBOS.launch(), not the sweep
    finally:
        await first.stop()
        await second.stop()
