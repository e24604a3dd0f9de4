"""SqlJournal: runs and their steps in the project database (the embedded durable runtime).

Each step is committed on its own, or with the other steps and writes of its unit of work (see
`bounded_agents.store.tx`): a crash loses at most the step or unit in flight. A run holds its
thread through a lease: the partial unique index on runs(thread_id) WHERE status = 'running'
lets one run per thread exist, and `lease_expires_at`, renewed by `keep_alive` while the run
works, tells a live run from one whose process died.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from bounded_agents.core.ports import (
    DurableContext,
    PrunedStatus,
    RunRecord,
    RunRequest,
    RunTrace,
    Transaction,
)
from bounded_agents.durable.context import JournaledContext, Unit, encode_payload
from bounded_agents.errors import (
    JournalPruned,
    LeaseLost,
    RunNotFound,
    StoreError,
    ThreadBusy,
    ThreadNotFound,
    TurnInProgress,
)
from bounded_agents.store import direct
from bounded_agents.store.clock import db_now
from bounded_agents.store.engine import autocommit, write_transaction
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.schema import messages, run_steps, runs
from bounded_agents.store.sql import aware_utc
from bounded_agents.store.tx import SqlTransaction, joined, open_write

log = logging.getLogger(__name__)

# Built once: a statement whose values arrive as parameters is compiled and cached once,
# where `.values(...)` per call rebuilds and re-keys it on every journal write.
_INSERT_STEP = run_steps.insert()
_OWNED = sa.and_(
    runs.c.thread_id == sa.bindparam("tid"),
    runs.c.id == sa.bindparam("rid"),
    runs.c.owner == sa.bindparam("holder"),
    runs.c.status == "running",
)
_END_RUN = (
    runs.update()
    .where(_OWNED)
    .values(lease_expires_at=None, updated_at=sa.func.current_timestamp())
)


@functools.cache
def _hold(lease_seconds: float) -> sa.Update:
    """Renew a lease this attempt holds: its new expiry is the database's clock plus the lease.
    One statement per lease length, shared by every journal (`bounded_agents.store.direct` keeps
    each statement's compiled form for the life of the process)."""
    return runs.update().where(_OWNED).values(lease_expires_at=db_now(lease_seconds))


_KEYED_RUN = sa.select(runs.c.id, runs.c.request_fingerprint).where(
    runs.c.thread_id == sa.bindparam("tid"),
    runs.c.actor_id == sa.bindparam("actor"),
    runs.c.idempotency_key == sa.bindparam("key"),
)

_LAPSED = sa.and_(runs.c.status == "running", runs.c.lease_expires_at < db_now())
"""A run whose process stopped renewing its lease, by the database's clock
(`bounded_agents.store.clock`)."""
_TID: sa.BindParameter[str] = sa.bindparam("tid")
_LAPSED_ROW = (
    sa.select(runs.c.id)
    .where(runs.c.thread_id == _TID, runs.c.id == sa.bindparam("rid"), _LAPSED)
    .with_for_update(skip_locked=True)
)
"""The run (tid, rid) if it is still lapsed and no other transaction holds its row: a claim
skips a row another sweeper is taking that moment instead of waiting for it."""

CANDIDATES_PER_TAKE = 4
"""A sweep or a prune reads this many times the runs it may take: up to this many processes
sweeping at once each find enough that no other took (see `SqlJournal.claim_expired`)."""

END_ATTEMPTS = 4
"""Tries to record a run's end (0.1, 0.2, 0.4 s apart) before it is left for later: the answer
is stored by then, and a blip must not leave the run holding its thread."""


def _shuffle(items: list[Any]) -> None:
    """This process's own order: concurrent sweepers that read the same candidates try them in
    different orders, so they mostly take different runs instead of queuing on the same rows.
    Not for security: the order only spreads contention."""
    random.shuffle(items)


class _Step:
    __slots__ = ("name", "payload")

    def __init__(self, name: str, payload: str) -> None:
        self.name = name
        self.payload = payload


def _step_rows(
    thread_id: str, run_id: str, steps: Sequence[tuple[int, str, str]]
) -> list[dict[str, Any]]:
    return [
        {
            "thread_id": thread_id,
            "run_id": run_id,
            "position": position,
            "name": name,
            "payload": payload,
        }
        for position, name, payload in steps
    ]


def _run_row(request: RunRequest, status: str) -> dict[str, Any]:
    """The columns of a run's row that come from its request. The Idempotency-Key goes in its
    own columns only: `request` stays what every version of the code reads (a process not yet
    upgraded, resuming the run, refuses a member it does not know)."""
    keyed = request.idempotency
    return {
        "id": request.run_id,
        "thread_id": request.thread_id,
        "actor_id": request.actor_id,
        "agent": request.agent,
        "status": status,
        "request": request.model_dump_json(exclude={"idempotency"}),
        "idempotency_key": keyed.key if keyed is not None else None,
        "request_fingerprint": keyed.fingerprint if keyed is not None else None,
    }


async def _retried(write: Callable[[], Awaitable[None]]) -> None:
    """`write` (a run's end), tried `END_ATTEMPTS` times, 0.1-1 s apart, while the database
    fails; the last failure is raised."""
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(END_ATTEMPTS),
        wait=wait_exponential(multiplier=0.1, max=1.0),
        retry=retry_if_exception_type(StoreError),
        reraise=True,
    ):
        with attempt:
            await write()


