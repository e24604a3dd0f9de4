"""InlineRuntime: runs without a journal, for callers who opt out of durability.

Nothing survives the process: a run that dies is gone (its user message stays in the store).
Turns on one thread are still serialized, by an in-process set of busy threads (which an
erasure holds too: `hold`), and an Idempotency-Key names one run, by an in-process map.

What it remembers is bounded: a run's request text is dropped when the run ends (it was read
once, to store the user's message; keeping it grew the process by each message served, found
by attack: +47.7 MiB over 200 turns of 250 KB), and only the newest `MAX_ENDED_RUNS` ended runs
are remembered, with their keys: an older run is a 404, and a retry of its key runs again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from bounded_agents.core.erasure import redact_error
from bounded_agents.core.ports import DurableContext, RunRecord, RunRequest, Transaction
from bounded_agents.durable.context import InlineContext
from bounded_agents.errors import RunNotFound, ThreadBusy, TurnInProgress

MAX_ENDED_RUNS = 10_000
"""Ended runs remembered (for `GET /runs/{id}` and their Idempotency-Keys), oldest forgotten
first: a few KB each (a report, no text), so a few tens of MB at most."""


class InlineRuntime:
    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._busy: set[str] = set()
        """Threads a run holds (from `begin` to its end)."""
        self._erasing: dict[str, asyncio.Event] = {}
        """Threads an erasure holds (`hold`), each with the event set when it is done: a run or
        another erasure of the thread waits for it, as they would for the erasure's row locks
        under a journal."""
        self._ended = 0
        """Records in `_runs` that are not running (bounded by `MAX_ENDED_RUNS`)."""
        self._keys: dict[tuple[str, str, str], tuple[str, str]] = {}
        """(thread, actor, Idempotency-Key) -> (run id, request fingerprint): checked and set
        with no await in between, so one event loop never starts two runs under one key."""

    async def begin(
        self, request: RunRequest, *, shared_first_unit: bool = False
    ) -> DurableContext:
        await self._erasures_done(request.thread_id)
        keyed = request.idempotency
        scope = (request.thread_id, request.actor_id, keyed.key) if keyed is not None else None
        if scope is not None and scope in self._keys:
            raise TurnInProgress(*self._keys[scope])
        if request.thread_id in self._busy:
            raise ThreadBusy(request.thread_id)
        self._busy.add(request.thread_id)
        if scope is not None and keyed is not None:
            self._keys[scope] = (request.run_id, keyed.fingerprint)
        self._runs[request.run_id] = RunRecord(
            request=request, status="running", created_at=datetime.now(UTC)
        )
        return InlineContext(request.run_id)

    @asynccontextmanager
    async def keep_alive(self, run_id: str) -> AsyncIterator[None]:
        """No lease to renew; but a cancelled run must give its thread back, since nothing
        will ever resume it here (a journaled run stays `running` for the sweep instead)."""
        try:
            yield
        except asyncio.CancelledError:
            self._end(run_id, "failed", "cancelled", "the run was cancelled before it ended", {})
            raise

    @asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[None]:
        """The thread held for the block (an erasure): `ThreadBusy` while a run holds it; a
        run about to begin there, or another erasure, waits for the block to end (a second
        erasure of the same message then finds it gone: 404, as under a journal)."""
        await self._erasures_done(thread_id)
        if thread_id in self._busy:
            raise ThreadBusy(thread_id)
        done = self._erasing[thread_id] = asyncio.Event()
        try:
            yield
        finally:
            del self._erasing[thread_id]
            done.set()

    async def _erasures_done(self, thread_id: str) -> None:
        """Wait until no erasure holds the thread (none: no await at all, so `begin` keeps
        its check-and-set with no await between)."""
        while (erasing := self._erasing.get(thread_id)) is not None:
            await erasing.wait()

    async def thread_run_ids(self, thread_id: str) -> list[str]:
        """`RunEraser`: the thread's runs this process remembers (their requests hold the
        user's text)."""
        return [rid for rid, record in self._runs.items() if record.request.thread_id == thread_id]

    async def erase_runs(self, run_ids: Sequence[str]) -> None:
        """`RunEraser`: their requests' text blanked, as the SQL journal blanks `runs.request`
        (found by review: it stayed in this process's memory after the erasure), and a failed
        run's error redacted as the journal's erasure redacts it (`redact_error`: a provider
        may have echoed the erased text; found by attack). The records and their
        Idempotency-Keys stay, as the journal's run rows do on a message's erasure: a keyed
        retry is still answered by its run, never run and billed again."""
        for run_id in run_ids:
            record = self._runs.get(run_id)
            if record is None:
                continue
            update: dict[str, Any] = {"request": record.request.model_copy(update={"content": ""})}
            if record.error_message is not None:
                redacted = redact_error(record.error_code or "", record.error_message)
                if redacted is not None:
                    update["error_message"] = redacted
            self._runs[run_id] = record.model_copy(update=update)

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        raise RunNotFound(run_id)  # nothing was journaled, so nothing can be resumed

    async def complete(
        self, run_id: str, report: dict[str, Any], *, tx: Transaction | None = None
    ) -> None:
        self._end(run_id, "completed", None, None, report)

    async def fail(
        self, run_id: str, error_code: str, error_message: str, report: dict[str, Any]
    ) -> None:
        self._end(run_id, "failed", error_code, error_message, report)

    def _end(
        self,
        run_id: str,
        status: str,
        code: str | None,
        message: str | None,
        report: dict[str, Any],
    ) -> None:
        record = self._runs.pop(run_id)  # re-inserted: the dict's order is the ending order
        self._busy.discard(record.request.thread_id)
        self._runs[run_id] = record.model_copy(
            update={
                "request": record.request.model_copy(update={"content": ""}),
                "status": status,
                "error_code": code,
                "error_message": message,
                "report": report,
            }
        )
        self._ended += 1
        while self._ended > MAX_ENDED_RUNS:
            oldest = next(rid for rid, r in self._runs.items() if r.status != "running")
            self._forget(oldest)

    async def forget_runs(self, run_ids: Sequence[str]) -> None:
        """`RunForgetter`: a thread erased whole takes its runs' records and keys with it, as
        it takes the journal's rows (found by attack: `GET /runs/{id}` still answered 200 with
        the erased thread's id)."""
        for run_id in run_ids:
            self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        """The run's record and its Idempotency-Key, gone."""
        record = self._runs.pop(run_id, None)
        if record is None:
            return
        if record.status != "running":
            self._ended -= 1
        keyed = record.request.idempotency
        if keyed is not None:
            scope = (record.request.thread_id, record.request.actor_id, keyed.key)
            if self._keys.get(scope, ("",))[0] == run_id:
                del self._keys[scope]

    async def get_run(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    async def claim_expired(self, limit: int) -> list[str]:
        return []  # nothing outlives its process here

    async def find_keyed_run(
        self, thread_id: str, actor_id: str, key: str
    ) -> tuple[str, str] | None:
        return self._keys.get((thread_id, actor_id, key))
