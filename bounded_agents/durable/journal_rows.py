"""The SQL journal's statements and row helpers: built once, shared by `SqlJournal` and
`DbosRuntime`."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import sqlalchemy as sa
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from bounded_agents.core.ports import (
    RunRequest,
    Transaction,
)
from bounded_agents.errors import (
    StoreError,
)
from bounded_agents.store import (
    SqlTransaction,
    db_now,
    direct,
    run_steps,
    runs,
    threads,
    wrap_db_errors,
)
from bounded_agents.store.engine import is_dead_connection, is_timeout

log = logging.getLogger(__name__)

# Built once: a statement whose values arrive as parameters is compiled and cached once,
# where `.values(...)` per call rebuilds and re-keys it on every journal write.
INSERT_STEP = run_steps.insert()
STEP_STORED = sa.select(sa.literal(1)).where(
    run_steps.c.thread_id == sa.bindparam("tid"),
    run_steps.c.run_id == sa.bindparam("rid"),
    run_steps.c.position == sa.bindparam("position"),
)
_OWNED = sa.and_(
    runs.c.thread_id == sa.bindparam("tid"),
    runs.c.id == sa.bindparam("rid"),
    runs.c.owner == sa.bindparam("holder"),
    runs.c.status == "running",
)
END_RUN = (
    runs.update()
    .where(_OWNED)
    .values(lease_expires_at=None, updated_at=sa.func.current_timestamp())
)


@functools.cache
def owned_run_insert(lease_seconds: float) -> sa.Insert:
    """A fresh run's row, inserted only if its thread is the request's actor's and agent's
    (issue 37): the ownership check a turn made as a read of its own, one round trip (one
    worker-thread hand-over on SQLite) before the insert, is the insert's own `WHERE`, so a
    turn not handed its thread sends one statement fewer. No row inserted: no such thread
    for that actor and agent. `thread_id`, `actor_id` and `agent` come from the thread's row,
    which the `WHERE` matched to the request's; selecting the thread's distribution column
    into the run's keeps the statement on one shard on Citus (runs are colocated with their
    thread). Parameters: `run_row`'s keys and `owner`."""
    owned = sa.select(
        sa.bindparam("id", type_=runs.c.id.type),
        threads.c.id,
        threads.c.actor_id,
        threads.c.agent,
        sa.bindparam("status", type_=runs.c.status.type),
        sa.bindparam("request", type_=runs.c.request.type),
        sa.bindparam("idempotency_key", type_=runs.c.idempotency_key.type),
        sa.bindparam("request_fingerprint", type_=runs.c.request_fingerprint.type),
        sa.bindparam("owner", type_=runs.c.owner.type),
        db_now(lease_seconds),
    ).where(
        threads.c.id == sa.bindparam("thread_id"),
        threads.c.actor_id == sa.bindparam("actor_id"),
        threads.c.agent == sa.bindparam("agent"),
    )
    columns = [
        "id",
        "thread_id",
        "actor_id",
        "agent",
        "status",
        "request",
        "idempotency_key",
        "request_fingerprint",
        "owner",
        "lease_expires_at",
    ]
    return runs.insert().from_select(columns, owned)


@functools.cache
def lease_renewal(lease_seconds: float) -> sa.Update:
    """Renew a lease this attempt holds: its new expiry is the database's clock plus the lease.
    One statement per lease length, shared by every journal (`bounded_agents.store.direct` keeps
    each statement's compiled form for the life of the process)."""
    return runs.update().where(_OWNED).values(lease_expires_at=db_now(lease_seconds))


KEYED_RUN = sa.select(runs.c.id, runs.c.request_fingerprint).where(
    runs.c.thread_id == sa.bindparam("tid"),
    runs.c.actor_id == sa.bindparam("actor"),
    runs.c.idempotency_key == sa.bindparam("key"),
)

