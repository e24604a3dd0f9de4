"""Journal retention: a completed run's steps go once they are old enough; nothing else does.

The answer, the run's report and its ledger rows stay; a failed run keeps its journal and is
still resumed from it, sending the same prompt; a run still running keeps its journal too.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
import sqlalchemy as sa

from bounded_agents.core.history import window_history
from bounded_agents.core.ports import ModelRequest, ModelResponse, RunRequest
from bounded_agents.durable import SqlJournal
from bounded_agents.errors import JournalPruned, ProviderError, RunFailed
from bounded_agents.store.clock import db_now
from bounded_agents.store.schema import ledger, run_steps, runs
from bounded_agents.testing import ScriptedProvider, reply
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv
from tests.store.test_hot_path_predicates import missing_keys
from tests.store.test_store import captured_sql

POLICY = window_history(max_messages=6)


async def _steps_by_run(env: LoopEnv) -> Counter[str]:
    async with env.store.engine.connect() as conn:
        return Counter((await conn.execute(sa.select(run_steps.c.run_id))).scalars())


async def _turns(env: LoopEnv, thread_id: str, count: int) -> list[str]:
    run_ids = []
    for i in range(count):
        model = ScriptedProvider([reply(f"a{i}")])
        result = await env.loop(model, POLICY).run_turn(
            agent="helper",
            thread_id=thread_id,
            actor_id="alice",
            content=f"q{i}",
            run_id=str(uuid.uuid4()),
        )
        run_ids.append(result.run_id)
    return run_ids


async def _age(env: LoopEnv, run_ids: list[str], seconds: float) -> None:
    """Date the runs' ends `seconds` back, by the database's clock."""
    async with env.store.engine.begin() as conn:
        await conn.execute(
            runs.update().where(runs.c.id.in_(run_ids)).values(updated_at=db_now(-seconds))
        )


# SQL journal only: counts run_steps rows, which a DBOS run does not write (its checkpoints
# are its workflows': test_pruning_a_dbos_run_deletes_its_workflows_every_attempt).
@SQL_JOURNAL_ONLY
async def test_completed_runs_lose_their_journal_once_old_enough_and_nothing_else(
    env: LoopEnv,
) -> None:
    tid = await env.thread()
    old = await _turns(env, tid, 4)
    await _age(env, old, 7200)
    recent = await _turns(env, tid, 2)
    failed_id = str(uuid.uuid4())
    with pytest.raises(RunFailed):
        await env.loop(ScriptedProvider([ProviderError("down")]), POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="fails", run_id=failed_id
        )
    await _age(env, [failed_id], 7200)
    before = await _steps_by_run(env)
    assert set(before) == {*old, *recent, failed_id}

    assert await env.journal.prune_steps(3600, limit=100) == len(old)

    after = await _steps_by_run(env)
    assert set(after) == {*recent, failed_id}
    assert after[failed_id] == before[failed_id]
    assert await env.journal.prune_steps(3600, limit=100) == 0  # pruned runs are not found again
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert [m.content for m in thread.messages if m.role == "assistant"] == [
        "a0",
        "a1",
        "a2",
        "a3",
        "a0",
        "a1",
    ]
    for run_id in old:
        record = await env.journal.get_run(run_id)
        assert record is not None and record.status == "completed" and record.report
    async with env.store.engine.connect() as conn:
        booked = Counter((await conn.execute(sa.select(ledger.c.run_id))).scalars())
    assert all(booked[run_id] == 1 for run_id in old)


async def test_pruning_goes_in_batches_of_its_limit(env: LoopEnv) -> None:
    tid = await env.thread()
    old = await _turns(env, tid, 5)
    await _age(env, old, 10)
    assert await env.journal.prune_steps(0, limit=2) == 2
    assert await env.journal.prune_steps(0, limit=2) == 2
    assert await env.journal.prune_steps(0, limit=2) == 1
    assert await _steps_by_run(env) == Counter()


async def test_a_failed_run_is_resumed_from_its_journal_after_a_prune(env: LoopEnv) -> None:
    tid = await env.thread()
    done = await _turns(env, tid, 2)
    failed_id = str(uuid.uuid4())
    failing = ScriptedProvider([ProviderError("down")])
    with pytest.raises(RunFailed):
        await env.loop(failing, POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="again?", run_id=failed_id
        )
    await _age(env, [*done, failed_id], 60)
    assert await env.journal.prune_steps(0, limit=100) == len(done)

    model = ScriptedProvider([reply("yes")])
    result = await env.loop(model, POLICY).resume(failed_id)

    assert result.message.content == "yes"
    assert model.calls[0].model_dump_json() == failing.calls[0].model_dump_json()
    assert "load:thread" in await env.step_names(failed_id)


# SQL journal only: counts run_steps rows, which a DBOS run does not write (its checkpoints
# are its workflows': test_pruning_a_dbos_run_deletes_its_workflows_every_attempt).
@SQL_JOURNAL_ONLY
async def test_a_running_run_keeps_its_journal(env: LoopEnv) -> None:
    tid = await env.thread()
    [done] = await _turns(env, tid, 1)
    release = asyncio.Event()

    class Slow(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            await release.wait()
            return await super().complete(request)

    task = asyncio.create_task(
        env.loop(Slow([reply("late")]), POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="slow", run_id="slow-run"
        )
    )
    for _ in range(200):
        if len(await _steps_by_run(env)) == 2:
            break
        await asyncio.sleep(0.02)
    await _age(env, [done], 60)
    async with env.store.engine.begin() as conn:  # even a run dated long ago, still running
        await conn.execute(
            runs.update().where(runs.c.status == "running").values(updated_at=db_now(-7200))
        )
    assert await env.journal.prune_steps(0, limit=100) == 1
    running = [r for r in await _steps_by_run(env) if r != done]
    assert len(running) == 1
    release.set()
    result = await task
    assert result.message.content == "late"


async def test_concurrent_pruners_take_different_runs(env: LoopEnv) -> None:
    tid = await env.thread()
    old = await _turns(env, tid, 12)
    await _age(env, old, 60)
    pruners = [SqlJournal(env.store.engine) for _ in range(4)]
    counts = await asyncio.gather(*(p.prune_steps(0, limit=3) for p in pruners))
    assert sum(counts) == 12
    assert await _steps_by_run(env) == Counter()


async def test_the_prune_deletes_steps_by_their_thread_key(env: LoopEnv) -> None:
    """Distributed by `thread_id`, a delete of `run_steps` by `run_id` alone would scan every
    shard's table (no index starts with `run_id`); by (thread_id, run_id) it is a key range."""
    tid = await env.thread()
    old = await _turns(env, tid, 3)
    await _age(env, old, 60)
    with captured_sql(env.store) as statements:
        assert await SqlJournal(env.store.engine).prune_steps(0, limit=10) == 3
    deletes = [s for s in statements if s.lstrip().upper().startswith("DELETE FROM RUN_STEPS")]
    assert len(deletes) == 1
    assert missing_keys(deletes[0]) == []


