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
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.core.checkpoints import encode_payload
from bounded_agents.core.ports import (
    DurableContext,
    RunRequest,
    Transaction,
)
from bounded_agents.durable.context import JournaledContext, Unit
from bounded_agents.durable.journal_history import JournalHistory
from bounded_agents.durable.journal_rows import (
    CANDIDATES_PER_TAKE,
    END_ATTEMPTS,
    END_RUN,
    INSERT_STEP,
    LAPSED,
    LAPSED_ROW,
    TID,
    JournalStep,
    SqlUnit,
    lease_renewal,
    owned_run_insert,
    run_row,
    shuffle_candidates,
    step_rows,
    with_retries,
)
from bounded_agents.errors import (
    JournalPruned,
    LeaseLost,
    RunNotFound,
    StoreError,
    ThreadBusy,
    ThreadNotFound,
    TurnInProgress,
)
from bounded_agents.store import (
    SqlTransaction,
    autocommit,
    db_now,
    direct,
    joined,
    open_write,
    run_steps,
    runs,
    wrap_db_errors,
    write_transaction,
)
from bounded_agents.store.driver import MissingParent, Outcome, UniqueConflict
from bounded_agents.store.engine import on_citus
from bounded_agents.store.sql import may_hold_thread_id
from bounded_agents.store.statements import THREAD_BY_ID

log = logging.getLogger(__name__)