class _SqlUnit:
    """A journal transaction the store and the ledger write into; committed with the steps."""

    def __init__(self, thread_id: str, run_id: str, transaction: SqlTransaction) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._tx = transaction

    @property
    def transaction(self) -> Transaction:
        return self._tx

    async def commit(self, steps: Sequence[tuple[int, str, str]]) -> None:
        try:
            async with wrap_db_errors("journal_unit"):
                rows = _step_rows(self.thread_id, self.run_id, steps)
                await direct.write_many(
                    self._tx.connection, _INSERT_STEP, rows, "journal_unit", last=True
                )
        except BaseException:
            await self._tx.close(commit=False)
            raise
        await self._tx.close(commit=True)

    async def rollback(self) -> None:
        await self._tx.close(commit=False)


class SqlJournal:
    """`DurableRuntime` on the `runs` and `run_steps` tables.

    A fresh run's row is inserted in its first unit of work's transaction (`begin` leaves it
    open and the run's context commits it with the user's message and `load:thread`): one
    commit less per turn. Until that commit nothing of the run exists for anyone else; if the
    attempt fails first, `fail` records the run as failed in a transaction of its own (so it
    can be resumed, as any failed run), and if it is cancelled first, nothing of it remains.
    Only when the caller says every write of that unit joins it (`shared_first_unit`); DBOS's
    runtime, whose steps commit one by one, never does."""

    def __init__(self, engine: AsyncEngine, *, lease_seconds: float = 120.0) -> None:
        self._engine = engine
        self._reader = autocommit(engine)
        self._lease_seconds = lease_seconds
        self._hold = _hold(lease_seconds)
        self._insert_run_statement = runs.insert().values(lease_expires_at=db_now(lease_seconds))
        self._take_lapsed = (
            runs.update()
            .where(runs.c.thread_id == _TID, runs.c.id.in_(_LAPSED_ROW.scalar_subquery()))
            .values(lease_expires_at=db_now(lease_seconds), owner=sa.bindparam("token"))
        )
        """Claim one lapsed run, by its full key: one row, one shard (`claim_expired`)."""
        self._owners: dict[str, str] = {}
        """run id -> the token this process holds its lease with."""
        self._threads: dict[str, str] = {}
        """run id -> its thread, for the runs in `_owners`."""
        self._swept: set[str] = set()
        """Runs `claim_expired` took for this process that `reopen` has not taken up yet."""
        self._first_units: dict[str, tuple[_SqlUnit, RunRequest]] = {}
        """Runs whose row waits, uncommitted, in their first unit of work (see the class)."""
        self._unended: dict[str, tuple[str, dict[str, Any]]] = {}
        """run id -> (thread id, the end's parameters): runs whose end could not be recorded
        (the database failed through every retry). Retried before a new turn on the thread is
        refused as busy, so a database blip at the end of a turn does not lock its thread for
        a whole lease; a run left here is also resumed by the sweep once its lease lapses."""

    async def begin(
        self, request: RunRequest, *, shared_first_unit: bool = False
    ) -> DurableContext:
        token = str(uuid.uuid4())
        try:
            tx = await self._insert_run(request, token)
        except ThreadBusy:
            # Only now look for a holder that is done or dead: the common turn pays one round
            # trip, not two.
            if not (
                await self._end_unended(request.thread_id)
                or await self._release_expired(request.thread_id)
            ):
                raise
            tx = await self._insert_run(request, token)
        self._owners[request.run_id] = token
        self._threads[request.run_id] = request.thread_id
        if not shared_first_unit:
            await tx.close(commit=True)
            return self._context(request.thread_id, request.run_id, [])
        first = _SqlUnit(request.thread_id, request.run_id, tx)
        self._first_units[request.run_id] = (first, request)
        tx.after_commit.append(functools.partial(self._first_committed, request.run_id))
        return self._context(request.thread_id, request.run_id, [], first)

    def _first_committed(self, run_id: str) -> None:
        self._first_units.pop(run_id, None)

    async def _abandon_first(self, run_id: str, *, forget: bool = False) -> RunRequest | None:
        """Roll back the run's first unit if it never committed (a no-op if it was rolled back
        already); its request when it had not (the run has no row then), else None. `forget`:
        drop it from `_first_units` too. A failed rollback is logged, not raised: the
        connection and the writer turn are given back anyway, and the attempt's own error is
        the one to report."""
        held = self._first_units.pop(run_id, None) if forget else self._first_units.get(run_id)
        if held is None:
            return None
        try:
            await held[0].rollback()
        except Exception:
            log.warning("run %s: its first unit did not roll back cleanly", run_id, exc_info=True)
        return held[1]

    async def _insert_run(self, request: RunRequest, token: str) -> SqlTransaction:
        try:
            values = {**_run_row(request, "running"), "owner": token}
            # The insert opens the transaction: retried on a fresh connection if the pooled one
            # was dead (nothing was written), so the checkout skips its ping.
            return await open_write(
                self._engine,
                "begin_run",
                lambda conn: conn.execute(self._insert_run_statement, values),
            )
        except sa_exc.IntegrityError as exc:
            text = str(exc.orig).lower()
            if "foreign" in text:
                raise ThreadNotFound(request.thread_id) from exc
            if "unique" in text or "duplicate" in text:
                await self._refuse_keyed(request)
                raise ThreadBusy(request.thread_id) from exc
            raise StoreError(f"begin_run: {type(exc.orig).__name__}") from exc

    async def _refuse_keyed(self, request: RunRequest) -> None:
        """After a unique violation: `TurnInProgress` when the request's key names a run
        already (the violation may be the key's index, the thread lease's, or both). Read only
        once the database refused the insert, so the index decides who runs, not this read."""
        keyed = request.idempotency
        if keyed is None:
            return
        found = await self.find_keyed_run(request.thread_id, request.actor_id, keyed.key)
        if found is not None:
            raise TurnInProgress(*found)

    async def find_keyed_run(
        self, thread_id: str, actor_id: str, key: str
    ) -> tuple[str, str] | None:
        """(run id, request fingerprint) of the thread's run under `key` (`KeyedRunFinder`):
        one lookup on the unique index that holds the key."""
        async with wrap_db_errors("keyed_run"), self._reader.connect() as conn:
            row = (
                await conn.execute(_KEYED_RUN, {"tid": thread_id, "actor": actor_id, "key": key})
            ).one_or_none()
        return (row.id, row.request_fingerprint or "") if row is not None else None

    async def _release_expired(self, thread_id: str) -> bool:
        """A run whose lease ran out no longer holds the thread: mark it failed (resumable).

        Without this, a crashed process would lock its threads until a sweep resumed its runs.
        """
        async with wrap_db_errors("release_expired"), write_transaction(self._engine) as conn:
            released = await conn.execute(
                runs.update()
                .where(runs.c.thread_id == thread_id, _LAPSED)
                .values(
                    status="failed",
                    error_code="lease_expired",
                    error_message="the run's process stopped before it finished",
                )
            )
        return bool(released.rowcount)

    @asynccontextmanager
    async def keep_alive(self, run_id: str) -> AsyncIterator[None]:
        """Renew the run's lease every third of its length while the block runs, so a long
        model call is never mistaken for a dead process. A process that dies stops renewing."""

        async def beat() -> None:
            interval = self._lease_seconds / 3
            while True:
                await asyncio.sleep(interval)
                try:
                    async with (
                        wrap_db_errors("renew_lease"),
                        write_transaction(self._engine) as conn,
                    ):
                        await conn.execute(self._hold, self._held(run_id))
                except StoreError:
                    log.warning("run %s: could not renew its lease", run_id)

        task = asyncio.create_task(beat())
        try:
            yield
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # Cancelled (or the process is exiting): `fail` is not called for it, so
                # nothing of the attempt may stay behind, an unbegun run least of all.
                await self._abandon_first(run_id, forget=True)
                self._let_go(run_id)
            raise
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            # An attempt that failed before its first unit committed may leave it open (if it
            # failed before the unit took it over): roll it back, so its connection and, on
            # SQLite, the writer turn are given back. `fail` then records the run on its own.
            await self._abandon_first(run_id)

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        """Claim an unfinished run (running with an expired lease, or failed) and replay it.

        The run is found by its id alone (one lookup, not on a turn's path); every statement
        after it names the run's thread."""
        async with wrap_db_errors("reopen_run"), self._reader.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(
                        runs.c.request, runs.c.status, runs.c.thread_id, runs.c.steps_pruned_at
                    ).where(runs.c.id == run_id)
                )
            ).one_or_none()
            if row is None:
                raise RunNotFound(run_id)
            if row.steps_pruned_at is not None:
                raise JournalPruned(run_id)
            steps = (
                await conn.execute(
                    sa.select(run_steps.c.name, run_steps.c.payload)
                    .where(run_steps.c.thread_id == row.thread_id, run_steps.c.run_id == run_id)
                    .order_by(run_steps.c.position)
                )
            ).all()
        request = RunRequest.model_validate_json(row.request)
        if run_id in self._swept:
            self._swept.discard(run_id)  # claimed by `claim_expired` a moment ago: ours already
        elif row.status != "completed":
            await self._claim(request)
        else:
            self._owners.pop(run_id, None)  # a finished run replays; nothing to hold
        history = [_Step(s.name, s.payload) for s in steps]
        return request, self._context(row.thread_id, run_id, history)

    async def _claim(self, request: RunRequest) -> None:
        token = str(uuid.uuid4())
        try:
            async with wrap_db_errors("claim_run"), write_transaction(self._engine) as conn:
                claimed = await conn.execute(
                    runs.update()
                    .where(
                        runs.c.thread_id == request.thread_id,
                        runs.c.id == request.run_id,
                        sa.or_(runs.c.status == "failed", _LAPSED),
                        # Pruned between `reopen`'s read of the journal and this claim: the
                        # attempt would run on from steps that are gone, and a crash of it
                        # would find nothing to replay.
                        runs.c.steps_pruned_at.is_(None),
                    )
                    .values(
                        status="running",
                        lease_expires_at=db_now(self._lease_seconds),
                        error_code=None,
                        error_message=None,
                        owner=token,
                    )
                )
                if claimed.rowcount == 0:
                    if await self._pruned(conn, request):
                        raise JournalPruned(request.run_id)
                    raise ThreadBusy(request.thread_id)  # the run is alive in another process
        except sa_exc.IntegrityError as exc:
            raise ThreadBusy(request.thread_id) from exc
        self._owners[request.run_id] = token
        self._threads[request.run_id] = request.thread_id
        self._unended.pop(request.run_id, None)  # this attempt ends it now

    @staticmethod
    async def _pruned(conn: AsyncConnection, request: RunRequest) -> bool:
        found = await conn.execute(
            sa.select(runs.c.steps_pruned_at).where(
                runs.c.thread_id == request.thread_id, runs.c.id == request.run_id
            )
        )
        return found.scalar() is not None

    def _held(self, run_id: str) -> dict[str, Any]:
        return {"tid": self._threads.get(run_id), "rid": run_id, "holder": self._owners.get(run_id)}

    def _context(
        self,
        thread_id: str,
        run_id: str,
        history: list[_Step],
        first: _SqlUnit | None = None,
    ) -> JournaledContext:
        async def write(steps: Sequence[tuple[int, str, str]]) -> None:
            async with wrap_db_errors("journal_step"), write_transaction(self._engine) as conn:
                await self._check_lease(conn, run_id)
                await conn.execute(_INSERT_STEP, _step_rows(thread_id, run_id, steps))

        async def open_unit() -> Unit:
            # The lease check opens the transaction: retried on a fresh connection if the pooled
            # one was dead, so the checkout skips its ping.
            tx = await open_write(
                self._engine, "journal_unit", lambda conn: self._check_lease(conn, run_id)
            )
            return _SqlUnit(thread_id, run_id, tx)

        return JournaledContext(run_id, list(history), write, open_unit, first)

    async def _check_lease(self, conn: Any, run_id: str) -> None:
        """Still ours? The first statement of every journal transaction: it renews the lease
        and takes the run row's lock, so a takeover and this transaction cannot interleave."""
        if (await direct.write(conn, self._hold, self._held(run_id), "journal_unit")).rowcount == 0:
            raise LeaseLost(run_id)

    async def complete(
        self, run_id: str, report: dict[str, Any], *, tx: Transaction | None = None
    ) -> None:
        await self._end(run_id, "completed", None, None, report, tx)

    async def fail(
        self, run_id: str, error_code: str, error_message: str, report: dict[str, Any]
    ) -> None:
        await self._end(run_id, "failed", error_code, error_message, report)

    async def _end(
        self,
        run_id: str,
        status: str,
        code: str | None,
        message: str | None,
        report: dict[str, Any],
        tx: Transaction | None = None,
    ) -> None:
        holder = self._owners.get(run_id)
        thread_id = self._threads.get(run_id, "")
        if holder is None:
            return  # a finished run that was only replayed: its record stays as it was
        unbegun = await self._abandon_first(run_id, forget=True)
        if unbegun is not None and await self._record_unbegun(
            unbegun, status, code, message, report
        ):
            # Failed before its first unit committed: the run had no row. It has one now, as
            # failed, so `GET /runs/{id}` shows it and it can be resumed like any failed run.
            self._let_go(run_id)
            return
        # Else the insert found the row: the first unit committed after all (its
        # acknowledgement was lost). It is this attempt's run: ended as any other.
        params = {
            "tid": thread_id,
            "rid": run_id,
            "holder": holder,
            "status": status,
            "error_code": code,
            "error_message": message,
            "report": encode_payload(report),
        }
        shared = joined(self._engine, tx)
        if shared is not None:
            # With the answer, in its unit: the run is let go of only once that commits, so a
            # unit that fails leaves it ours to fail.
            async with wrap_db_errors("end_run"):
                ended = await direct.write(shared, _END_RUN, params, "end_run")
            assert isinstance(tx, SqlTransaction)
            tx.after_commit.append(lambda: self._let_go(run_id))
            self._warn_if_taken(ended.rowcount, run_id)
            return
        self._let_go(run_id)
        try:
            await _retried(functools.partial(self._record_end, params))
        except StoreError:
            self._unended[run_id] = (thread_id, params)
            raise

    async def _record_unbegun(
        self,
        request: RunRequest,
        status: str,
        code: str | None,
        message: str | None,
        report: dict[str, Any],
    ) -> bool:
        """Insert the run row of a run whose first unit never committed, as ended; False when
        a row is there already. Retried as `_end` retries: a database fault that sank the
        first unit may well still be there, and without the row the run is gone."""
        values = {
            **_run_row(request, status),
            "error_code": code,
            "error_message": message,
            "report": encode_payload(report),
            "lease_expires_at": None,
        }
        try:
            await _retried(functools.partial(self._insert_ended_run, values))
        except sa_exc.IntegrityError:
            log.warning("run %s: its row was stored after all; ending it", request.run_id)
            return False
        return True

    async def _insert_ended_run(self, values: dict[str, Any]) -> None:
        async with wrap_db_errors("end_run"), write_transaction(self._engine) as conn:
            await conn.execute(runs.insert(), values)

    def _let_go(self, run_id: str) -> None:
        self._owners.pop(run_id, None)
        self._threads.pop(run_id, None)

    @staticmethod
    def _warn_if_taken(rowcount: int, run_id: str) -> None:
        if rowcount == 0:
            log.warning("run %s: taken over by another process; its record is left to it", run_id)

    async def _record_end(self, params: dict[str, Any]) -> None:
        async with wrap_db_errors("end_run"), write_transaction(self._engine) as conn:
            ended = await conn.execute(_END_RUN, params)
        self._warn_if_taken(ended.rowcount, params["rid"])

    async def _end_unended(self, thread_id: str) -> bool:
        """Record the ends this process could not record before, for runs on `thread_id`;
        True when one was (the thread may be free now)."""
        ended = False
        for run_id, (thread, params) in list(self._unended.items()):
            if thread == thread_id:
                await self._record_end(params)
                del self._unended[run_id]
                log.info("run %s: its end is recorded at last", run_id)
                ended = True
        return ended

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with wrap_db_errors("get_run"), self._reader.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(
                        runs.c.request,
                        runs.c.status,
                        runs.c.error_code,
                        runs.c.error_message,
                        runs.c.report,
                        runs.c.created_at,
                    ).where(runs.c.id == run_id)
                )
            ).one_or_none()
        if row is None:
            return None
        return RunRecord(
            request=RunRequest.model_validate_json(row.request),
            status=row.status,
            error_code=row.error_code,
            error_message=row.error_message,
            report=json.loads(row.report) if row.report else None,
            created_at=aware_utc(row.created_at),
        )

    async def expired_runs(self) -> list[str]:
        """Runs whose lease lapsed, oldest first: a look only (see `claim_expired` to take them)."""
        async with wrap_db_errors("expired_runs"), self._reader.connect() as conn:
            rows = await conn.execute(
                sa.select(runs.c.id).where(_LAPSED).order_by(runs.c.created_at)
            )
            return [r.id for r in rows]

    async def claim_expired(self, limit: int) -> list[str]:
        """Take up to `limit` runs whose lease lapsed and return their ids.

        Claim first, read after: a sweeper takes its runs, and only then reads those runs'
        journals. First one read (no lock) of up to `CANDIDATES_PER_TAKE` times `limit` lapsed
        runs, the oldest lease first; then each run, in an order of this sweeper's own, is
        claimed by a compare-and-set on its row (still running, lease still lapsed, by the
        database's clock), until `limit` are taken. Each claim is one statement on one row by
        its full key, which skips the row when another transaction holds it (`SKIP LOCKED`)
        and finds it taken when another sweeper claimed it first: one shard under Citus, which
        refuses the `FOR UPDATE` of a read across shards, and no lock held across runs. So
        sweepers split the dead runs between them (up to `CANDIDATES_PER_TAKE` sweepers at once
        leave none behind; more find the rest at their next sweep). `reopen` then resumes a
        claimed run without claiming it again."""
        token = str(uuid.uuid4())
        lapsed = (
            sa.select(runs.c.thread_id, runs.c.id)
            .where(_LAPSED)
            .order_by(runs.c.lease_expires_at)
            .limit(limit * CANDIDATES_PER_TAKE)
        )
        async with wrap_db_errors("claim_expired"), self._reader.connect() as conn:
            found = [(r.thread_id, r.id) for r in await conn.execute(lapsed)]
        _shuffle(found)
        params = {"token": token}
        claimed: list[str] = []
        for thread_id, run_id in found:
            if len(claimed) == limit:
                break
            async with wrap_db_errors("claim_expired"), write_transaction(self._engine) as conn:
                taken = await conn.execute(
                    self._take_lapsed, {**params, "tid": thread_id, "rid": run_id}
                )
            if taken.rowcount:
                self._owners[run_id] = token
                self._threads[run_id] = thread_id
                self._swept.add(run_id)
                claimed.append(run_id)
        return claimed

    async def prune_steps(
        self, older_than_seconds: float, limit: int, *, status: PrunedStatus = "completed"
    ) -> int:
        """Delete the journals of up to `limit` runs that ended with `status` at least
        `older_than_seconds` ago (by the database's clock); returns how many runs were pruned.

        A completed run's answer, report and ledger rows are elsewhere and stay; its steps are
        only what a replay would need, and a completed run never replays a model call again.
        A failed run's journal is what a resume replays, so the caller gives failed runs a
        longer retention; once pruned, resuming one is refused (`JournalPruned`). Running runs
        keep theirs.

        As `claim_expired` takes runs: one read (no lock) of up to `CANDIDATES_PER_TAKE` times
        `limit` prunable runs, oldest end first, from each shard's partial index; then one
        transaction for the batch that, a thread at a time in an order of this pruner's own,
        marks that thread's runs (those still prunable, skipping any row another pruner holds)
        and deletes their steps by the key prefix (thread_id, run_id). Every statement names
        one thread, so Citus routes each to one shard (it refuses a `FOR UPDATE` across
        shards), and none waits for a lock, so pruners never deadlock. Fewer than `limit`
        pruned: none are left, or other pruners took them."""
        candidates = (
            sa.select(runs.c.thread_id, runs.c.id)
            .where(
                runs.c.status == status,
                runs.c.steps_pruned_at.is_(None),
                runs.c.updated_at < db_now(-older_than_seconds),
            )
            .order_by(runs.c.updated_at)
            .limit(limit * CANDIDATES_PER_TAKE)
        )
        async with wrap_db_errors("prune_steps"), self._reader.connect() as conn:
            found = [(r.thread_id, r.id) for r in await conn.execute(candidates)]
        if not found:
            return 0  # the common sweep: one read, no write transaction
        by_thread: dict[str, list[str]] = {}
        for thread_id, run_id in found:
            by_thread.setdefault(thread_id, []).append(run_id)
        threads = list(by_thread.items())
        _shuffle(threads)
        pruned: list[str] = []
        async with wrap_db_errors("prune_steps"), write_transaction(self._engine) as conn:
            for thread_id, run_ids in threads:
                _shuffle(run_ids)
                while run_ids and len(pruned) < limit:
                    room = limit - len(pruned)
                    batch, run_ids = run_ids[:room], run_ids[room:]
                    pruned += await self._prune_thread(
                        conn, thread_id, batch, status, older_than_seconds
                    )
            if pruned:
                await self._forget(pruned)
        return len(pruned)

    @staticmethod
    async def _prune_thread(
        conn: AsyncConnection,
        thread_id: str,
        run_ids: list[str],
        status: str,
        older_than_seconds: float,
    ) -> list[str]:
        """Mark those of the thread's `run_ids` still prunable and no other transaction holds
        (`SKIP LOCKED`: this never waits, so pruners cannot deadlock), then delete their steps;
        the runs marked. The first write of the batch's transaction is a mark, as a write
        transaction starts with its write (see `write_transaction`)."""
        picked = (
            sa.select(runs.c.id)
            .where(
                runs.c.thread_id == thread_id,
                runs.c.id.in_(run_ids),
                runs.c.status == status,
                runs.c.steps_pruned_at.is_(None),
                runs.c.updated_at < db_now(-older_than_seconds),
            )
            .with_for_update(skip_locked=True)
        )
        mark = (
            runs.update()
            .where(runs.c.thread_id == thread_id, runs.c.id.in_(picked.scalar_subquery()))
            .values(steps_pruned_at=db_now())
            .returning(runs.c.id)
        )
        marked = list((await conn.execute(mark)).scalars())
        if marked:
            await conn.execute(
                run_steps.delete().where(
                    run_steps.c.thread_id == thread_id, run_steps.c.run_id.in_(marked)
                )
            )
        return marked

    async def _forget(self, run_ids: Sequence[str]) -> None:
        """What else holds the pruned runs' journals, deleted inside the pruning transaction:
        if this fails, nothing is marked and the next sweep takes the runs again. The SQL
        journal has nothing else (`DbosRuntime` has its workflows' checkpoints)."""

    async def thread_runs(
        self, thread_id: str, *, limit: int, before_seq: int | None = None
    ) -> list[RunTrace]:
        """The thread's newest runs (`RunTimelineReader`), found through their user messages:
        the `(thread_id, role, seq)` index gives them in order, each run by its primary key. A
        run whose user message is not stored yet (its first checkpoint in flight) is not listed.

        Payloads are read for the steps that say what the model was sent (`load:thread`,
        `history:summarize*`); every other step only by name."""
        found = (
            sa.select(
                messages.c.seq,
                runs.c.id,
                runs.c.status,
                runs.c.created_at,
                runs.c.error_code,
                runs.c.error_message,
                runs.c.report,
                runs.c.steps_pruned_at,
            )
            .join(
                runs,
                sa.and_(runs.c.thread_id == messages.c.thread_id, runs.c.id == messages.c.run_id),
            )
            .where(messages.c.thread_id == thread_id, messages.c.role == "user")
            .order_by(messages.c.seq.desc())
            .limit(limit)
        )
        if before_seq is not None:
            found = found.where(messages.c.seq < before_seq)
        wanted = sa.or_(run_steps.c.name == "load:thread", run_steps.c.name.like("history:%"))
        async with wrap_db_errors("thread_runs"), self._reader.connect() as conn:
            rows = (await conn.execute(found)).all()
            ids = [r.id for r in rows]
            steps = (
                (
                    await conn.execute(
                        sa.select(
                            run_steps.c.run_id,
                            run_steps.c.name,
                            sa.case((wanted, run_steps.c.payload), else_=None).label("payload"),
                        )
                        .where(run_steps.c.thread_id == thread_id, run_steps.c.run_id.in_(ids))
                        .order_by(run_steps.c.run_id, run_steps.c.position)
                    )
                ).all()
                if ids
                else []
            )
        names: dict[str, list[str]] = {}
        payloads: dict[str, dict[str, Any]] = {}
        for step in steps:
            names.setdefault(step.run_id, []).append(step.name)
            if step.payload is not None:
                payloads.setdefault(step.run_id, {})[step.name] = json.loads(step.payload)
        return [
            RunTrace(
                run_id=r.id,
                status=r.status,
                seq=r.seq,
                created_at=r.created_at.replace(tzinfo=UTC)
                if r.created_at.tzinfo is None
                else r.created_at,
                error_code=r.error_code,
                error_message=r.error_message,
                report=json.loads(r.report) if r.report else None,
                steps=names.get(r.id, []),
                payloads=payloads.get(r.id, {}),
                pruned=r.steps_pruned_at is not None,
            )
            for r in rows
        ]

    async def steps(self, run_id: str, thread_id: str | None = None) -> list[tuple[str, str]]:
        """(name, payload) of every journaled step, in order: for tests and inspection. With
        `thread_id`, one range of the primary key; without it, a scan of `run_steps`."""
        stmt = sa.select(run_steps.c.name, run_steps.c.payload).where(run_steps.c.run_id == run_id)
        if thread_id is not None:
            stmt = stmt.where(run_steps.c.thread_id == thread_id)
        async with wrap_db_errors("run_steps"), self._reader.connect() as conn:
            rows = await conn.execute(stmt.order_by(run_steps.c.position))
            return [(r.name, r.payload) for r in rows]
