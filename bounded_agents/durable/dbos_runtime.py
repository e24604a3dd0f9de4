"""DbosRuntime: every attempt of a run is a DBOS workflow, every checkpoint a DBOS step.

Optional (the `dbos` extra: `pip install '.[dbos]'` from a clone; `AGENT_DURABLE=dbos`);
docs/dbos.md has the whole design. In short:

- The `runs` row and its lease stay `SqlJournal`'s (this class is one): the partial unique
  index is the thread's lock (a second turn gets `ThreadBusy`, 409), `keep_alive` renews the
  lease, the sweep resumes runs whose lease lapsed (a dead process on another host: open-source
  DBOS recovers only its own executor's workflows at `DBOS.launch()`).
- An attempt is the workflow `bounded_agents.run_attempt(run_id, thread_id, attempt, token)`;
  its workflow id is `run_id` for the first attempt, `run_id#attempt-<n>` for later ones (a
  resume of a failed run, or a takeover by the sweep). Each `ctx.step(name, fn)` is
  `DBOS.run_step_async` named `name`; its output (the JSON the SQL journal would store) is what
  a recovery replays, so `load:thread` runs once and the model gets the same prompt.
  `ctx.patched(marker)` is `DBOS.patch_async(marker)`.
- A later attempt replays the earlier attempts' successful steps (and any `run_steps` rows a
  `SqlJournal` left for the run) before its own: what `SqlJournal` replays, read from DBOS.
- DBOS's own recovery calls the workflow again after a restart with the same executor id; it
  finds no body registered for the attempt, so it hops onto the app's event loop and calls the
  loop's `resume(run_id)`. That resume takes the lease at once when it is still held under the
  token the attempt was started with (its holder was this executor's previous incarnation),
  and otherwise competes for it like any resume.
- Steps cannot share the project's transaction (DBOS writes its checkpoints on its own
  connection): `unit_of_work()` batches nothing and `transaction()` is None, so every write
  commits on its own before its checkpoint. Every store write of the loop is idempotent (one
  message per run and role, one summary per boundary), so a step replayed after a crash between
  its write and its checkpoint writes nothing twice; the run's end commits after the answer.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.core.checkpoints import patch_step
from bounded_agents.core.ports import (
    DurableContext,
    RunRequest,
    RunResumer,
    RunTrace,
)
from bounded_agents.durable.dbos_context import DbosContext, DbosStep, StepFailed
from bounded_agents.durable.dbos_setup import (
    APPLICATION_VERSION,
    dbos_config,
    dbos_system_url,
    destroy_dbos,
    launch_dbos,
)
from bounded_agents.durable.dbos_sweep import ErasedRunSweep, outside_workflow
from bounded_agents.durable.journal import SqlJournal
from bounded_agents.durable.journal_history import timeline_payloads
from bounded_agents.errors import RunFailed, ThreadBusy
from bounded_agents.store import db_now, runs, wrap_db_errors, write_transaction

log = logging.getLogger(__name__)

_T = TypeVar("_T")

WORKFLOW_NAME = "bounded_agents.run_attempt"
_DBOS_PATCH = "DBOS.patch-"


_LATER_ATTEMPT = "#attempt-"
"""Between a run's id and its attempt number in the workflow ids of its second and later
attempts (the first attempt's workflow id is the run's)."""

FORGET_BATCH = 200
"""Runs whose DBOS workflows one list-and-delete round forgets (see `DbosRuntime._forget`)."""


def attempt_workflow_id(run_id: str, attempt: int) -> str:
    return run_id if attempt == 1 else f"{run_id}{_LATER_ATTEMPT}{attempt}"


@dataclass(frozen=True)
class _Recovery:
    run_id: str
    thread_id: str
    attempt: int
    token: str


_RECOVERING: contextvars.ContextVar[_Recovery | None] = contextvars.ContextVar(
    "bounded_agents_dbos_recovery", default=None
)
"""Set while DBOS's recovery of an attempt runs the loop's `resume` (see `_run_attempt`)."""
_PENDING: dict[str, Callable[[], Awaitable[str]]] = {}
"""Attempt workflow id -> the body `DbosRuntime.execute` started it for, in this process."""
_ACTIVE: DbosRuntime | None = None
"""The runtime DBOS's recovery hands runs to (one DBOS instance per process, so one runtime)."""