LAPSED = sa.and_(runs.c.status == "running", runs.c.lease_expires_at < db_now())
"""A run whose process stopped renewing its lease, by the database's clock
(`bounded_agents.store.clock`)."""
TID: sa.BindParameter[str] = sa.bindparam("tid")
LAPSED_ROW = (
    sa.select(runs.c.id)
    .where(runs.c.thread_id == TID, runs.c.id == sa.bindparam("rid"), LAPSED)
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


def shuffle_candidates(items: list[Any]) -> None:
    """This process's own order: concurrent sweepers that read the same candidates try them in
    different orders, so they mostly take different runs instead of queuing on the same rows.
    Not for security: the order only spreads contention."""
    random.shuffle(items)


class JournalStep:
    __slots__ = ("name", "payload")

    def __init__(self, name: str, payload: str) -> None:
        self.name = name
        self.payload = payload


def step_rows(
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


def run_row(request: RunRequest, status: str) -> dict[str, Any]:
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
        # `follows_run` only when set: a run row written without it is the row of the release
        # before, which that release can still read after a rollback.
        "request": request.model_dump_json(exclude={"idempotency"}, exclude_none=True),
        "idempotency_key": keyed.key if keyed is not None else None,
        "request_fingerprint": keyed.fingerprint if keyed is not None else None,
    }


def worth_retrying(exc: BaseException) -> bool:
    """A database failure a run's end is tried again after: not one that timed out. A timeout
    has already waited a whole statement timeout (30 s by default) for a database that did not
    answer, as in a network partition; three more tries held a failing turn for three more of
    them (found by attack: 9.7 s of a 1 s timeout, 3.7 s of it in these retries). The end is
    kept in the process (`SqlJournal._unended`) and recorded at the thread's next turn there;
    if that process stops, or the next turn lands on another, the run holds its thread until
    its lease lapses and the sweep takes it (ended as `lease_expired`)."""
    return isinstance(exc, StoreError) and not is_timeout(exc)


async def with_retries(
    write: Callable[[], Awaitable[None]], *, after_timeouts: bool = False
) -> None:
    """`write` (a run's end), tried `END_ATTEMPTS` times, 0.1-1 s apart, while the database
    fails: every failure with `after_timeouts` (a write nothing else keeps for later: the row
    of a run whose first unit never committed), else those `worth_retrying`. The last failure
    is raised."""
    retry = retry_if_exception_type(StoreError) if after_timeouts else None
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(END_ATTEMPTS),
        wait=wait_exponential(multiplier=0.1, max=1.0),
        retry=retry or retry_if_exception(worth_retrying),
        reraise=True,
    ):
        with attempt:
            await write()


class SqlUnit:
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
                rows = step_rows(self.thread_id, self.run_id, steps)
                await direct.write_many(
                    self._tx.connection, INSERT_STEP, rows, "journal_unit", last=True
                )
        except BaseException:
            await self._tx.close(commit=False)
            raise
        try:
            await self._tx.close(commit=True)
        except StoreError as error:
            # The connection died at COMMIT: the server may have committed before its reply
            # was lost (a network cut, a proxy restart). Taken as failed, the unit was undone
            # although stored: the turn failed with its round kept, and the context's retry
            # of what waited collided with the stored steps (found by attack). Its last step,
            # read on a new connection, tells. A refusal or a timeout is not asked about: the
            # first is an answer, and a server that did not answer in time would not now.
            if not (steps and is_dead_connection(error) and await self._stored(steps[-1][0])):
                raise
            log.warning("run %s: COMMIT's reply was lost, but the unit is stored", self.run_id)
            for hook in self._tx.after_commit:
                hook()

    async def _stored(self, position: int) -> bool:
        """Whether the step at `position` is in the journal (False when that cannot be read:
        the unit is then taken as failed, as before the question was asked)."""
        params = {"tid": self.thread_id, "rid": self.run_id, "position": position}
        try:
            async with wrap_db_errors("journal_unit"), self._tx.engine.connect() as conn:
                return (await conn.execute(STEP_STORED, params)).first() is not None
        except StoreError:
            return False

    async def rollback(self) -> None:
        await self._tx.close(commit=False)


__all__ = [
    "CANDIDATES_PER_TAKE",
    "END_ATTEMPTS",
    "END_RUN",
    "INSERT_STEP",
    "KEYED_RUN",
    "LAPSED",
    "LAPSED_ROW",
    "STEP_STORED",
    "TID",
    "JournalStep",
    "SqlUnit",
    "lease_renewal",
    "owned_run_insert",
    "run_row",
    "shuffle_candidates",
    "step_rows",
    "with_retries",
    "worth_retrying",
]
