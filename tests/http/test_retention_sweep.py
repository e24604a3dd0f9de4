"""The module's sweep prunes by AGENT_JOURNAL_RETENTION_SECONDS, and the inspector says so."""

from __future__ import annotations

import sqlalchemy as sa

from app.store import SqlAgentStore
from app.store.clock import db_now
from app.store.schema import run_steps, runs
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
