"""The durable runtime's port: where runs live, and the journal one run's steps are kept in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from pydantic import Field

from bounded_agents.core.ports.frozen import Frozen

JsonValue: TypeAlias = Any
"""A value `json.dumps` accepts; what a durable step returns and its journal stores."""


Transaction: TypeAlias = object
"""An open unit of work a durable context hands out. Opaque to the core: it only passes it from
the context to the store and the ledger, which join it if it is theirs (same database)."""

StepFn: TypeAlias = Callable[[Transaction | None], Awaitable[JsonValue]]
"""A step's work, handed its unit's transaction (or None: see `DurableContext.step`)."""

StepRecorder: TypeAlias = Callable[[JsonValue, Transaction | None], Awaitable[None]]
"""What a step writes after its call returned (a ledger row), handed the transaction then."""


@runtime_checkable
class DurableContext(Protocol):
    """One run's journal, as the loop sees it."""

    async def step(
        self,
        name: str,
        fn: StepFn,
        *,
        writes: bool = False,
        record: StepRecorder | None = None,
    ) -> JsonValue:
        """Run `fn` once and journal its result; on replay return the journaled result and run
        nothing.

        A step is HANDED its transaction rather than asking for it: with `writes`, the writer
        of the step gets the unit's transaction (opened then, if the block has none yet), so
        its writes commit with the step's journal row; otherwise it gets None and writes on its
        own. The writer is `fn`, unless `record` is given: then `fn` (a model call, which must
        hold no transaction while it runs) is handed None, and `record(value, tx)` is run
        later, in the transaction of the run's NEXT commit (the next unit's, first thing when
        it opens), with the step's checkpoint: a paid call's ledger row commits with the call's
        checkpoint, and the call costs no commit of its own. A step with `record` does not
        commit by itself, even outside a unit. If that unit fails, the call is booked on its
        own and its checkpoint committed on its own; if the transaction cannot be opened
        because the run's lease was lost, `record(value, None)` still books what was paid for,
        on its own, before `LeaseLost` is raised."""
        ...

    async def patched(self, marker: str) -> bool:
        """Temporal-style versioning: True on a new run (which records the marker); False on a
        run journaled before the marker existed, without spending a position for the question."""
        ...

    def unit_of_work(self) -> AbstractAsyncContextManager[None]:
        """Steps journaled inside the block commit together when it ends, in ONE transaction
        with the writes of its steps that were handed the transaction (`writes`): all of them or
        none. The transaction is opened by the first step that writes, so a model or tool call
        inside the block holds none. On replay nothing is opened."""
        ...


class Idempotency(Frozen):
    """A turn's Idempotency-Key and what it was sent with: a repeat of the key (same actor,
    same thread) is answered with the first run's outcome, never run again; a repeat whose
    `fingerprint` differs is refused."""

    key: str
    fingerprint: str
    """A digest of the request the key came with (the HTTP layer's, see
    bounded_agents/http/idempotency)."""


class RunRequest(Frozen):
    """What a run was asked to do: enough to resume it in another process."""

    run_id: str
    thread_id: str
    actor_id: str
    agent: str
    content: str
    idempotency: Idempotency | None = None
    """Set when the turn came with an Idempotency-Key: the runtime records the run under it, and
    refuses a second run under the same key with `TurnInProgress` (see `DurableRuntime.begin`).
    Only `begin` needs it: a request read back from a runtime may leave it out."""
    follows_run: str | None = None
    """The run this turn was asked to follow, when its caller named one (the `/v1` API's
    `previous_response_id`): kept with the run so that reading the run back says so. Nothing
    in the turn reads it."""


class RunRecord(Frozen):
    """A run as the durable runtime keeps it."""

    request: RunRequest
    status: str
    """`running`, `completed` or `failed`."""
    error_code: str | None = None
    error_message: str | None = None
    report: dict[str, Any] | None = None
    """The `RunReport` as JSON, once the run ended (completed or failed)."""
    created_at: datetime | None = None
    """When the run began (None where the runtime does not keep it)."""


@runtime_checkable
class DurableRuntime(Protocol):
    """Where runs live: it hands out a `DurableContext` per run and holds the thread lease."""

    async def begin(
        self, request: RunRequest, *, shared_first_unit: bool = False
    ) -> DurableContext:
        """Start a new run; `ThreadBusy` while another run holds the thread (a runtime with
        the `OwnerCheckingRuntime` power also refuses, with `ThreadNotFound`, a thread that is
        not the request's actor's and agent's: the loop then checks nothing first), and
        `TurnInProgress` (naming it) when a run under the request's `idempotency` key exists on
        the thread, running or ended: a runtime on a database decides it by a unique index, so
        two concurrent begins with one key never both start a run.

        `shared_first_unit`: every write of the run's first unit of work joins that unit's
        transaction, so the runtime may record the run in it (one commit less per turn)
        instead of committing it here. The caller promises no write of its own in between
        (on SQLite such a write would wait for the very transaction it sits in), to enter
        `keep_alive(run_id)` at once (leaving it rolls back a first unit never taken up,
        and a cancellation leaves nothing of the run) and to call `fail` if the attempt
        fails."""
        ...

    async def reopen(self, run_id: str) -> tuple[RunRequest, DurableContext]:
        """Take an unfinished run back (its journal replays); `RunNotFound` if there is none."""
        ...

    def keep_alive(self, run_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the run's lease while the block runs (the loop wraps each run in it)."""
        ...

    async def complete(
        self, run_id: str, report: dict[str, Any], *, tx: Transaction | None = None
    ) -> None:
        """Mark the run completed; with `tx`, in that transaction (with the answer's write)."""
        ...

    async def fail(
        self, run_id: str, error_code: str, error_message: str, report: dict[str, Any]
    ) -> None: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def claim_expired(self, limit: int) -> list[str]:
        """Take up to `limit` runs still marked running whose lease ran out (their process
        died) for this process to resume, and return their ids. Concurrent callers in other
        processes get other runs; `reopen` of a run returned here needs no second claim."""
        ...


RunResumer: TypeAlias = Callable[[str], Awaitable[object]]
"""Finishes a run from its journal, given its id: the loop's `resume`."""


class RunTrace(Frozen):
    """A run as a thread's timeline shows it: its outcome and the journal entries that say what
    its model was sent. Built from the journal, never from a second read of the thread."""

    run_id: str
    status: str
    seq: int
    """The seq of the run's user message: the thread's length when the turn began."""
    created_at: datetime | None = None
    error_code: str | None = None
    error_message: str | None = None
    report: dict[str, Any] | None = None
    """The `RunReport` as JSON, once the run ended."""
    steps: list[str] = Field(default=[])
    """Checkpoint names journaled so far, in order (a run in flight shows how far it got)."""
    payloads: dict[str, JsonValue] = Field(default={})
    """The journaled results of `load:thread` and `history:summarize[:n]`: the kept messages,
    the summary read, the fold and the summaries made."""
    pruned: bool = False
    """The run's journal was deleted by retention: steps and payloads are gone, the report
    stays."""


PrunedStatus = Literal["completed", "failed"]
"""The ends of a run whose journal retention deletes: each has its own retention."""


__all__ = [
    "DurableContext",
    "DurableRuntime",
    "Idempotency",
    "JsonValue",
    "PrunedStatus",
    "RunRecord",
    "RunRequest",
    "RunResumer",
    "RunTrace",
    "Transaction",
]
