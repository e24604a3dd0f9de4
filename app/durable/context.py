"""`DurableContext` over a journal: run each step once, replay it from the journal afterwards."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from app.core.messages import storable_json
from app.core.ports import JsonValue
from app.errors import JournalMismatch

PATCH_PREFIX = "patch:"


class StepRecord(Protocol):
    name: str
    payload: str


class StepWriter(Protocol):
    """Commits (position, name, payload) rows in one transaction."""

    async def __call__(self, steps: Sequence[tuple[int, str, str]]) -> None: ...


def encode_payload(value: JsonValue) -> str:
    """Compact JSON, non-ASCII kept as is: the journal's byte counts are the stored bytes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class JournaledContext:
    """Replays `history` position by position, then journals every new step through `write`.

    A step name is checked on replay: a run whose code changed shape under it fails loudly with
    `JournalMismatch` instead of handing one step's result to another.
    """

    def __init__(self, run_id: str, history: list[StepRecord], write: StepWriter) -> None:
        self.run_id = run_id
        self._history = history
        self._write = write
        self._position = 0
        self._pending: list[tuple[int, str, str]] = []
        """Patch markers not yet written: they ride with the next step's commit."""
        self.journal_bytes: dict[str, int] = {}
        """Checkpoint name -> bytes of its payload, replayed or written in this attempt."""
        self.replayed: list[str] = []
        """Names of the steps this attempt read back instead of running."""

    @property
    def replaying(self) -> bool:
        return self._position < len(self._history)

    async def step(self, name: str, fn: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        if self.replaying:
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
        value = await fn()
        payload = encode_payload(value)
        await self._write([*self._pending, (self._position, name, payload)])
        self._pending.clear()
        self._position += 1
        self.journal_bytes[name] = len(payload.encode())
        return value

    async def patched(self, marker: str) -> bool:
        name = PATCH_PREFIX + marker
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

    async def step(self, name: str, fn: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        return await fn()

    async def patched(self, marker: str) -> bool:
        return True