class SqlJournal(JournalHistory):
    """`DurableRuntime` on the `runs` and `run_steps` tables.

    A fresh run's row is inserted in its first unit of work's transaction (`begin` leaves it
    open and the run's context commits it with the user's message and `load:thread`): one
    commit less per turn. Until that commit nothing of the run exists for anyone else; if the
    attempt fails first, `fail` records the run as failed in a transaction of its own (so it
    can be resumed, as any failed run), and if it is cancelled first, nothing of it remains.
    Only when the caller says every write of that unit joins it (`shared_first_unit`); DBOS's
    runtime, whose steps commit one by one, never does.

    `begin` checks the thread's owner in the run's insert (`owned_run_insert`): the loop
    sends no ownership read of its own (`OwnerCheckingRuntime`)."""

    checks_thread_owner = True

    def __init__(self, engine: AsyncEngine, *, lease_seconds: float = 120.0) -> None:
        self._engine = engine
        self._reader = autocommit(engine)
        self._lease_seconds = lease_seconds
        self._hold = lease_renewal(lease_seconds)
        self._insert_run_statement = owned_run_insert(lease_seconds)
        self._insert_run_values = runs.insert().values(lease_expires_at=db_now(lease_seconds))
        """On Citus: the run's row as given, after an ownership read (`_insert_run`)."""
        self._take_lapsed = (
            runs.update()
            .where(runs.c.thread_id == TID, runs.c.id.in_(LAPSED_ROW.scalar_subquery()))
            .values(lease_expires_at=db_now(lease_seconds), owner=sa.bindparam("token"))
        )
        """Claim one lapsed run, by its full key: one row, one shard (`claim_expired`)."""
        self._owners: dict[str, str] = {}
        """run id -> the token this process holds its lease with."""
        self._threads: dict[str, str] = {}
        """run id -> its thread, for the runs in `_owners`."""
        self._swept: set[str] = set()
        """Runs `claim_expired` took for this process that `reopen` has not taken up yet."""
        self._owner_known: set[str] = set()
        """Runs about to begin whose caller checked the thread's owner (`owner_checked`)."""
        self._first_units: dict[str, tuple[SqlUnit, RunRequest]] = {}
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
        finally:
            self._owner_known.discard(request.run_id)
        self._owners[request.run_id] = token
        self._threads[request.run_id] = request.thread_id
        if not shared_first_unit:
            await tx.close(commit=True)
            return self._context(request.thread_id, request.run_id, [])
        first = SqlUnit(request.thread_id, request.run_id, tx)
        self._first_units[request.run_id] = (first, request)
        tx.after_commit.append(functools.partial(self._first_committed, request.run_id))
        return self._context(request.thread_id, request.run_id, [], first)

    def owner_checked(self, run_id: str) -> None:
        """`OwnerCheckingRuntime`: the caller checked the owner of `run_id`'s thread, so its
        `begin` on Citus sends no owner read (one server checks in the insert anyway)."""
        self._owner_known.add(run_id)

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
        if not may_hold_thread_id(self._engine, request.thread_id):
            raise ThreadNotFound(request.thread_id)  # as the store's ownership read says
        try:
            values = {**run_row(request, "running"), "owner": token}
            # The insert opens the transaction: retried on a fresh connection if the pooled one
            # was dead (nothing was written), so the checkout skips its ping.

            async def insert(conn: AsyncConnection) -> None:
                if on_citus(self._engine):
                    # Citus runs an INSERT ... SELECT as a distributed one (planned for every
                    # shard, then pruned), not routed to the thread's shard as a plain statement
                    # is: there the owner is read first, in the same transaction, unless the
                    # caller checked it (`owner_checked`: the HTTP route loaded the thread).
                    # The store's own ownership read (`get_thread_info`'s statement).
                    if request.run_id not in self._owner_known:
                        read = await conn.execute(THREAD_BY_ID, {"tid": request.thread_id})
                        row = read.first()
                        if row is None or (row.actor_id, row.agent) != (
                            request.actor_id,
                            request.agent,
                        ):
                            raise ThreadNotFound(request.thread_id)
                    await conn.execute(self._insert_run_values, values)
                    return
                # The driver's way where it is open (about 100 us of SQLAlchemy's Python a
                # turn less, issue 37); its refusals come back as `UniqueConflict` and
                # `MissingParent`, SQLAlchemy's as `IntegrityError`.
                inserted = await direct.write(conn, self._insert_run_statement, values, "begin_run")
                if inserted.rowcount == 0:  # no thread of the request's actor and agent
                    raise ThreadNotFound(request.thread_id)

            return await open_write(self._engine, "begin_run", insert)
        except (sa_exc.IntegrityError, UniqueConflict, MissingParent) as exc:
            refused = _refusal(exc)
            if refused == "foreign":
                raise ThreadNotFound(request.thread_id) from exc
            if refused == "unique":
                await self._refuse_keyed(request)
                raise ThreadBusy(request.thread_id) from exc
            raise StoreError(f"begin_run: {refused}") from exc

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

    async def _release_expired(self, thread_id: str) -> bool:
        """A run whose lease ran out no longer holds the thread: mark it failed (resumable).

        Without this, a crashed process would lock its threads until a sweep resumed its runs.
        """
        async with wrap_db_errors("release_expired"), write_transaction(self._engine) as conn:
            released = await conn.execute(
                runs.update()
                .where(runs.c.thread_id == thread_id, LAPSED)
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
        history = [JournalStep(s.name, s.payload) for s in steps]
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
                        sa.or_(runs.c.status == "failed", LAPSED),
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
        history: list[JournalStep],
        first: SqlUnit | None = None,
    ) -> JournaledContext:
        async def write(steps: Sequence[tuple[int, str, str]]) -> None:
            async with wrap_db_errors("journal_step"), write_transaction(self._engine) as conn:
                await self._check_lease(conn, run_id)
                await conn.execute(INSERT_STEP, step_rows(thread_id, run_id, steps))

        async def open_unit() -> Unit:
            # The lease check opens the transaction: retried on a fresh connection if the pooled
            # one was dead, so the checkout skips its ping.
            tx = await open_write(
                self._engine, "journal_unit", lambda conn: self._check_lease(conn, run_id)
            )
            return SqlUnit(thread_id, run_id, tx)

        return JournaledContext(run_id, list(history), write, open_unit, first)

    async def _check_lease(self, conn: Any, run_id: str) -> None:
        """Still ours? The first statement of every journal transaction: it renews the lease
        and takes the run row's lock, so a takeover and this transaction cannot interleave.
        On SQLite it is deferred (`direct.write_later`): it goes out first in the unit's first
        call to the worker thread, still the transaction's first statement, and `LeaseLost`
        comes back from that call (the context books a paid call's row on its own then too).
        Never merged (`mergeable=False`): on PostgreSQL, where a waiting write pays only by
        going with the unit's last rows as one statement, it is sent now, so it keeps taking
        the run row's lock first and a lost lease is `LeaseLost`, never the rows' unique
        violation (a taker may have written those positions)."""

        def held(renewed: Outcome) -> LeaseLost | None:
            return LeaseLost(run_id) if renewed.rowcount == 0 else None

        await direct.write_later(
            conn, self._hold, self._held(run_id), "journal_unit", check=held, mergeable=False
        )

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
            # Nothing waits for it but a warning: on SQLite it rides in the unit's next call to
            # the worker thread, the journal rows' and the COMMIT (`direct.write_later`).
            async with wrap_db_errors("end_run"):
                await direct.write_later(
                    shared,
                    END_RUN,
                    params,
                    "end_run",
                    check=lambda ended: self._warn_if_taken(ended.rowcount, run_id),
                )
            assert isinstance(tx, SqlTransaction)
            tx.after_commit.append(lambda: self._let_go(run_id))
            return
        self._let_go(run_id)
        try:
            await with_retries(functools.partial(self._record_end, params))
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
            **run_row(request, status),
            "error_code": code,
            "error_message": message,
            "report": encode_payload(report),
            "lease_expires_at": None,
        }
        try:
            await with_retries(
                functools.partial(self._insert_ended_run, values), after_timeouts=True
            )
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
        """(Returns None: as a deferred write's check, it raises nothing.)"""
        if rowcount == 0:
            log.warning("run %s: taken over by another process; its record is left to it", run_id)

    async def _record_end(self, params: dict[str, Any]) -> None:
        async with wrap_db_errors("end_run"), write_transaction(self._engine) as conn:
            ended = await conn.execute(END_RUN, params)
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
            .where(LAPSED)
            .order_by(runs.c.lease_expires_at)
            .limit(limit * CANDIDATES_PER_TAKE)
        )
        async with wrap_db_errors("claim_expired"), self._reader.connect() as conn:
            found = [(r.thread_id, r.id) for r in await conn.execute(lapsed)]
        shuffle_candidates(found)
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


def _refusal(exc: sa_exc.IntegrityError | UniqueConflict | MissingParent) -> str:
    """Which integrity rule refused the run's insert: "foreign" (its thread is gone),
    "unique" (the thread's running run, or the request's key, is another run's), else the
    driver error's class (never its text: it may quote the request)."""
    if isinstance(exc, MissingParent):
        return "foreign"
    if isinstance(exc, UniqueConflict):
        return "unique"
    text = str(exc.orig).lower()
    if "foreign" in text:
        return "foreign"
    if "unique" in text or "duplicate" in text:
        return "unique"
    return type(exc.orig).__name__


__all__ = ["CANDIDATES_PER_TAKE", "END_ATTEMPTS", "INSERT_STEP", "SqlJournal"]
