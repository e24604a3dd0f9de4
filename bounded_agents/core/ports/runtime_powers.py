"""The optional powers of a durable runtime, its step context and a ledger (the model's and the
store's are in `powers`, which lists all of them in `POWERS`): the same style, one
`runtime_checkable` Protocol and one `supports_*` probe each."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol, TypeGuard, TypeVar, runtime_checkable

from bounded_agents.core.ports.durable import PrunedStatus, RunResumer, RunTrace, Transaction
from bounded_agents.core.ports.ledger import LedgerEntry, QuotaReserver

_T = TypeVar("_T")


# --- durable runtime -----------------------------------------------------------------------


@runtime_checkable
class KeyedRunFinder(Protocol):
    """Optional: a runtime that finds a run by its Idempotency-Key. `begin` already refuses a
    second run under a key; this lets a request refused before `begin` (a spent quota) still
    be answered with the run its key names."""

    async def find_keyed_run(
        self, thread_id: str, actor_id: str, key: str
    ) -> tuple[str, str] | None:
        """(run id, request fingerprint) of the run under `key`, or None."""
        ...


def supports_keyed_runs(runtime: object) -> TypeGuard[KeyedRunFinder]:
    return isinstance(runtime, KeyedRunFinder)


@runtime_checkable
class RunExecutor(Protocol):
    """Optional: a durable runtime that executes each attempt of a run itself, as a workflow of
    an outside engine (`DbosRuntime`: a DBOS workflow). The engine's own recovery then calls
    the run again after a restart, through the resumer the loop registers; the runtime's lease
    stays the thread's lock. A runtime without it is simply awaited by the loop (`SqlJournal`)."""

    def register_resumer(self, resume: RunResumer) -> None:
        """What the engine's recovery calls with a run id (the loop registers its `resume`)."""
        ...

    async def execute(self, run_id: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """Run one attempt of the run (begun or reopened just before) inside the engine's
        workflow, and return what it returns; its context's steps are that workflow's steps."""
        ...


def supports_run_executor(runtime: object) -> TypeGuard[RunExecutor]:
    return isinstance(runtime, RunExecutor)


@runtime_checkable
class RunTimelineReader(Protocol):
    """Optional: a durable runtime that lists a thread's runs with their journal (`SqlJournal`)."""

    async def thread_runs(
        self, thread_id: str, *, limit: int, before_seq: int | None = None
    ) -> list[RunTrace]:
        """The newest `limit` runs whose user message has `seq < before_seq`, newest first."""
        ...


def supports_run_timeline(runtime: object) -> TypeGuard[RunTimelineReader]:
    return isinstance(runtime, RunTimelineReader)


@runtime_checkable
class JournalPruner(Protocol):
    """Optional: a durable runtime whose finished runs' journals can be deleted (`SqlJournal`)."""

    async def prune_steps(
        self, older_than_seconds: float, limit: int, *, status: PrunedStatus = "completed"
    ) -> int:
        """Delete the journals of up to `limit` runs that ended with `status` at least that
        long ago; returns how many runs were pruned (fewer than `limit`: none are left now)."""
        ...


def supports_pruning(runtime: object) -> TypeGuard[JournalPruner]:
    return isinstance(runtime, JournalPruner)


@runtime_checkable
class RunEraser(Protocol):
    """Optional: a durable runtime that keeps records of its runs outside the project's tables
    (`DbosRuntime`: DBOS's workflows and their step outputs, in its system database), which an
    erasure must reach too. The SQL journal's steps are in the project's own tables, which the
    store's erasure deletes, so it needs no such power."""

    async def thread_run_ids(self, thread_id: str) -> list[str]:
        """Every run of the thread the runtime may hold records of: asked before the store's
        erasure, which deletes a thread's `runs` rows."""
        ...

    async def erase_runs(self, run_ids: Sequence[str]) -> None:
        """Delete everything the runtime keeps of these runs (every attempt); runs it has no
        record of are no error, so a retried erasure finishes the job."""
        ...


def supports_run_erasure(runtime: object) -> TypeGuard[RunEraser]:
    return isinstance(runtime, RunEraser)


@runtime_checkable
class ErasedRunSweeper(Protocol):
    """Optional: a `RunEraser` whose records of a run can outlive the run's `runs` row, where
    nothing names them any more (`DbosRuntime`: its erasure of a thread's workflows failed
    after the store's erasure committed, or a run began and ended in the erasure's window).
    The sweep finds such records by the rows they lack and deletes them; the module runs it
    after each thread erasure and in its periodic sweep."""

    async def sweep_erased(self, *, since: datetime | None = None) -> int:
        """One bounded pass: delete the records of ended runs that have no `runs` row; how many
        were deleted. `since`: only those begun about then or later (a thread erasure's first
        read), else all in turn. Never raises: a failure is logged, and a later pass retries."""
        ...


def supports_erased_run_sweep(runtime: object) -> TypeGuard[ErasedRunSweeper]:
    return isinstance(runtime, ErasedRunSweeper)


@runtime_checkable
class RunForgetter(Protocol):
    """Optional: a runtime that answers for runs from records of its own (`InlineRuntime`'s
    in-process map), which a thread's erasure must end: under the SQL journal the runs' rows go
    with the thread, so `GET /runs/{id}` is a 404 (found by attack: inline still answered 200
    with the erased thread's id). Apart from `RunEraser`, so a runtime written to that port
    before this one existed keeps working."""

    async def forget_runs(self, run_ids: Sequence[str]) -> None:
        """These runs' records, and their Idempotency-Keys, gone: their thread was erased."""
        ...


def supports_run_forgetting(runtime: object) -> TypeGuard[RunForgetter]:
    return isinstance(runtime, RunForgetter)


@runtime_checkable
class OwnerCheckingRuntime(Protocol):
    """Optional: a runtime whose `begin` refuses with `ThreadNotFound` a thread that is not the
    request's actor's and agent's, decided by the database in the run's own insert
    (`SqlJournal`). The loop then sends no ownership read before `begin` (issue 37: a round
    trip, or a worker-thread hand-over on SQLite, less per turn); with any other runtime it
    reads the thread first. `begin` itself is the power, so a subclass that overrides it
    without calling the original must set `checks_thread_owner = False`: the loop would
    otherwise leave the owner unchecked."""

    checks_thread_owner: bool

    def owner_checked(self, run_id: str) -> None:
        """The caller has checked the owner of the run it begins next (the HTTP route loaded
        the thread): a runtime whose check is a read of its own (`SqlJournal` on Citus) skips
        it for that run. Not a keyword of `begin`, whose signature stays the port's."""
        ...


def supports_owner_check(runtime: object) -> TypeGuard[OwnerCheckingRuntime]:
    return isinstance(runtime, OwnerCheckingRuntime) and runtime.checks_thread_owner is True


@runtime_checkable
class ThreadHolder(Protocol):
    """Optional: a runtime that knows which threads are busy only in its own process
    (`InlineRuntime`, which writes no `runs` rows the store's erasure could see). An erasure
    holds the thread through it: refused with `ThreadBusy` while a turn runs there, and no turn
    begins there until the erasure is done. A journaled runtime needs no such power: its live
    run is a row the store's erasure reads in its own transaction."""

    def hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Held for the block; `ThreadBusy` at once when a run holds the thread."""
        ...


def supports_thread_holding(runtime: object) -> TypeGuard[ThreadHolder]:
    return isinstance(runtime, ThreadHolder)


@runtime_checkable
class RuntimeLauncher(Protocol):
    """Optional: a durable runtime whose engine is launched with the app and shut down after it
    (`DbosRuntime`: DBOS, on its system database)."""

    async def launch(
        self,
        system_database_url: str,
        *,
        executor_id: str | None = None,
        application_version: str | None = None,
    ) -> None: ...

    async def shutdown(self) -> None: ...


def supports_launch(runtime: object) -> TypeGuard[RuntimeLauncher]:
    return isinstance(runtime, RuntimeLauncher)


# --- durable context -----------------------------------------------------------------------


@runtime_checkable
class JournalFigures(Protocol):
    """Optional: a durable context that says what its journal holds, for the run's report and
    its spans: each step's stored bytes, and the steps this attempt read back (replayed)
    instead of running."""

    @property
    def journal_bytes(self) -> dict[str, int]: ...

    @property
    def replayed(self) -> list[str]: ...


def supports_journal_figures(ctx: object) -> TypeGuard[JournalFigures]:
    return isinstance(ctx, JournalFigures)


# --- ledger --------------------------------------------------------------------------------


@runtime_checkable
class TransactionalLedger(Protocol):
    """Optional: a ledger whose rows can join a durable context's transaction, so a model step
    and its ledger row commit once."""

    joins_transactions: bool

    async def record(self, entry: LedgerEntry, *, tx: Transaction | None = None) -> None: ...


def supports_ledger_transactions(ledger: object) -> TypeGuard[TransactionalLedger]:
    return isinstance(ledger, TransactionalLedger)


ledger_supports_transactions = supports_ledger_transactions
"""The probe's earlier name, kept for code written against it."""


@runtime_checkable
class RatioBook(Protocol):
    """Optional: a ledger that keeps each model's learned token ratio (reported prompt tokens
    over the chars/4 estimate: `bounded_agents.core.calibration`) across restarts, so a new
    process sizes windows and fold chunks by it from its first turn."""

    async def load_ratios(self) -> dict[str, float]:
        """Every model's ratio, as last saved."""
        ...

    async def save_ratios(self, ratios: Mapping[str, float]) -> None:
        """Replace the named models' ratios (others are left as they are)."""
        ...


def supports_ratio_book(ledger: object) -> TypeGuard[RatioBook]:
    return isinstance(ledger, RatioBook)


def supports_reservations(ledger: object) -> TypeGuard[QuotaReserver]:
    """Base contract now (`Ledger`): true of every ledger. Kept while the turn's `TurnLedger`
    still probes it; not a power (not in `POWERS`)."""
    return isinstance(ledger, QuotaReserver)
