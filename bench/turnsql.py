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

On PostgreSQL a what-if beside it (`merged`): the same units with each unit's writes sent as ONE
statement (its statements as data-modifying CTEs of one `WITH ... SELECT 1`, in autocommit, so
BEGIN and COMMIT are no round trips of their own), the first unit's read alone before its
writes. Four round trips for the bench turn instead of sixteen (eighteen before a unit's last
waiting write and its journal rows became one statement, issue 37; five and nineteen while the
loop read the thread's owner first): what the least a turn could
send would save, if the journal built each unit as one statement (it does not: a unit's steps
are written as the turn makes them, and a lease check's or a bump's result is read before the
next). Not the same semantics (one snapshot for every part; the lease check's result goes
unread), only the same rows written: a cost figure, never a design.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.floor import AsyncpgFloor, Floor
from bench.reads import WARMUP, interleaved
from bench.turns import TurnSeries
from bounded_agents.store.waiting import split_with


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
    medians in ms, and the turn's statement and commit counts; on PostgreSQL the `merged`
    what-if too (see the module docstring)."""
    units, run_id = await capture(series)
    runs = WARMUP + reps
    copies = iter([with_run_id(units, run_id, str(uuid.uuid4())) for _ in range(runs)])
    thread_id = series.thread_id
    window = series.window or 10
    series_fns: dict[str, Callable[[], Awaitable[Any]]] = {
        "read": lambda: floor.read(thread_id, window),
        "turn_sql": lambda: floor.replay(next(copies)),
    }
    postgres = isinstance(floor, AsyncpgFloor)
    if isinstance(floor, AsyncpgFloor):
        plans = iter([merged(with_run_id(units, run_id, str(uuid.uuid4()))) for _ in range(runs)])
        series_fns["merged"] = lambda: floor.send(next(plans))
    timed = await interleaved(series_fns, reps)
    out = {
        "read_ms": timed["read"] / 1e3,
        "turn_sql_ms": timed["turn_sql"] / 1e3,
        "statements": sum(len(u.statements) for u in units),
        "commits": len(units),
    }
    if postgres:
        out["merged_ms"] = timed["merged"] / 1e3
        out["merged_round_trips"] = len(merged(units))
        out["round_trips"] = out["statements"] + 2 * out["commits"]
    return out


Sent = tuple[str, list[Any]]


def merged(units: Sequence[Unit]) -> list[Sent]:
    """The PostgreSQL what-if: the first unit's reads alone, then each unit's writes as one
    statement (`_one_statement`), to be sent in autocommit."""
    plan: list[Sent] = []
    for i, unit in enumerate(units):
        writes = list(unit.statements)
        if i == 0:
            reads = [s for s in writes if _is_read(s)]
            writes = [s for s in writes if not _is_read(s)]
            plan += [(s.sql, list(s.args)) for s in reads]
        plan.append(_one_statement(writes))
    return plan


def _is_read(s: Statement) -> bool:
    return s.sql.lstrip().upper().startswith("SELECT")


def _one_statement(statements: Sequence[Statement]) -> Sent:
    """`WITH s0 AS (...), s1 AS (...), ... SELECT 1`: each statement a CTE (a statement that is
    itself a WITH gives its CTEs, renamed apart, and its final statement); an executemany INSERT
    becomes one multi-row VALUES. Parameters are renumbered in order."""
    parts: list[str] = []
    args: list[Any] = []
    for i, s in enumerate(statements):
        sql = " ".join(s.sql.split())
        if s.many:
            head, values = sql.split(" VALUES ", 1)
            rows = [list(row) for row in s.args]
            groups = [_renumber(values, len(args) + r * len(rows[0])) for r in range(len(rows))]
            parts.append(f"s{i} AS ({head} VALUES {', '.join(groups)})")
            args += [value for row in rows for value in row]
            continue
        sql = _renumber(sql, len(args))
        args += list(s.args)
        if not sql.startswith("WITH "):
            parts.append(f"s{i} AS ({sql})")
            continue
        split = split_with(sql)
        if split is None:
            raise ValueError(f"not a WITH list this reads: {sql[:60]!r}")
        ctes, final = split
        names = [name for name, _ in ctes]
        for name, body in ctes:
            parts.append(f"{name}_{i} AS ({_rename(body, names, i)})")
        parts.append(f"s{i} AS ({_rename(final, names, i)})")
    return "WITH " + ", ".join(parts) + " SELECT 1", args


def _renumber(sql: str, offset: int) -> str:
    return re.sub(r"\$(\d+)", lambda m: f"${int(m.group(1)) + offset}", sql)


def _rename(sql: str, names: Sequence[str], i: int) -> str:
    for name in names:
        sql = re.sub(rf"\b{name}\b", f"{name}_{i}", sql)
    return sql
