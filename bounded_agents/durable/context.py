"""`DurableContext` over a journal: run each step once, replay it from the journal afterwards."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from bounded_agents.core.checkpoints import encode_payload, patch_step
from bounded_agents.core.messages import storable_json
from bounded_agents.core.ports import JsonValue, StepFn, StepRecorder, Transaction
from bounded_agents.errors import JournalMismatch, LeaseLost

log = logging.getLogger("bounded_agents.durable")


class StepRecord(Protocol):
    name: str
    payload: str


class StepWriter(Protocol):
    """Commits (position, name, payload) rows in one transaction."""

    async def __call__(self, steps: Sequence[tuple[int, str, str]]) -> None: ...


class Unit(Protocol):
    """An open transaction of the journal's, shared with the store and the ledger."""

    @property
    def transaction(self) -> Transaction: ...

    async def commit(self, steps: Sequence[tuple[int, str, str]]) -> None:
        """Write the step rows into the transaction and commit it."""
        ...

    async def rollback(self) -> None: ...


class UnitOpener(Protocol):
    """Opens a `Unit`: a transaction whose first statement checks the run's lease."""

    async def __call__(self) -> Unit: ...


class Replay:
    """The read-back half of a journaled context: steps recorded by earlier attempts, handed
    back by position with their names checked. `JournaledContext` and the DBOS runtime's
    context share it, so both refuse a journal whose shape changed in the same way."""

    run_id: str
    _history: Sequence[StepRecord]
    _position: int
    journal_bytes: dict[str, int]
    replayed: list[str]

    @property
    def replaying(self) -> bool:
        return self._position < len(self._history)

    def _read_back(self, name: str) -> JsonValue:
        """The next recorded step's result; `JournalMismatch` if it was journaled as another."""
        record = self._history[self._position]
        if record.name != name:
            raise JournalMismatch(
                f"run {self.run_id}: position {self._position} journaled "
                f"{record.name!r}, replay asked for {name!r}"
            )
        self._position += 1
        self.journal_bytes[name] = len(record.payload.encode())
        self.replayed.append(name)
        # New steps journal storable text; one journaled before that rule may hold a NUL that
        # no store takes, so what is read back is cleaned too (identity for every other).
        return storable_json(json.loads(record.payload))


