"""The turn's own SQL with no Python around it: what the database work of a bench turn costs by
itself, as a multiple of the read floor.

One bench turn is run once with the engine's statement and commit events recorded: every
statement as sent (its SQL and its parameters, after SQLAlchemy's or
`bounded_agents.store.direct`'s bind processing) and where each transaction committed. That list is
then sent again, as is, through the floor's raw driver connection (`bench.floor`): one driver call
per statement, each transaction committed where the turn committed it, nothing else. The run's id
is swapped for a fresh one in every parameter, so each replay is a new run on the same thread (its
messages, journal rows and ledger row are new rows, numbered by the SQL itself, as the turn's were).

The ratio says how much of a turn's overhead is the durable work the design commits to (its
statements and commits) and how much is the Python that sends them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.floor import Floor
from bench.reads import WARMUP, interleaved
from bench.turns import TurnSeries


@dataclass(frozen=True)
class Statement:
    sql: str
    args: Any
    many: bool


@dataclass
class Unit:
    """Statements sent between two commits (the first unit's include the turn's reads before
    it); replayed in one transaction."""

    statements: list[Statement] = field(default_factory=list)


@contextmanager
def recording(engine: AsyncEngine) -> Iterator[list[Unit]]:
    """Every statement sent on `engine` (pings excluded), cut into units at each commit."""
    units: list[Unit] = [Unit()]

    def on_statement(
        _conn: Any, _cursor: Any, sql: str, args: Any, _context: Any, many: bool
    ) -> None:
        if sql.strip().upper() != "SELECT 1":
            units[-1].statements.append(Statement(sql, args, many))

    def on_commit(_conn: Any) -> None:
        units.append(Unit())

    sync = engine.sync_engine
    event.listen(sync, "before_cursor_execute", on_statement)
    event.listen(sync, "commit", on_commit)
    try:
        yield units
    finally:
        event.remove(sync, "before_cursor_execute", on_statement)
        event.remove(sync, "commit", on_commit)
        if not units[-1].statements:
            units.pop()


def _swap(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, tuple | list):
        return type(value)(_swap(v, old, new) for v in value)
    return value


def with_run_id(units: Sequence[Unit], old: str, new: str) -> list[Unit]:
    """`units` with the run id `old` replaced by `new` in every parameter (its rows, its journal
    payloads, the request it stores)."""
    return [
        Unit([Statement(s.sql, _swap(s.args, old, new), s.many) for s in u.statements])
        for u in units
    ]


async def capture(series: TurnSeries) -> tuple[list[Unit], str]:
    """One turn of `series`, recorded: its units and its run id (read back from the recorded
    run insert: `warm` keeps no result)."""
    with recording(series.store.engine) as units:
        await series.warm(1)
    return units, _run_id(units)


def _run_id(units: Sequence[Unit]) -> str:
    for unit in units:
        for s in unit.statements:
            if s.sql.lstrip().upper().startswith("INSERT INTO RUNS"):
                return str(s.args[0])
    raise RuntimeError("no run insert recorded")


async def turn_sql_floor(floor: Floor, series: TurnSeries, *, reps: int) -> dict[str, Any]:
    """The recorded turn replayed through the raw driver and the read floor, interleaved:
    medians in ms, and the turn's statement and commit counts."""
    units, run_id = await capture(series)
    copies = iter([with_run_id(units, run_id, str(uuid.uuid4())) for _ in range(WARMUP + reps)])
    thread_id = series.thread_id
    window = series.window or 10
    timed = await interleaved(
        {
            "read": lambda: floor.read(thread_id, window),
            "turn_sql": lambda: floor.replay(next(copies)),
        },
        reps,
    )
    return {
        "read_ms": timed["read"] / 1e3,
        "turn_sql_ms": timed["turn_sql"] / 1e3,
        "statements": sum(len(u.statements) for u in units),
        "commits": len(units),
    }
