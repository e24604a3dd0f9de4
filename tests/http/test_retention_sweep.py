"""The module's sweep prunes by AGENT_JOURNAL_RETENTION_SECONDS (completed runs) and
AGENT_FAILED_RUN_RETENTION_SECONDS (failed runs), and the inspector says so."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.clock import db_now
from bounded_agents.store.schema import run_steps, runs
from bounded_agents.testing import ScriptedProvider
from tests.http.conftest import ModuleFactory, http_settings


async def test_the_sweep_prunes_runs_older_than_the_configured_retention(
    make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    module = make_module(settings=http_settings(journal_retention_seconds=3600))
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    first = await module.run_turn(
        agent="helper", thread_id=thread.id, actor_id="alice", content="a"
    )
    second = await module.run_turn(
        agent="helper", thread_id=thread.id, actor_id="alice", content="b"
    )
    assert await module.prune_journal() == 0  # both ended moments ago
    async with sql_store.engine.begin() as conn:
        await conn.execute(
            runs.update().where(runs.c.id == first.run_id).values(updated_at=db_now(-3601))
        )
    assert await module.prune_journal() == 1
    async with sql_store.engine.connect() as conn:
        kept = set((await conn.execute(sa.select(run_steps.c.run_id))).scalars())
    assert kept == {second.run_id}
    [newest, oldest] = await module.loop.runtime.thread_runs(thread.id, limit=10)  # type: ignore[attr-defined]
    assert oldest.run_id == first.run_id and oldest.pruned and oldest.steps == []
    assert newest.run_id == second.run_id and not newest.pruned and newest.steps


async def test_the_sweep_expires_failed_runs_by_their_own_longer_retention(
    make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    failing = ScriptedProvider([ProviderError("down")])
    module = make_module(
        model=failing,
        settings=http_settings(journal_retention_seconds=60, failed_run_retention_seconds=7200),
    )
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    with pytest.raises(RunFailed) as failed:
        await module.run_turn(agent="helper", thread_id=thread.id, actor_id="alice", content="a")
    run_id = failed.value.run_id

    async def age(seconds: float) -> None:
        async with sql_store.engine.begin() as conn:
            await conn.execute(
                runs.update().where(runs.c.id == run_id).values(updated_at=db_now(-seconds))
            )

    await age(3601)  # past a completed run's retention, not a failed one's
    assert await module.prune_journal() == 0
    await age(7201)
    assert await module.prune_journal() == 1
    async with sql_store.engine.connect() as conn:
        assert (await conn.execute(sa.select(run_steps.c.run_id))).first() is None
