"""Waiters on a running run's outcome (`await_outcome`), on SQLite and PostgreSQL: a retry
storm of one Idempotency-Key must not starve the connection pool of every other user. Waiters
on one run in a process share one poll of its record, so 300 of them read it as often as one
does; each keeps its own wait, a cancelled one takes nothing from the others, the poll stops
once nobody waits, and every waiter is answered alike (the answer, `RunFailed`,
`AnswerErased`).

Reads are counted by a wrapper around the journal's `get_run`, per run id."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.ports import ModelRequest, ModelResponse, RunRecord
from bounded_agents.core.report import RunResult
from bounded_agents.errors import AnswerErased, ProviderTimeout, RecordedFailure, RunFailed
from bounded_agents.outcome import await_outcome
from bounded_agents.store.schema import messages
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv

pytestmark = SQL_JOURNAL_ONLY  # the poll reads `get_run`, whichever runtime answers it

LONG = 60.0
"""A wait no test reaches: its waiters are answered by the run's end."""


def counted_reads(env: LoopEnv, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """`get_run` calls from now on, by run id."""
    reads: Counter[str] = Counter()
    inner = env.journal.get_run

    async def get_run(run_id: str) -> RunRecord | None:
        reads[run_id] += 1
        return await inner(run_id)

    monkeypatch.setattr(env.journal, "get_run", get_run)
    return reads


async def started_turn(env: LoopEnv, loop: AgentLoop) -> tuple[str, asyncio.Task[RunResult]]:
    """A turn started in a new thread of alice's, as a task: its run id and the task."""
    run_id = str(uuid.uuid4())
    turn = asyncio.create_task(
        loop.run_turn(
            agent="helper",
            thread_id=await env.thread(),
            actor_id="alice",
            content="the question",
            run_id=run_id,
        )
    )
    return run_id, turn


async def held_turn(
    env: LoopEnv, loop: AgentLoop, gate: Gate
) -> tuple[str, asyncio.Task[RunResult]]:
    """A turn started and held at its model call by `gate`: its run is `running`."""
    started = await started_turn(env, loop)
    await gate.reached()
    return started


def gated_loop(env: LoopEnv, *gates: Gate) -> AgentLoop:
    return env.loop(ScriptedProvider(gates), window_history(max_messages=10))


async def test_300_waiters_on_a_running_run_read_its_record_about_as_often_as_one_waiter(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = [Gate(reply("the answer")), Gate(reply("another answer"))]
    loop = gated_loop(env, *gates)
    reads = counted_reads(env, monkeypatch)
    run_id, turn = await held_turn(env, loop, gates[0])

    started = time.monotonic()
    waiters = [asyncio.create_task(await_outcome(loop, run_id, LONG)) for _ in range(300)]
    await asyncio.sleep(1.5)
    gates[0].release.set()
    answers = await asyncio.gather(*waiters)
    took = time.monotonic() - started
    result = await turn

    # One waiter alone, on another running run, over as long as the 300 waited.
    other, other_turn = await held_turn(env, loop, gates[1])
    alone = await await_outcome(loop, other, took)
    gates[1].release.set()
    await other_turn

    print(f"\n300 waiters over {took:.2f} s: {reads[run_id]} reads; one waiter: {reads[other]}")
    assert alone is None
    assert answers == [result] * 300
    assert len({id(answer) for answer in answers}) == 300  # each its own, free to change it
    assert reads[run_id] <= reads[other] + 2, (reads[run_id], reads[other])


@pytest.mark.parametrize("short_first", [True, False], ids=["short-joins-first", "long-first"])
async def test_a_waiter_whose_wait_ends_gets_none_while_a_longer_one_gets_the_answer(
    env: LoopEnv, short_first: bool
) -> None:
    """Whichever started the poll, the short waiter leaving it does not end it."""
    gate = Gate(reply("the answer"))
    loop = gated_loop(env, gate)
    run_id, turn = await held_turn(env, loop, gate)

    started = time.monotonic()
    # Tasks start in the order they are made: the first one's waiter starts the poll.
    if short_first:
        short = asyncio.create_task(await_outcome(loop, run_id, 0.3))
        long = asyncio.create_task(await_outcome(loop, run_id, LONG))
    else:
        long = asyncio.create_task(await_outcome(loop, run_id, LONG))
        short = asyncio.create_task(await_outcome(loop, run_id, 0.3))
    assert await short is None
    waited = time.monotonic() - started
    await asyncio.sleep(0.6)  # past a read or two of the poll: the long waiter still waits
    still_waiting = not long.done()
    gate.release.set()

    assert 0.3 <= waited < 1.5, waited  # its own deadline, not the run's end
    assert still_waiting
    assert await long == await turn


async def test_a_cancelled_waiter_leaves_the_others_answered(env: LoopEnv) -> None:
    """The first waiter started the shared poll; its client going away does not stop it."""
    gate = Gate(reply("the answer"))
    loop = gated_loop(env, gate)
    run_id, turn = await held_turn(env, loop, gate)

    waiters = [asyncio.create_task(await_outcome(loop, run_id, LONG)) for _ in range(3)]
    await asyncio.sleep(0.3)
    waiters[0].cancel()
    await asyncio.sleep(0.6)
    gate.release.set()
    answers = await asyncio.gather(*waiters[1:])

    assert waiters[0].cancelled()
    assert answers == [await turn] * 2


@pytest.mark.parametrize("how", ["answered", "timed-out", "cancelled"])
async def test_once_every_waiter_is_gone_no_poll_is_left(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Nothing left running (no task beyond those before the waiters came) and nothing reads
    the record any more: a poll left behind would read it twice a second."""
    gate = Gate(reply("the answer"))
    loop = gated_loop(env, gate)
    reads = counted_reads(env, monkeypatch)
    run_id, turn = await held_turn(env, loop, gate)
    before = asyncio.all_tasks()

    wait = 0.3 if how == "timed-out" else LONG
    waiters = [asyncio.create_task(await_outcome(loop, run_id, wait)) for _ in range(5)]
    await asyncio.sleep(0.6)
    if how == "answered":
        gate.release.set()
        await turn
    elif how == "cancelled":
        for waiter in waiters:
            waiter.cancel()
    ended = await asyncio.gather(*waiters, return_exceptions=True)
    await asyncio.sleep(0)  # done callbacks run
    left = asyncio.all_tasks() - before
    read = reads[run_id]
    await asyncio.sleep(1.2)
    read_after = reads[run_id]
    gate.release.set()
    await turn

    if how == "answered":
        assert ended == [await turn] * 5
    elif how == "timed-out":
        assert ended == [None] * 5
    else:
        assert all(isinstance(e, asyncio.CancelledError) for e in ended)
    assert read > 0
    assert left == set(), left
    assert read_after == read


async def test_a_failed_run_raises_run_failed_with_its_recorded_failure_for_every_waiter(
    env: LoopEnv,
) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def times_out(_request: ModelRequest) -> ModelResponse:
        entered.set()
        await release.wait()
        raise ProviderTimeout("the model took too long")

    loop = env.loop(ScriptedProvider([times_out]), window_history(max_messages=10))
    run_id, turn = await started_turn(env, loop)
    await asyncio.wait_for(entered.wait(), 10)
    waiters = [asyncio.create_task(await_outcome(loop, run_id, LONG)) for _ in range(5)]
    await asyncio.sleep(0.3)
    release.set()
    ended = await asyncio.gather(*waiters, return_exceptions=True)
    with pytest.raises(RunFailed) as first:
        await turn

    assert all(isinstance(e, RunFailed) for e in ended), ended
    failures = [e for e in ended if isinstance(e, RunFailed)]
    assert {e.run_id for e in failures} == {run_id}
    assert all(isinstance(e.cause, RecordedFailure) for e in failures)
    assert {e.cause_code for e in failures} == {first.value.cause_code} == {"provider_timeout"}
    assert len({id(e) for e in failures}) == 5  # each its own, raised in its own task


async def test_a_completed_run_whose_answer_was_erased_raises_answer_erased_for_every_waiter(
    env: LoopEnv,
) -> None:
    loop = env.loop(ScriptedProvider([reply("the answer")]), window_history(max_messages=10))
    tid = await env.thread()
    done = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=str(uuid.uuid4())
    )
    async with env.store.engine.begin() as conn:
        await conn.execute(messages.delete().where(messages.c.run_id == done.run_id))

    ended = await asyncio.gather(
        *(await_outcome(loop, done.run_id, LONG) for _ in range(5)), return_exceptions=True
    )

    assert all(isinstance(e, AnswerErased) for e in ended), ended
    assert {e.run_id for e in ended if isinstance(e, AnswerErased)} == {done.run_id}


async def test_a_waiter_with_no_wait_left_is_answered_by_a_run_that_ended(env: LoopEnv) -> None:
    """A wait of 0 (or one that ends before the poll's first read) still takes that read's
    answer: a repeat after its run ended gets the answer, not "still running"."""
    loop = env.loop(ScriptedProvider([reply("the answer")]), window_history(max_messages=10))
    done = await loop.run_turn(
        agent="helper",
        thread_id=await env.thread(),
        actor_id="alice",
        content="q",
        run_id=str(uuid.uuid4()),
    )

    assert await await_outcome(loop, done.run_id, 0) == done
