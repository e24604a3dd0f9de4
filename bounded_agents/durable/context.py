"""`DurableContext` over a journal: run each step once, replay it from the journal afterwards."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from bounded_agents.core.checkpoints import encode_payload, patch_step
from bounded_agents.core.messages import storable_json
from bounded_agents.core.ports import JsonValue, StepFn, StepRecorder, Transaction
from bounded_agents.errors import JournalMismatch, LeaseLost


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
        self._depth = 0
        self._unit: Unit | None = None
        self._start: tuple[int, int, dict[str, int]] = (0, 0, {})
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
        if self.replaying:
            return self._read_back(name)
        if record is None:
            value = await fn(await self._transaction() if writes else None)
            payload = encode_payload(value)
        else:
            value = await fn(None)
            payload = encode_payload(value)
            # Counted before `record` runs: a recorder that ends the run reports this step too.
            self.journal_bytes[name] = len(payload.encode())
            await recorded(record, value, self._transaction if writes else None)
        self._pending.append((self._position, name, payload))
        if not self._depth:
            first = self._take_first()
            if first is not None:
                await first.commit(self._pending)
            else:
                await self._write(self._pending)
            self._pending.clear()
        self._position += 1
        self.journal_bytes[name] = len(payload.encode())
        return value

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """Every step inside commits at the end of the block, in one transaction with the
        writes of the steps handed it (`writes`; blocks nest: the outermost one commits). If the
        block raises, nothing of it is committed; the run then fails and a resume replays only
        what was committed before."""
        if not self._depth:
            # Where the unit began: a unit that fails is undone here too, so the context can go
            # on (or try again) as if its steps had never run.
            self._start = (self._position, len(self._pending), dict(self.journal_bytes))
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if not self._depth:
                unit, self._unit = self._unit or self._take_first(), None
                self._position, pending, self.journal_bytes = self._start
                del self._pending[pending:]
                if unit is not None:
                    await unit.rollback()
            raise
        self._depth -= 1
        if self._depth:
            return
        unit, self._unit = self._unit or self._take_first(), None
        steps = list(self._pending)
        self._pending.clear()
        if unit is not None:
            await unit.commit(steps)
        elif steps:
            await self._write(steps)

    async def _transaction(self) -> Transaction | None:
        """The block's transaction, opened now if it is not yet (its first statement checks the
        run's lease); None outside a block, or with no journal transaction to share."""
        if not self._depth or (self._open_unit is None and self._first is None):
            return None
        if self._unit is None:
            first = self._take_first()
            if first is not None:
                self._unit = first
            else:
                assert self._open_unit is not None
                self._unit = await self._open_unit()
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


async def recorded(
    record: StepRecorder,
    value: JsonValue,
    opener: Callable[[], Awaitable[Transaction | None]] | None,
) -> None:
    """Run a step's `record` with the transaction `opener` opens (None without one). A lease
    lost while opening it still records what the step's call paid for, on its own, before the
    step fails: the provider billed the call whoever holds the run now."""
    try:
        tx = await opener() if opener is not None else None
    except LeaseLost:
        await record(value, None)
        raise
    await record(value, tx)