class JournaledContext(Replay):
    """Replays `history` position by position, then journals every new step through `write`.

    A step name is checked on replay: a run whose code changed shape under it fails loudly with
    `JournalMismatch` instead of handing one step's result to another.
    """

    def __init__(
        self,
        run_id: str,
        history: list[StepRecord],
        write: StepWriter,
        open_unit: UnitOpener | None = None,
        first_unit: Unit | None = None,
    ) -> None:
        self.run_id = run_id
        self._history = history
        self._write = write
        self._open_unit = open_unit
        self._first = first_unit
        """A unit the runtime opened already (the SQL journal's run insert, left uncommitted):
        the first commit of this context goes through it, so the run row commits with it."""
        self._position = 0
        self._pending: list[tuple[int, str, str]] = []
        """Rows not yet written: patch markers ride with the next step's commit, and inside a
        unit of work every step waits for the block's one commit."""
        self._records: list[tuple[StepRecorder, JsonValue]] = []
        """Model steps' `record`s waiting, with their rows in `_pending`, for the next commit."""
        self._ran = 0
        """How many of `_records` ran in the open unit's transaction (none is open: 0)."""
        self._depth = 0
        self._unit: Unit | None = None
        self._start: tuple[int, int, int, dict[str, int]] = (0, 0, 0, {})
        self.journal_bytes: dict[str, int] = {}
        """Checkpoint name -> bytes of its payload, replayed or written in this attempt."""
        self.replayed: list[str] = []
        """Names of the steps this attempt read back instead of running."""

    async def step(
        self,
        name: str,
        fn: StepFn,
        *,
        writes: bool = False,
        record: StepRecorder | None = None,
    ) -> JsonValue:
        """Outside a unit a step commits at once, except a step with `record` whose writes
        share the journal's transaction (a model call and its ledger row): its row and its
        `record` wait for the NEXT commit, whichever unit or step makes it, and run in that
        transaction. Nothing of the turn depends on the call before then (its output is in the
        answer or in the tool round that the next commit makes durable), so the call costs no
        commit of its own; a crash before that commit calls the model again on resume."""
        if self.replaying:
            return self._read_back(name)
        if record is None:
            value = await fn(await self._transaction() if writes else None)
        else:
            value = await fn(None)
            if writes and self._shares():
                self._records.append((record, value))
            else:
                await record(value, None)
        payload = encode_payload(value)
        self.journal_bytes[name] = len(payload.encode())
        self._pending.append((self._position, name, payload))
        if not self._depth and record is None:
            await self._commit()
        self._position += 1
        return value

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """Every step inside commits at the end of the block, in one transaction with the
        writes of the steps handed it (`writes`; blocks nest: the outermost one commits), and
        with what waited for the next commit (a model step's row and ledger row). If the block
        raises, nothing of it is committed; what waited for it is committed on its own (the
        call was paid for, and a resume need not make it again); the run then fails and a
        resume replays only what was committed."""
        if not self._depth:
            # Where the unit began: a unit that fails is undone here too, so the context can go
            # on (or try again) as if its steps had never run.
            self._start = (
                self._position,
                len(self._pending),
                len(self._records),
                dict(self.journal_bytes),
            )
        self._depth += 1
        try:
            yield
        except BaseException as error:
            self._depth -= 1
            if not self._depth:
                await self._undo(settle=isinstance(error, Exception))
            raise
        self._depth -= 1
        if not self._depth:
            try:
                await self._commit()
            except LeaseLost:
                raise  # what waited is booked on its own already (`_commit`)
            except Exception:
                # The block ran, its commit failed (the database refused a row, or went away):
                # undone as a block that raised, so the calls it was to book are booked on
                # their own and their reservations settled (found by attack: neither was,
                # and the actor's total stayed above its ledger for good).
                await self._undo(settle=True)
                raise

    async def _undo(self, *, settle: bool) -> None:
        """Roll back the failed outermost unit and forget its steps. The calls it recorded were
        paid: their ledger rows are booked on their own. With `settle`, what waited from before
        the unit is committed on its own (left waiting if that fails too)."""
        unit, self._unit, self._ran = self._unit or self._take_first(), None, 0
        self._position, pending, records, self.journal_bytes = self._start
        del self._pending[pending:]
        paid, self._records = self._records[records:], self._records[:records]
        if unit is not None:
            await unit.rollback()
        for record, value in paid:
            await _booked_alone(record, value)
        if settle and (self._pending or self._records):
            try:
                await self._commit()
            except Exception:
                log.warning("run %s: its recorded steps could not be committed", self.run_id)

    async def _commit(self) -> None:
        """Commit every waiting row, with the waiting `record`s in the same transaction (run
        when it opened, or now, opening it if no step did). On failure nothing is forgotten:
        the rows and records wait for the next commit."""
        unit, self._unit = self._unit or self._take_first(), None
        try:
            if self._records and unit is None and self._open_unit is not None:
                unit = await self._opened()
            await self._run_records(unit.transaction if unit is not None else None)
        except BaseException:
            self._ran = 0
            if unit is not None:
                await unit.rollback()
            raise
        self._ran = 0
        steps = list(self._pending)
        try:
            if unit is not None:
                await unit.commit(steps)
            elif steps:
                await self._write(steps)
        except LeaseLost:
            # A lease check sent with the unit's last call (deferred, on SQLite): what waiting
            # calls paid for is booked on its own, as when the check fails at the unit's start.
            await self._book_waiting_alone()
            raise
        self._pending.clear()
        self._records.clear()

    async def _opened(self) -> Unit:
        """A new unit, its first statement the lease check. A lease lost there still books
        what waiting calls paid for, on their own, before `LeaseLost` is raised."""
        assert self._open_unit is not None
        try:
            return await self._open_unit()
        except LeaseLost:
            await self._book_waiting_alone()
            raise

    async def _book_waiting_alone(self) -> None:
        waiting, self._records = self._records, []
        for record, value in waiting:
            await record(value, None)

    async def _run_records(self, tx: Transaction | None) -> None:
        """The waiting `record`s not yet run in the open unit, in `tx`: a paid call's ledger
        row is written first thing in the transaction its checkpoint commits in, so whatever
        the unit's own steps read or report (the run's end) already counts it."""
        while self._ran < len(self._records):
            record, value = self._records[self._ran]
            await record(value, tx)
            self._ran += 1

    def _shares(self) -> bool:
        """Whether steps that write can be handed a transaction of the journal's."""
        return self._open_unit is not None or self._first is not None

    async def _transaction(self) -> Transaction | None:
        """The block's transaction, opened now if it is not yet (its first statement checks the
        run's lease); None outside a block, or with no journal transaction to share."""
        if not self._depth or not self._shares():
            return None
        if self._unit is None:
            first = self._take_first()
            self._unit = first if first is not None else await self._opened()
            await self._run_records(self._unit.transaction)
        return self._unit.transaction

    def _take_first(self) -> Unit | None:
        first, self._first = self._first, None
        return first

    async def patched(self, marker: str) -> bool:
        name = patch_step(marker)
        if self.replaying:
            record = self._history[self._position]
            if record.name == name:
                self._position += 1
                self.journal_bytes[name] = len(record.payload.encode())
                return True
            return False  # journaled before the marker existed: old path, no position spent
        # Written with the next step, in its transaction: a marker changes nothing by itself,
        # and a run that dies before that step asks again on resume and gets the same answer.
        self._pending.append((self._position, name, "true"))
        self._position += 1
        self.journal_bytes[name] = 4
        return True


class InlineContext:
    """A non-durable context: every step simply runs. For callers who opt out of the journal."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.journal_bytes: dict[str, int] = {}
        self.replayed: list[str] = []

    async def step(
        self,
        name: str,
        fn: StepFn,
        *,
        writes: bool = False,
        record: StepRecorder | None = None,
    ) -> JsonValue:
        value = await fn(None)
        if record is not None:
            await record(value, None)
        return value

    async def patched(self, marker: str) -> bool:
        return True

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        yield


async def _booked_alone(record: StepRecorder, value: JsonValue) -> None:
    """A paid call's ledger row, on its own, after its unit failed: logged, never raised (the
    unit's own failure is what the run reports)."""
    try:
        await record(value, None)
    except Exception:
        log.warning("a model call's ledger row could not be booked after its unit failed")