async def test_resuming_a_completed_run_whose_journal_was_pruned_calls_no_model(
    env: LoopEnv,
) -> None:
    """Nothing is left to replay: the resume must refuse, not run the turn again and pay."""
    tid = await env.thread()
    [done] = await _turns(env, tid, 1)
    await _age(env, [done], 60)
    assert await env.journal.prune_steps(0, limit=10) == 1
    model = ScriptedProvider([reply("paid twice")])
    with pytest.raises(JournalPruned):
        await env.loop(model, POLICY).resume(done)
    assert model.calls == []
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert [m.content for m in thread.messages] == ["q0", "a0"]


async def test_a_failed_run_nobody_resumed_expires_after_its_own_retention(env: LoopEnv) -> None:
    """A failed run keeps its journal "until resumed or expired": past its own retention it is
    pruned like a completed run, and a resume then refuses instead of paying for the turn."""
    tid = await env.thread()
    failed_id = str(uuid.uuid4())
    failing = ScriptedProvider([ProviderError("down")])
    with pytest.raises(RunFailed):
        await env.loop(failing, POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="again?", run_id=failed_id
        )
    await _age(env, [failed_id], 60)
    assert await env.journal.prune_steps(3600, limit=10, status="failed") == 0  # not yet
    assert await env.journal.prune_steps(0, limit=10) == 0  # the completed queue: not this one
    assert await env.journal.prune_steps(30, limit=10, status="failed") == 1
    assert (await _steps_by_run(env))[failed_id] == 0
    model = ScriptedProvider([reply("paid")])
    with pytest.raises(JournalPruned):
        await env.loop(model, POLICY).resume(failed_id)
    assert model.calls == []


