"""The sweep of DBOS workflows whose run is gone: what a thread's erasure owed DBOS and did not
pay, found again and deleted.

A thread's erasure deletes the thread with its `runs` rows, then its runs' DBOS workflows
(`DbosRuntime.erase_runs`), whose step outputs hold its messages. Two things left workflows
behind for good, the erased messages in them:

- the DBOS deletion failed after the store's erasure had committed (DBOS's system database
  unreachable a moment, the process killed between the two): a retry of the erasure finds no
  thread, and no `runs` row names the workflows any more;
- with more than one process, a run of the thread began after the erasure read its run ids and
  ended before the store's erasure, which refuses only a run live at that moment: its workflow
  was not among those deleted, and its `runs` row went with the thread.

Both leave the same mark, which nothing else of this project leaves: a workflow of the
run-attempt workflow whose run has no `runs` row (a pruned run keeps its row; its workflows
went with its journal). The sweep deletes exactly those, every attempt of their runs:

- only workflows named `WORKFLOW_NAME`: DBOS's own, or an application's, are never looked at;
- only ended ones: a live workflow (PENDING, ENQUEUED, DELAYED) is left for a later sweep, as
  its run's row may not be readable yet, and DBOS may still be running or recovering it;
- its run looked up in `runs` on the writer's engine, not a replica: a lagging replica would
  make a run begun a moment ago look gone.

It runs after every thread erasure, over the workflows begun since that erasure's first read
(a window of seconds: the second case), and at launch and in the module's periodic sweep over
all of them, a bounded pass at a time (the first case, and any second one the window missed).

DBOS lists only the workflows of this application's name, so the sweep assumes no other
deployment of that name, on another app database, shares the system database (the default
keeps the system tables in the app's database): one that did would take the other's ended
workflows for orphans. Workflows recorded under another application name are never looked at.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from dbos import DBOS
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.store import runs, wrap_db_errors

log = logging.getLogger(__name__)

_T = TypeVar("_T")

SWEEP_PAGE = 200
"""Workflows one page of the sweep lists, and at most the runs it looks up at once: one `IN`
of the store, and one DBOS listing by id prefix, which is one LIKE per run OR-ed (SQLite
refuses an expression deeper than 1,000: see `FORGET_BATCH` of `dbos_runtime`)."""
SWEEP_PAGES = 50
"""Pages one pass reads at most, so a pass stays short however many workflows DBOS keeps; the
next pass goes on from where this one stopped."""
SINCE_PAGES = 5
"""Pages the sweep after an erasure reads at most, newest first: it runs in the erasure's
request, and a run that raced the erasure is among the newest workflows; on a deployment busy
enough to start more than `SINCE_PAGES * SWEEP_PAGE` in the window, a periodic pass finds it."""
SINCE_MARGIN = timedelta(seconds=60)
"""How far before an erasure's first read its sweep looks: a workflow's start is dated by the
clock of the process that started it, and another process's clock may be behind this one's."""
LIVE = frozenset({"PENDING", "ENQUEUED", "DELAYED"})
"""DBOS statuses of a workflow not yet ended: never swept."""

Forget = Callable[[Sequence[str]], Awaitable[None]]
"""Deletes every attempt's workflow of these runs (`DbosRuntime._forget`)."""


async def outside_workflow(fn: Callable[..., _T], *args: Any) -> _T:
    """A DBOS call made as from outside any workflow (DBOS records such calls as steps of the
    calling workflow): on a worker thread, in an empty context."""
    return await asyncio.to_thread(contextvars.Context().run, fn, *args)