@DBOS.workflow(name=WORKFLOW_NAME)
async def _run_attempt(run_id: str, thread_id: str, attempt: int, token: str) -> str:
    """One attempt of a run. Started by `execute`, it runs the body registered for it; called
    by DBOS's recovery (after a restart), it finishes the run through the loop's `resume`.
    Returns how the attempt ended (`completed`, `failed:<code>`, `superseded`): the `runs` row
    stays the run's record; a failed run does not fail its workflow (DBOS would log each one)."""
    body = _PENDING.pop(attempt_workflow_id(run_id, attempt), None)
    if body is not None:
        return await body()
    runtime = _ACTIVE
    if runtime is None:
        raise RuntimeError(f"run {run_id}: DBOS recovered it, but no DbosRuntime is active here")
    return await runtime.recover(_Recovery(run_id, thread_id, attempt, token))


class DbosRuntime(SqlJournal):
    """`DurableRuntime` + `RunExecutor`: runs as DBOS workflows, the thread lease as `SqlJournal`
    keeps it. Needs `launch()` (DBOS is launched once per process) before the first run."""

    def __init__(self, engine: AsyncEngine, *, lease_seconds: float = 120.0) -> None:
        super().__init__(engine, lease_seconds=lease_seconds)
        self._contexts: dict[str, DbosContext] = {}
        self._fresh: set[str] = set()
        self._resumer: RunResumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._launched = False
        self._sweep = ErasedRunSweep(
            engine, workflow_name=WORKFLOW_NAME, later_attempt=_LATER_ATTEMPT, forget=self._forget
        )

    # --- SqlJournal, with DBOS checkpoints -----------------------------------------------------

    def _context(  # type: ignore[override]
        self, thread_id: str, run_id: str, history: list[Any]
    ) -> DbosContext:
        async def hold() -> None:
            async with wrap_db_errors("journal_step"), write_transaction(self._engine) as conn:
                await self._check_lease(conn, run_id)

        ctx = DbosContext(run_id, history, hold)
        self._contexts[run_id] = ctx
        return ctx

    async def begin(
        self, request: RunRequest, *, shared_first_unit: bool = False
    ) -> DurableContext:
        ctx = await super().begin(request)  # its steps commit one by one: none is shared
        self._fresh.add(request.run_id)
        return ctx

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        recovery = _RECOVERING.get()
        if recovery is not None and recovery.run_id == run_id:
            await self._take_back(recovery)
        self._fresh.discard(run_id)
        return await super().reopen(run_id)

    async def _take_back(self, recovery: _Recovery) -> None:
        """DBOS hands an executor only its own pending workflows: a lease still held under the
        token this attempt started with was held by this executor's previous life, so it is
        taken back at once, in one statement (as `claim_expired` takes a lapsed one; `reopen`
        then does not claim it again). Held under another token, the run is left to the
        ordinary claim: lapsed or failed, or busy."""
        token = str(uuid.uuid4())
        async with wrap_db_errors("claim_run"), write_transaction(self._engine) as conn:
            taken = await conn.execute(
                runs.update()
                .where(
                    runs.c.thread_id == recovery.thread_id,
                    runs.c.id == recovery.run_id,
                    runs.c.owner == recovery.token,
                    runs.c.status == "running",
                )
                .values(lease_expires_at=db_now(self._lease_seconds), owner=token)
            )
        if taken.rowcount:
            self._owners[recovery.run_id] = token
            self._threads[recovery.run_id] = recovery.thread_id
            self._swept.add(recovery.run_id)

    async def steps(self, run_id: str, thread_id: str | None = None) -> list[tuple[str, str]]:
        """(name, payload) of the run's journal: any `run_steps` rows, then the successful steps
        of its DBOS attempts in order (what a next attempt would replay)."""
        rows = await super().steps(run_id, thread_id)
        attempts = await self._attempts(run_id)
        carried = await self._carried(run_id, attempts + 1)
        return rows + [(s.name, s.payload) for s in carried]

    async def thread_runs(
        self, thread_id: str, *, limit: int, before_seq: int | None = None
    ) -> list[RunTrace]:
        """`SqlJournal`'s timeline, each run's checkpoints read from its DBOS attempts (the
        payloads of `load:thread` and `history:*`, as the SQL journal's timeline gives them)."""
        traces = await super().thread_runs(thread_id, limit=limit, before_seq=before_seq)
        filled = []
        for trace in traces:
            steps = await self.steps(trace.run_id, thread_id)
            payloads = timeline_payloads(steps)
            filled.append(
                trace.model_copy(update={"steps": [n for n, _ in steps], "payloads": payloads})
            )
        return filled

    async def _forget(self, run_ids: Sequence[str]) -> None:
        """Pruned runs: delete their DBOS workflows, every attempt's, whose checkpoints are the
        journal here (the prompts' selections, model answers, tool results). Deleting a
        workflow that is already gone does nothing, so a prune retried after a failure here
        finishes the job. In batches of `FORGET_BATCH` runs: DBOS asks for the later attempts
        with one LIKE per run, OR-ed, and SQLite refuses an expression deeper than 1,000 (found
        by attack: a thread of 1,000 runs could not be erased, after its store erasure had
        committed, so DBOS kept the erased message)."""
        ids = list(run_ids)
        for start in range(0, len(ids), FORGET_BATCH):
            batch = ids[start : start + FORGET_BATCH]
            later = await outside_workflow(
                functools.partial(
                    DBOS.list_workflows,
                    workflow_id_prefix=[f"{run_id}{_LATER_ATTEMPT}" for run_id in batch],
                    load_input=False,
                    load_output=False,
                )
            )
            await outside_workflow(DBOS.delete_workflows, [*batch, *(w.workflow_id for w in later)])

    # --- RunEraser -----------------------------------------------------------------------------

    async def thread_run_ids(self, thread_id: str) -> list[str]:
        """The thread's runs, by the `runs` rows (one shard on Citus: it names the thread)."""
        async with wrap_db_errors("thread_run_ids"), self._engine.connect() as conn:
            rows = await conn.execute(sa.select(runs.c.id).where(runs.c.thread_id == thread_id))
            return [str(row[0]) for row in rows]

    async def erase_runs(self, run_ids: Sequence[str]) -> None:
        """An erasure reaches DBOS too: the runs' workflows, every attempt's, and their step
        outputs (the selections, model answers and tool results the message may be in)."""
        if run_ids:
            await self._forget(run_ids)

    async def sweep_erased(self, *, since: datetime | None = None) -> int:
        """`ErasedRunSweeper`: delete the ended workflows whose run has no `runs` row any more
        (an erased thread's, whose DBOS deletion failed or whose run raced the erasure), in one
        bounded pass; how many. Never raises (`bounded_agents.durable.dbos_sweep`)."""
        return await self._sweep.sweep(since)

    # --- RunExecutor ---------------------------------------------------------------------------

    def register_resumer(self, resume: RunResumer) -> None:
        global _ACTIVE
        self._resumer = resume
        _ACTIVE = self

    async def execute(self, run_id: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        ctx = self._contexts.pop(run_id)
        recovery = _RECOVERING.get()
        if recovery is not None and recovery.run_id == run_id:
            # DBOS is recovering this attempt: we are inside its workflow already.
            ctx.carry(await self._carried(run_id, recovery.attempt))
            return await attempt()
        if run_id in self._fresh:
            self._fresh.discard(run_id)
            number = 1
        else:
            number = await self._next_attempt(run_id)
            ctx.carry(await self._carried(run_id, number))
        token = self._owners.get(run_id, "")
        thread_id = self._threads.get(run_id, "")
        outcome: list[_T] = []
        raised: list[BaseException] = []

        async def body() -> str:
            try:
                outcome.append(await attempt())
            except RunFailed as exc:
                raised.append(exc)
                return f"failed:{exc.cause_code}"
            except Exception as exc:
                raised.append(exc)
                return f"failed:{type(exc).__name__}"
            return "completed"

        workflow_id = attempt_workflow_id(run_id, number)
        _PENDING[workflow_id] = body
        try:
            with SetWorkflowID(workflow_id):
                await _run_attempt(run_id, thread_id, number, token)
        finally:
            _PENDING.pop(workflow_id, None)
        if raised:
            raise raised[0]
        return outcome[0]

    async def recover(self, recovery: _Recovery) -> str:
        """DBOS's recovery of an attempt (on DBOS's own event loop): finish the run on the app's
        loop, where its engine and connections live, through the loop's `resume`."""
        loop, resume = self._loop, self._resumer
        if loop is None or resume is None:
            raise RuntimeError(f"run {recovery.run_id}: recovered before the runtime was launched")

        async def on_app_loop() -> str:
            _RECOVERING.set(recovery)  # this task's own context: the loop's resume sees it
            log.info("run %s: DBOS recovers attempt %d", recovery.run_id, recovery.attempt)
            try:
                await resume(recovery.run_id)
            except ThreadBusy:
                log.info("run %s: held by another attempt; attempt %d stops", *_ids(recovery))
                return "superseded"
            except RunFailed as exc:
                return f"failed:{exc.cause_code}"
            return "completed"

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return await on_app_loop()
        # The DBOS context travels with the task: run_coroutine_threadsafe copies this context.
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(on_app_loop(), loop))

    # --- attempts, read from DBOS ------------------------------------------------------------

    async def _attempts(self, run_id: str) -> int:
        number = 0
        while await outside_workflow(
            DBOS.get_workflow_status, attempt_workflow_id(run_id, number + 1)
        ):
            number += 1
        return number

    async def _next_attempt(self, run_id: str) -> int:
        """The next attempt's number; earlier attempts still pending (their process died, or
        their task was cancelled) are cancelled first, so DBOS never recovers them: the run is
        this process's now (it holds the lease)."""
        number = 1
        while True:
            workflow_id = attempt_workflow_id(run_id, number)
            status = await outside_workflow(DBOS.get_workflow_status, workflow_id)
            if status is None:
                return number
            if status.status in ("PENDING", "ENQUEUED"):
                await outside_workflow(DBOS.cancel_workflow, workflow_id)
            number += 1

    async def _carried(self, run_id: str, attempt: int) -> list[DbosStep]:
        """The successful checkpoints of attempts 1..attempt-1, in order."""
        carried: list[DbosStep] = []
        for number in range(1, attempt):
            steps = await outside_workflow(
                DBOS.list_workflow_steps, attempt_workflow_id(run_id, number)
            )
            for step in steps:
                name = step["function_name"]
                if step["error"] is not None:
                    continue
                if name.startswith(_DBOS_PATCH):
                    carried.append(DbosStep(patch_step(name[len(_DBOS_PATCH) :]), "true"))
                elif not name.startswith("DBOS.") and isinstance(step["output"], str):
                    carried.append(DbosStep(name, step["output"]))
        return carried

    # --- the process's DBOS ------------------------------------------------------------------

    async def launch(
        self,
        system_database_url: str,
        *,
        executor_id: str | None = None,
        application_version: str | None = None,
    ) -> None:
        """Launch DBOS for this process (unless something launched it already) and take its
        recoveries: they run on the event loop this is called on. Then one pass of the sweep
        for erased runs' workflows: what an erasure owed DBOS when this process (or DBOS's
        system database) went down is paid at the restart, not left for good."""
        global _ACTIVE
        self._loop = asyncio.get_running_loop()
        _ACTIVE = self
        config = dbos_config(
            system_database_url,
            executor_id=executor_id,
            application_version=application_version,
        )
        self._launched = await asyncio.to_thread(launch_dbos, config)
        await self.sweep_erased()

    async def shutdown(self) -> None:
        """Destroy DBOS if `launch` launched it (not one a test session launched)."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
        if self._launched:
            self._launched = False
            await asyncio.to_thread(destroy_dbos)


def _ids(recovery: _Recovery) -> tuple[str, int]:
    return recovery.run_id, recovery.attempt


__all__ = [
    "APPLICATION_VERSION",
    "FORGET_BATCH",
    "WORKFLOW_NAME",
    "DbosContext",
    "DbosRuntime",
    "StepFailed",
    "attempt_workflow_id",
    "dbos_config",
    "dbos_system_url",
    "destroy_dbos",
    "launch_dbos",
]
