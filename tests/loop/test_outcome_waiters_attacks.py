"""Review of the shared outcome poll (`bounded_agents.outcome`), as an outside attack: a store
failure during the poll, a waiter joining as the poll ends, waiters whose wait runs out while
the first read hangs, every waiter cancelled mid-read, and the same on SQLite and PostgreSQL
with the real journal."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bounded_agents import outcome
from bounded_agents.core.history import window_history
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import RunRecord, RunRequest
from bounded_agents.errors import StoreError
from bounded_agents.outcome import await_outcome
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv
from tests.loop.test_outcome_waiters import held_turn

RUN = "run-1"


def _record(status: str) -> RunRecord:
    request = RunRequest(run_id=RUN, thread_id="t", actor_id="a", agent="helper", content="q")
    return RunRecord(request=request, status=status)


class FakeRuntime:
    def __init__(self) -> None:
        self.reads = 0
        self.script: list[Any] = []
        """Per read: a status, an exception to raise, or an Event to wait on first."""

    async def get_run(self, run_id: str) -> RunRecord | None:
        self.reads += 1
        step = self.script.pop(0) if self.script else "running"
        while isinstance(step, asyncio.Event):
            await step.wait()
            step = self.script.pop(0) if self.script else "running"
        if isinstance(step, BaseException):
            raise step
        return _record(step)


class FakeStore:
    async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
        return [Message(role="assistant", content="the answer")]


class FakeLoop:
    def __init__(self) -> None:
        self.runtime = FakeRuntime()
        self.store = FakeStore()


def _wait(loop: FakeLoop, seconds: float) -> asyncio.Task[Any]:
    return asyncio.create_task(await_outcome(loop, RUN, seconds))  # type: ignore[arg-type]


async def test_a_store_failure_during_the_poll_fails_its_waiters_and_the_next_starts_afresh() -> (
    None
):
    loop = FakeLoop()
    loop.runtime.script = ["running", StoreError("get_run: database error (X)")]
    waiters = [_wait(loop, 10) for _ in range(3)]
    ended = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(e, StoreError) for e in ended), ended
    await asyncio.sleep(0)
    assert outcome._polls == {}
    loop.runtime.script = ["completed"]
    answer = await asyncio.wait_for(_wait(loop, 10), 5)
    assert answer is not None and answer.message.content == "the answer"


async def test_a_waiter_joining_as_the_poll_ends_takes_its_answer() -> None:
    """The poll's task is done, its done callback (which unlists it) not yet run: a waiter that
    starts then joins the finished poll and takes its answer, reading nothing more."""
    loop = FakeLoop()
    loop.runtime.script = ["completed"]
    late: list[asyncio.Task[Any]] = []
    seen: list[bool] = []

    class JoiningStore(FakeStore):
        async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
            # Still inside the poll's last step: this task's first step is scheduled before
            # the poll's done callback is.
            late.append(_wait(loop, 0))
            return await super().run_messages(thread_id, run_id)

    loop.store = JoiningStore()
    original = outcome._Poll.join

    def join(agent_loop: Any, run_id: str) -> outcome._Poll:
        poll = original(agent_loop, run_id)
        seen.append(poll.task.done())
        return poll

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(outcome._Poll, "join", staticmethod(join))
        early = await _wait(loop, 10)
        answer = await late[0]
    assert seen == [False, True]  # the late waiter joined the finished poll
    assert answer is not None and answer == early and answer is not early
    await asyncio.sleep(0)
    assert outcome._polls == {}
    assert loop.runtime.reads == 1


async def test_waiters_whose_wait_ends_during_a_hung_first_read_wait_for_that_read() -> None:
    """No answer before the first read: a repeat with no wait left is told the run's state,
    not guessed as running. The hung read ends: each waiter gets what it read."""
    loop = FakeLoop()
    hang = asyncio.Event()
    loop.runtime.script = [hang, "running"]
    short = [_wait(loop, 0.05) for _ in range(3)]
    await asyncio.sleep(0.3)
    assert not any(t.done() for t in short)
    hang.set()
    assert await asyncio.gather(*short) == [None, None, None]
    await asyncio.sleep(0)
    assert outcome._polls == {}


async def test_every_waiter_cancelled_mid_read_stops_the_poll() -> None:
    loop = FakeLoop()
    hang = asyncio.Event()
    loop.runtime.script = [hang]
    waiters = [_wait(loop, 10) for _ in range(3)]
    await asyncio.sleep(0.1)
    [poll] = outcome._polls.values()
    for w in waiters:
        w.cancel()
    ended = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(e, asyncio.CancelledError) for e in ended)
    await asyncio.sleep(0)
    assert poll.task.cancelled()
    assert outcome._polls == {}
    # A new waiter starts a new poll, which reads again.
    loop.runtime.script = ["completed"]
    assert await asyncio.wait_for(_wait(loop, 10), 5) is not None


async def test_a_waiter_cancelled_in_its_second_wait_leaves_the_others_the_read() -> None:
    loop = FakeLoop()
    hang = asyncio.Event()
    loop.runtime.script = [hang, "completed"]
    a, b = _wait(loop, 0.01), _wait(loop, 10)
    await asyncio.sleep(0.1)  # a's wait is over; it waits for the first read
    a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a
    hang.set()
    answer = await asyncio.wait_for(b, 5)
    assert answer is not None


@SQL_JOURNAL_ONLY
async def test_a_store_failure_during_a_real_poll_is_a_store_error_for_each_waiter(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite and PostgreSQL: the journal's `get_run` fails once mid-poll (a database
    blip). Each waiter then gets a `StoreError` (503), none a 500 or a hang; the next repeat
    starts a new poll and gets the answer."""
    gate = Gate(reply("the answer"))
    loop = env.loop(ScriptedProvider([gate]), window_history(max_messages=10))
    run_id, turn = await held_turn(env, loop, gate)
    inner = env.journal.get_run
    reads = 0

    async def failing_once(rid: str) -> RunRecord | None:
        nonlocal reads
        reads += 1
        if reads == 3:
            raise StoreError("get_run: database error (ConnectionDoesNotExistError)")
        return await inner(rid)

    monkeypatch.setattr(env.journal, "get_run", failing_once)
    waiters = [asyncio.create_task(await_outcome(loop, run_id, 30)) for _ in range(4)]
    ended = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 10)
    assert all(isinstance(e, StoreError) for e in ended), ended
    gate.release.set()
    result = await turn
    assert await asyncio.wait_for(await_outcome(loop, run_id, 30), 10) == result