@SQL_JOURNAL_ONLY
async def test_a_failed_run_pruned_while_its_resume_reads_it_is_not_claimed(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: `reopen` reads the journal, the sweep prunes the failed run, then `reopen`
    claims it. The attempt would run on from steps that are gone; the claim refuses instead."""
    tid = await env.thread()
    failed_id = str(uuid.uuid4())
    with pytest.raises(RunFailed):
        await env.loop(ScriptedProvider([ProviderError("down")]), POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="again?", run_id=failed_id
        )
    await _age(env, [failed_id], 60)
    journal = env.journal
    assert isinstance(journal, SqlJournal)
    claim = journal._claim

    async def pruned_first(request: RunRequest) -> None:
        assert await SqlJournal(env.store.engine).prune_steps(0, 10, status="failed") == 1
        await claim(request)

    monkeypatch.setattr(journal, "_claim", pruned_first)
    model = ScriptedProvider([reply("paid")])
    with pytest.raises(JournalPruned):
        await env.loop(model, POLICY).resume(failed_id)
    assert model.calls == []
    record = await journal.get_run(failed_id)
    assert record is not None and record.status == "failed"


@pytest.mark.parametrize("runtime_name", ["dbos"])
async def test_pruning_a_dbos_run_deletes_its_workflows_every_attempt(env: LoopEnv) -> None:
    """Under DBOS a run's journal is its workflows' checkpoints: pruning the run deletes the
    workflow of each attempt, so that journal is bounded by retention too. A run not old
    enough keeps its workflow."""
    from dbos import DBOS

    from bounded_agents.durable.dbos_runtime import attempt_workflow_id

    tid = await env.thread()
    done = await _turns(env, tid, 2)
    failed_id = str(uuid.uuid4())
    with pytest.raises(RunFailed):
        await env.loop(ScriptedProvider([ProviderError("down")]), POLICY).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="fails", run_id=failed_id
        )
    await env.loop(ScriptedProvider([reply("at last")]), POLICY).resume(failed_id)
    kept = await _turns(env, tid, 1)
    workflows = [*done, attempt_workflow_id(failed_id, 1), attempt_workflow_id(failed_id, 2)]

    def status(workflow_id: str) -> object:
        return DBOS.get_workflow_status(workflow_id)

    assert all([await asyncio.to_thread(status, w) for w in [*workflows, *kept]])
    await _age(env, [*done, failed_id], 7200)

    assert await env.journal.prune_steps(3600, limit=100) == 3

    assert [await asyncio.to_thread(status, w) for w in workflows] == [None] * 4
    assert await asyncio.to_thread(status, kept[0]) is not None
    assert await env.journal.prune_steps(3600, limit=100) == 0


@pytest.mark.parametrize("runtime_name", ["dbos"])
async def test_a_dbos_prune_that_fails_to_delete_the_workflows_marks_nothing(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workflows go inside the pruning transaction: if DBOS fails, the runs stay unmarked
    and the next sweep prunes them, workflows included."""
    from dbos import DBOS

    tid = await env.thread()
    done = await _turns(env, tid, 2)
    await _age(env, done, 7200)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("DBOS system database unreachable")

    with monkeypatch.context() as patched:
        patched.setattr(DBOS, "delete_workflows", broken)
        with pytest.raises(RuntimeError):
            await env.journal.prune_steps(3600, limit=100)
    async with env.store.engine.connect() as conn:
        marked = await conn.execute(
            sa.select(sa.func.count()).where(runs.c.steps_pruned_at.is_not(None))
        )
        assert marked.scalar() == 0

    assert await env.journal.prune_steps(3600, limit=100) == 2
    assert [await asyncio.to_thread(DBOS.get_workflow_status, r) for r in done] == [None, None]
