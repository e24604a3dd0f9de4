"""How runs map onto DBOS workflows (`DbosRuntime`): attempts, the sweep's takeover, and DBOS's
own recovery calling the run again on its event loop, in process (the subprocess `kill -9` is
tests/reliability/test_dbos_runtime.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import LoopEnv

pytest.importorskip("dbos", reason="the dbos extra is not installed")

from dbos import DBOS

from bounded_agents.durable.dbos_runtime import DbosRuntime, attempt_workflow_id


@pytest.fixture
def runtime_name() -> str:
    """These tests are about DBOS workflows: the loop env on the DBOS runtime only."""
    return "dbos"


@pytest.fixture
def dbos_env(env: LoopEnv) -> LoopEnv:
    return env


async def _status(workflow_id: str) -> str | None:
    status = await asyncio.to_thread(DBOS.get_workflow_status, workflow_id)
    return None if status is None else str(status.status)


async def _settled_status(workflow_id: str, seconds: float = 10.0) -> str | None:
    """The workflow's status once it has left PENDING: a workflow DBOS recovered runs on DBOS's
    own thread, and records its end there a moment after the run's row says completed."""
    status = await _status(workflow_id)
    for _ in range(int(seconds / 0.05)):
        if status != "PENDING":
            break
        await asyncio.sleep(0.05)
        status = await _status(workflow_id)
    return status


async def _own_steps(workflow_id: str) -> list[str]:
    steps = await asyncio.to_thread(DBOS.list_workflow_steps, workflow_id)
    return [str(s["function_name"]) for s in steps]


def _hanging(prompts: list[str], entered: asyncio.Event) -> Any:
    async def hang(request: ModelRequest) -> ModelResponse:
        prompts.append(request.model_dump_json())
        entered.set()
        await asyncio.Event().wait()  # never answers: the process "dies" here
        raise AssertionError("unreachable")

    return hang


def _answer(prompts: list[str]) -> Any:
    async def answer(request: ModelRequest) -> ModelResponse:
        prompts.append(request.model_dump_json())
        return ModelResponse(content="resumed answer")

    return answer


async def _dying_turn(env: LoopEnv, tid: str, prompts: list[str]) -> str:
    """A turn whose model call never returns, then its task cancelled: attempt 1 is left
    PENDING in DBOS and the run `running`, its lease held."""
    entered = asyncio.Event()
    run_id = str(uuid.uuid4())
    loop = env.loop(ScriptedProvider([_hanging(prompts, entered)]), window_history(max_messages=3))
    task = asyncio.create_task(
        loop.run_turn(agent="helper", thread_id=tid, actor_id="alice", content="hi", run_id=run_id)
    )
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _status(run_id) == "PENDING"
    return run_id


async def test_a_run_is_one_workflow_and_its_checkpoints_are_its_steps(dbos_env: LoopEnv) -> None:
    tid = await dbos_env.thread([user("q1"), assistant("a1")])
    loop = dbos_env.loop(ScriptedProvider([reply("a2")]), window_history(max_messages=3))
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="q2", run_id=str(uuid.uuid4())
    )
    assert await _status(result.run_id) == "SUCCESS"
    assert await _own_steps(result.run_id) == [
        "persist:user",
        "DBOS.patch-agent:rolling-summary",
        "load:thread",
        "model:1",
        "persist:assistant",
    ]
    assert await dbos_env.step_names(result.run_id) == [
        "persist:user",
        "patch:agent:rolling-summary",
        "load:thread",
        "model:1",
        "persist:assistant",
    ]


async def test_a_resumed_failed_run_is_a_second_attempt_replaying_the_first(
    dbos_env: LoopEnv,
) -> None:
    tid = await dbos_env.thread([user("q1"), assistant("a1")])
    run_id = str(uuid.uuid4())
    prompts: list[str] = []

    async def refuse(request: ModelRequest) -> ModelResponse:
        prompts.append(request.model_dump_json())
        raise ProviderError("down for the test")

    failing = dbos_env.loop(ScriptedProvider([refuse]), window_history(max_messages=3))
    with pytest.raises(RunFailed):
        await failing.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="q2", run_id=run_id
        )
    assert await _status(run_id) == "SUCCESS"  # the attempt ended; the run row says failed
    record = await dbos_env.journal.get_run(run_id)
    assert record is not None and record.status == "failed"

    again = dbos_env.loop(ScriptedProvider([_answer(prompts)]), window_history(max_messages=3))
    result = await again.resume(run_id)
    assert result.message.content == "resumed answer"
    assert prompts[0] == prompts[1]
    second = attempt_workflow_id(run_id, 2)
    assert await _status(second) == "SUCCESS"
    # The second attempt's own checkpoints start where the first one's successes end.
    assert await _own_steps(second) == ["model:1", "persist:assistant"]
    names = await dbos_env.step_names(run_id)
    assert names.count("load:thread") == 1 and names.count("model:1") == 1, names