def test_waiters_on_two_event_loops_each_get_the_end_in_time() -> None:
    """One AgentLoop served from two event loops (two threads, as two `TestClient`s or an
    embedding app's worker threads run it): each loop's waiters must poll on their own loop.
    Joined to the other loop's poll, a waiter awaited a task of another loop: it was not woken
    when that task ended (its callbacks ran on the other thread) and sat out its whole wait."""
    import threading
    import time

    loop = FakeLoop()
    ends_at = time.monotonic() + 0.3

    class EndingRuntime(FakeRuntime):
        async def get_run(self, run_id: str) -> RunRecord | None:
            return _record("completed" if time.monotonic() >= ends_at else "running")

    loop.runtime = EndingRuntime()
    took: dict[str, float] = {}
    answered: dict[str, bool] = {}

    def serve(name: str, delay: float) -> None:
        async def main() -> None:
            await asyncio.sleep(delay)
            started = time.monotonic()
            answer = await await_outcome(loop, RUN, 5)  # type: ignore[arg-type]
            took[name] = time.monotonic() - started
            answered[name] = answer is not None

        asyncio.run(main())

    threads = [
        threading.Thread(target=serve, args=("first", 0.0)),
        threading.Thread(target=serve, args=("second", 0.05)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert answered == {"first": True, "second": True}
    assert max(took.values()) < 2.0, took
    assert outcome._polls == {}
