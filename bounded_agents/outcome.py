"""A run's stored outcome: what a request repeating an Idempotency-Key is answered, and what a
client whose run another process finished (it stalled past the run's lease) is answered,
instead of a second turn or a 409.

Both come from what the run left: its record (status, report, recorded failure) and its stored
answer. Neither calls the model, nor reads the journal, which retention prunes: the record and
the answer stay as long as the thread. A run still running is waited for, by polling its record
(one primary-key read each time, backing off from `POLL_FIRST_SECONDS` to `POLL_MAX_SECONDS`),
since it may run in another process; past the wait the caller says it is still running.

The waiters on one run in a process share one poll. A client retrying one key while its turn
runs sends many repeats, and each waiting on a poll of its own made the reads grow with the
repeats (300 of them read 600 times a second), taking the pool from every other user's turn:
shared, they read as often as one waiter does. The first waiter starts the poll; each keeps
its own wait, and the poll stops when the run ended or when nobody waits any more. A waiter
whose client went away leaves the poll to the others.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import AgentStore, RunRecord
from bounded_agents.core.report import RunReport, RunResult
from bounded_agents.errors import AnswerErased, RecordedFailure, RunFailed

POLL_FIRST_SECONDS = 0.05
POLL_MAX_SECONDS = 0.5

_Ended = tuple[RunRecord, RunResult | None]
"""What an ended run left: its record, and its answer (None when failed or erased). The poll
hands this, not an exception, to its waiters, and each makes its own answer of it, as when it
read for itself: a copy of the result (a mutable model its caller may change), its own
exception (one object raised in many tasks would tangle their tracebacks). A read that failed
(the store unreachable) is the one exception that is shared: every waiter of that poll raises
the same `StoreError` object (copying an error generically would not rebuild every class)."""

_Key = tuple[asyncio.AbstractEventLoop, AgentLoop, str]
"""A poll's key in `_polls`: the event loop it runs on, the agent loop, the run id."""


async def await_outcome(loop: AgentLoop, run_id: str, wait_seconds: float) -> RunResult | None:
    """The run's answer once it ended, waiting up to `wait_seconds` for it; None if it still
    runs by then. A run that failed raises `RunFailed` with its recorded failure (the code and
    status its own client was answered); a completed run whose answer was erased raises
    `AnswerErased` at once (waiting would not bring it back)."""
    poll = _Poll.join(loop, run_id)
    try:
        ended = await poll.wait(wait_seconds)
    finally:
        poll.leave()
    if ended is None:
        return None
    record, result = ended
    if record.status == "failed":
        code = record.error_code or "run_failed"
        raise RunFailed(run_id, RecordedFailure(code, record.error_message or code))
    if result is None:
        raise AnswerErased(run_id)
    return result.model_copy(deep=True)


class _Poll:
    """One run's record, polled for all its waiters in this process."""

    def __init__(self, key: _Key, loop: AgentLoop, run_id: str) -> None:
        self.key = key
        self.waiters = 0
        self.read: asyncio.Future[None] = key[0].create_future()
        """Done once a read found the run still running."""
        self.task = asyncio.create_task(self._until_ended(loop, run_id))
        self.task.add_done_callback(self._ended)

    @staticmethod
    def join(loop: AgentLoop, run_id: str) -> _Poll:
        key = (asyncio.get_running_loop(), loop, run_id)
        poll = _polls.get(key)
        if poll is None:
            poll = _polls[key] = _Poll(key, loop, run_id)
        poll.waiters += 1
        return poll

    def leave(self) -> None:
        """Nobody left to answer: stop reading (a no-op once the run ended)."""
        self.waiters -= 1
        if self.waiters == 0:
            self.task.cancel()
            self._forget()

    async def wait(self, seconds: float) -> _Ended | None:
        """`asyncio.wait`, not the task itself, is awaited: a waiter cancelled, or whose wait
        is over, leaves the poll running for the others."""
        await asyncio.wait([self.task], timeout=seconds)
        if not self.task.done() and not self.read.done():
            # A wait over before the first read still takes its answer: a repeat with no wait
            # left is told the run's end if it ended. Later, the last read (at most
            # `POLL_MAX_SECONDS` old) is the answer, as it is for a waiter that stays.
            ends: list[asyncio.Future[Any]] = [self.task, self.read]
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        return self.task.result() if self.task.done() else None

    async def _until_ended(self, loop: AgentLoop, run_id: str) -> _Ended:
        pause = POLL_FIRST_SECONDS
        while True:
            record = await loop.runtime.get_run(run_id)
            if record is not None and record.status != "running":
                if record.status == "failed":
                    return record, None
                return record, await stored_result(loop.store, run_id, record)
            if not self.read.done():
                self.read.set_result(None)
            await asyncio.sleep(pause)
            pause = min(2 * pause, POLL_MAX_SECONDS)

    def _ended(self, task: asyncio.Task[_Ended]) -> None:
        self._forget()
        if not task.cancelled():
            task.exception()  # a read's error no waiter was left to take is not logged

    def _forget(self) -> None:
        if _polls.get(self.key) is self:
            del _polls[self.key]


_polls: dict[_Key, _Poll] = {}
"""The polls under way, by event loop, agent loop and run id: by agent loop, as the poll reads
through its runtime and store (a module has one); by event loop, as a waiter can only await a
task of its own (one module served from two threads, each with its event loop: joined to the
other's poll, a waiter was not woken by its end and sat out its whole wait). Emptied as polls
end: it holds no run that nobody waits for."""


async def stored_result(store: AgentStore, run_id: str, record: RunRecord) -> RunResult | None:
    """A completed run as its turn answered it: the stored answer and the recorded report.
    None when the answer is gone: a run is marked completed in the transaction that stores its
    answer (the SQL journal), so a completed run without one had it erased since."""
    stored = await run_messages(store, record.request.thread_id, run_id)
    answer = next((m for m in stored if m.role == "assistant"), None)
    if answer is None:
        return None
    report = (
        RunReport.model_validate(record.report)
        if record.report is not None
        else RunReport(run_id=run_id)
    )
    return RunResult(run_id=run_id, message=answer, report=report)


async def run_messages(store: AgentStore, thread_id: str, run_id: str) -> list[Message]:
    """The messages `run_id` stored, in seq order."""
    return await store.run_messages(thread_id, run_id)