async def test_the_sweep_takes_over_a_dead_attempt_and_cancels_it(dbos_env: LoopEnv) -> None:
    """A process that died (not coming back under its executor id): its lease lapses and a
    resume runs a new attempt, replaying the dead one's checkpoints; the dead attempt is
    cancelled, so DBOS never recovers it behind the new one's back."""
    from datetime import UTC, datetime, timedelta

    from bounded_agents.store.schema import runs

    tid = await dbos_env.thread([user("q1"), assistant("a1")])
    prompts: list[str] = []
    run_id = await _dying_turn(dbos_env, tid, prompts)
    async with dbos_env.store.engine.begin() as conn:
        await conn.execute(
            runs.update()
            .where(runs.c.id == run_id)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(minutes=5))
        )
    assert await dbos_env.journal.expired_runs() == [run_id]
    again = dbos_env.loop(ScriptedProvider([_answer(prompts)]), window_history(max_messages=3))
    result = await again.resume(run_id)
    assert result.message.content == "resumed answer"
    assert prompts[0] == prompts[1]
    assert await _status(run_id) == "CANCELLED"
    assert await _status(attempt_workflow_id(run_id, 2)) == "SUCCESS"
    assert (await dbos_env.step_names(run_id)).count("load:thread") == 1


async def test_dbos_recovery_finishes_the_run_on_the_apps_loop_without_waiting_for_the_lease(
    dbos_env: LoopEnv,
) -> None:
    """What `DBOS.launch()` does at a restart, done in process (with DBOS's internal recovery
    function): the pending attempt is re-enqueued and run by DBOS on its own event loop; it
    hops onto this loop and the run takes its lease at once (held under the attempt's own
    token), 60 s before it would lapse."""
    tid = await dbos_env.thread([user("q1"), assistant("a1")])
    prompts: list[str] = []
    run_id = await _dying_turn(dbos_env, tid, prompts)
    restarted = DbosRuntime(dbos_env.store.engine, lease_seconds=60)
    await restarted.launch("sqlite:///unused.db")  # DBOS is launched: this only takes recoveries
    # The loop registers its `resume` as the restarted runtime's resumer.
    dbos_env.loop(
        ScriptedProvider([_answer(prompts)]), window_history(max_messages=3), runtime=restarted
    )
    # What launch's recovery does for each pending workflow of its executor, for this one only
    # (other tests' cancelled turns may have left theirs pending).
    await asyncio.to_thread(_recover, run_id)
    for _ in range(200):
        record = await restarted.get_run(run_id)
        if record is not None and record.status == "completed":
            break
        await asyncio.sleep(0.05)
    assert record is not None and record.status == "completed"
    assert prompts[0] == prompts[1]
    assert await _settled_status(run_id) == "SUCCESS"
    assert await _status(attempt_workflow_id(run_id, 2)) is None, "the same attempt, recovered"
    own = await _own_steps(run_id)
    assert own.count("load:thread") == 1 and own.count("persist:assistant") == 1, own
    thread = await dbos_env.store.get_thread(tid)
    assert thread is not None
    assert [m.content for m in thread.messages].count("resumed answer") == 1


def _recover(workflow_id: str) -> None:
    from dbos._dbos import _get_dbos_instance
    from dbos._recovery import _recover_workflow
    from dbos._utils import GlobalParams

    dbos = _get_dbos_instance()
    [pending] = [
        w
        for w in dbos._sys_db.get_pending_workflows(
            GlobalParams.executor_id, GlobalParams.app_version
        )
        if w.workflow_id == workflow_id
    ]
    _recover_workflow(dbos, pending, [GlobalParams.executor_id])


async def test_the_inspectors_timeline_reads_a_dbos_runs_checkpoints(dbos_env: LoopEnv) -> None:
    tid = await dbos_env.thread()
    loop = dbos_env.loop(ScriptedProvider([reply("a1")]), window_history(max_messages=3))
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="q1", run_id=str(uuid.uuid4())
    )
    [trace] = await dbos_env.journal.thread_runs(tid, limit=5)
    assert trace.run_id == result.run_id and trace.status == "completed"
    assert trace.steps == await dbos_env.step_names(result.run_id)
    assert trace.payloads["load:thread"]["keep_refs"] == [1]  # "q1", by seq
