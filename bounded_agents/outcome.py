"""A run's stored outcome: what a request repeating an Idempotency-Key is answered, and what a
client whose run another process finished (it stalled past the run's lease) is answered,
instead of a second turn or a 409.

Both come from what the run left: its record (status, report, recorded failure) and its stored
answer. Neither calls the model, nor reads the journal, which retention prunes: the record and
the answer stay as long as the thread. A run still running is waited for, by polling its record
(one primary-key read each time, backing off to `POLL_MAX_SECONDS`), since it may run in another
process; past the wait the caller says it is still running.
"""

from __future__ import annotations

from tenacity import (
    AsyncRetrying,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
)

from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import AgentStore, RunRecord
from bounded_agents.core.report import RunReport, RunResult
from bounded_agents.errors import AnswerErased, RecordedFailure, RunFailed

POLL_FIRST_SECONDS = 0.05
POLL_MAX_SECONDS = 0.5


async def await_outcome(loop: AgentLoop, run_id: str, wait_seconds: float) -> RunResult | None:
    """The run's answer once it ended, waiting up to `wait_seconds` for it; None if it still
    runs by then. A run that failed raises `RunFailed` with its recorded failure (the code and
    status its own client was answered); a completed run whose answer was erased raises
    `AnswerErased` at once (waiting would not bring it back)."""
    retrying = AsyncRetrying(
        stop=stop_after_delay(wait_seconds),
        wait=wait_exponential(multiplier=POLL_FIRST_SECONDS, max=POLL_MAX_SECONDS),
        retry=retry_if_result(lambda outcome: outcome is None),
        retry_error_callback=lambda _state: None,
    )
    result: RunResult | None = await retrying(_ended, loop, run_id)
    return result


async def _ended(loop: AgentLoop, run_id: str) -> RunResult | None:
    record = await loop.runtime.get_run(run_id)
    if record is None or record.status == "running":
        return None
    if record.status == "failed":
        code = record.error_code or "run_failed"
        raise RunFailed(run_id, RecordedFailure(code, record.error_message or code))
    result = await stored_result(loop.store, run_id, record)
    if result is None:
        raise AnswerErased(run_id)
    return result


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