class ErasedRunSweep:
    """Sweeps the workflows of `workflow_name` whose run has no `runs` row. A run's workflow id
    is its run id, or its run id, `later_attempt` and a number; `forget` deletes a run's."""

    def __init__(
        self, engine: AsyncEngine, *, workflow_name: str, later_attempt: str, forget: Forget
    ) -> None:
        self._engine = engine
        self._workflow_name = workflow_name
        self._later_attempt = later_attempt
        self._forget = forget
        self._resume_at: int | None = None
        """Where the next full pass starts (a workflow's `created_at`, epoch ms), None for the
        oldest: a pass that stopped at `SWEEP_PAGES` leaves the rest to the next one."""

    async def sweep(self, since: datetime | None = None) -> int:
        """One bounded pass; the workflows deleted. `since`: only workflows begun then or later
        (less `SINCE_MARGIN`); None: the next stretch of all of them. Never raises: a failure
        is a warning, and the next pass looks again (nothing is marked done)."""
        tally = _Tally()
        try:
            if since is None:
                self._resume_at = await self._pass(self._resume_at, tally)
            else:
                start = _epoch_ms(since - SINCE_MARGIN)
                await self._pass(start, tally, newest_first=True, pages=SINCE_PAGES)
        except Exception as exc:
            log.warning(
                "DBOS: the sweep for erased runs' workflows failed after deleting %d "
                "workflows (%s: %s); the next sweep looks again",
                tally.deleted,
                type(exc).__name__,
                exc,
            )
            return tally.deleted
        if tally.deleted:
            log.info("DBOS: deleted %d workflows of runs erased with their thread", tally.deleted)
        return tally.deleted

    async def _pass(
        self,
        start_ms: int | None,
        tally: _Tally,
        *,
        newest_first: bool = False,
        pages: int = SWEEP_PAGES,
    ) -> int | None:
        """Up to `pages` pages of the workflows begun at `start_ms` or later, oldest first
        unless `newest_first`. Where the next pass starts (oldest first): None when this one
        reached the end.

        Pages by offset, less what each page deleted, so a deletion shifts no workflow past
        the next page. A workflow deleted meanwhile by someone else can still shift one past
        it, and one begun in the same millisecond as a pass's end is read again by the next:
        a miss waits for a later pass, a second read finds the same answer. No lock, no mark."""
        start = _iso(start_ms) if start_ms is not None else None
        offset = 0
        last = start_ms
        for _ in range(pages):
            page = await outside_workflow(
                functools.partial(
                    DBOS.list_workflows,
                    name=self._workflow_name,
                    start_time=start,
                    limit=SWEEP_PAGE,
                    offset=offset,
                    sort_desc=newest_first,
                    load_input=False,
                    load_output=False,
                )
            )
            if not page:
                return None
            ended = {
                w.workflow_id: self._run_id(w.workflow_id) for w in page if w.status not in LIVE
            }
            gone = await self._runs_gone(set(ended.values()))
            doomed = await self._attempts(gone)
            if doomed:
                await self._forget(sorted(set(doomed.values())))
                tally.deleted += len(doomed)
            offset += sum(1 for w in page if w.workflow_id not in doomed)
            last = page[-1].created_at or last
            if len(page) < SWEEP_PAGE:
                return None
        return last

    def _run_id(self, workflow_id: str) -> str:
        return workflow_id.split(self._later_attempt, 1)[0]

    async def _runs_gone(self, run_ids: set[str]) -> set[str]:
        """Those of `run_ids` with no `runs` row: one statement for a page. On Citus `runs` is
        distributed by `thread_id`, so an `IN` on `id` asks every shard: a multi-shard read,
        fine for a maintenance sweep (a turn never waits on it)."""
        if not run_ids:
            return set()
        async with wrap_db_errors("sweep_erased"), self._engine.connect() as conn:
            found = await conn.execute(sa.select(runs.c.id).where(runs.c.id.in_(sorted(run_ids))))
            return run_ids - {str(row[0]) for row in found}

    async def _attempts(self, run_ids: set[str]) -> dict[str, str]:
        """Workflow id -> run id of every attempt of those of `run_ids` whose attempts have all
        ended: `forget` deletes every attempt of a run, so a run with one still live (perhaps
        on a page to come) waits for a later pass whole. One listing by id prefix."""
        if not run_ids:
            return {}
        attempts = await outside_workflow(
            functools.partial(
                DBOS.list_workflows,
                workflow_id_prefix=sorted(run_ids),
                load_input=False,
                load_output=False,
            )
        )
        found = {w.workflow_id: self._run_id(w.workflow_id) for w in attempts}
        live = {found[w.workflow_id] for w in attempts if w.status in LIVE}
        return {w: run_id for w, run_id in found.items() if run_id in run_ids - live}


@dataclass
class _Tally:
    deleted: int = 0
    """Workflows deleted so far by this pass: what its warning reports if it fails."""


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _iso(epoch_ms: int) -> str:
    """DBOS takes a start time as ISO text, which it turns back into epoch milliseconds."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat()


__all__ = [
    "LIVE",
    "SINCE_MARGIN",
    "SINCE_PAGES",
    "SWEEP_PAGE",
    "SWEEP_PAGES",
    "ErasedRunSweep",
    "Forget",
    "outside_workflow",
]
