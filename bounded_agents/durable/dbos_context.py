"""`DbosContext`: a run's `DurableContext` when DBOS keeps its journal, each checkpoint a DBOS
step.

Apart from `dbos_runtime` (the workflow of an attempt, the lease, the attempts read back from
DBOS) because this is what the turn sees of it: a step run once and replayed after, the same
contract `JournaledContext` keeps over the SQL journal (`durable.context`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from dbos import DBOS

from bounded_agents.core.checkpoints import encode_payload, patch_step
from bounded_agents.core.messages import storable_json
from bounded_agents.core.ports import JsonValue, StepFn, StepRecorder
from bounded_agents.durable.context import Replay


class StepFailed(Exception):
    """What DBOS records for a step that raised (the original exception is re-raised in the
    process that ran it; this one is replayed if DBOS recovers the attempt after a crash)."""


StepFailed.__module__ = "bounded_agents.durable.dbos_runtime"
# DBOS pickles a step's exception by its module and name: kept as they were before this module
# was split out of `dbos_runtime` (which exports it), so a recorded failure reads the same.


@dataclass(frozen=True)
class DbosStep:
    name: str
    payload: str


class DbosContext(Replay):
    """`DurableContext` over DBOS steps: earlier attempts' steps replay first (by position,
    names checked, as `JournaledContext` does), then every step is a DBOS step of this attempt
    (DBOS replays them itself when it recovers the attempt)."""

    def __init__(
        self,
        run_id: str,
        history: Sequence[Any],
        hold: Callable[[], Awaitable[None]],
    ) -> None:
        self.run_id = run_id
        self._history: list[Any] = list(history)
        self._hold = hold
        self._position = 0
        self.journal_bytes: dict[str, int] = {}
        self.replayed: list[str] = []

    def carry(self, steps: Sequence[DbosStep]) -> None:
        """Append earlier attempts' steps to what this attempt replays first."""
        self._history.extend(steps)

    async def step(
        self,
        name: str,
        fn: StepFn,
        *,
        writes: bool = False,
        record: StepRecorder | None = None,
    ) -> JsonValue:
        """DBOS commits its checkpoint on its own connection: no transaction is shared, so
        `fn` and `record` are handed None and both run inside the one DBOS step."""
        if self.replaying:
            return self._read_back(name)
        ran: list[JsonValue] = []
        failed: list[Exception] = []

        async def checkpoint() -> str:
            try:
                await self._hold()  # the lease: a run taken over runs nothing more here
                value = await fn(None)
                if record is not None:
                    await record(value, None)
            except Exception as exc:
                failed.append(exc)
                raise StepFailed(f"{name}: {type(exc).__name__}") from None
            ran.append(value)
            return encode_payload(value)

        try:
            payload = await DBOS.run_step_async({"name": name}, checkpoint)
        except StepFailed:
            if failed:
                raise failed[0] from None
            raise  # a failure DBOS recorded before a crash, replayed by its recovery
        self.journal_bytes[name] = len(payload.encode())
        if ran:
            return ran[0]
        self.replayed.append(name)
        return storable_json(json.loads(payload))

    async def patched(self, marker: str) -> bool:
        if self.replaying:
            record = self._history[self._position]
            if record.name != patch_step(marker):
                return False  # journaled before the marker existed: the old path
            self._position += 1
            self.journal_bytes[record.name] = len(record.payload.encode())
            return True
        patched = await DBOS.patch_async(marker)
        if patched:
            self.journal_bytes[patch_step(marker)] = 4
        return patched

    def unit_of_work(self) -> AbstractAsyncContextManager[None]:
        return _no_unit()


@asynccontextmanager
async def _no_unit() -> Any:
    """Each DBOS step is its own checkpoint: a unit of work groups nothing."""
    yield


__all__ = ["DbosContext", "DbosStep", "StepFailed"]
