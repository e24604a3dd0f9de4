"""Writes that wait on a PostgreSQL connection for the transaction's next statement
(`bounded_agents.store.direct.write_later`: a model step's ledger row, the run's end), and the
unit's last rows merged with the last of them into ONE statement.

Why: a write nothing reads back costs a round trip of its own if it is sent at once. Waiting, it
goes first before whatever the transaction sends next (a driver-way write or read, a SQLAlchemy
execute, the COMMIT), which keeps the order the database sees; and before the unit's last rows
(`write_many(last=True)`) the last waiting write and those rows become one statement, the rows a
data-modifying CTE (`unnest` of one array a column) in front of it: one round trip per unit less
(issue 37). SQLite's counterpart is `bounded_agents.store.onehop`'s deferred call (its writes wait
for the unit's next worker-thread call).

Only `asyncpg` outside Citus: there a unit's runs and run_steps rows and the actor's ledger rows
live on different shards. SQLAlchemy's own statements are seen through the engine's events
(`_hook`): the waiting writes go before its statements and its COMMIT, and are dropped at its
ROLLBACK, ROLLBACK TO SAVEPOINT and BEGIN. A waiting write is announced to the engine's
`before_cursor_execute` listeners when it is sent, as what is sent.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import ClauseElement

from bounded_agents.store.driver import (
    DRIVER_ERRORS,
    Check,
    Compiled,
    Outcome,
    announce,
    compiled,
    driver_error,
    guarded,
    raw_connection,
    send,
    status_count,
)


class _Waiting(NamedTuple):
    """A write waiting on a PostgreSQL connection (`write_later`): compiled, its arguments
    processed (a missing parameter is refused when it is queued, as when it is sent), not yet
    announced. Only `asyncpg` outside Citus: there a unit's runs and run_steps rows and the
    actor's ledger rows live on different shards, and a statement touching several goes
    through the coordinator. Not with `then`: two statements, nothing to merge."""

    form: Compiled
    args: tuple[Any, ...]
    operation: str
    check: Check | None


_WAITING: weakref.WeakKeyDictionary[Connection, list[_Waiting]] = weakref.WeakKeyDictionary()
"""PostgreSQL's waiting writes, by the SQLAlchemy connection (one checkout) they wait on.
Dropped at its rollback and at its next BEGIN (`_hook`), gone with it."""

_HOOKED: weakref.WeakSet[Engine] = weakref.WeakSet()


def wait(
    conn: AsyncConnection, stmt: Executable, params: dict[str, Any], operation: str, check: Any
) -> None:
    """Queue `stmt` with `params` on `conn` until the transaction's next statement (see the
    module docstring); `check` runs on its outcome when it is sent."""
    assert isinstance(stmt, ClauseElement) and conn.sync_connection is not None
    form = compiled(stmt, conn.dialect, tuple(sorted(params)))
    waiting = _Waiting(form, form.args(params), operation, check)
    _hook(conn.sync_engine)
    _WAITING.setdefault(conn.sync_connection, []).append(waiting)


def _hook(engine: Engine) -> None:
    """The engine's events that send (or drop) the waiting writes around what SQLAlchemy sends
    itself: before each of its statements and its COMMIT; dropped at its ROLLBACK, at its
    ROLLBACK TO SAVEPOINT (a write waits only within its savepoint: the SAVEPOINT statement
    sent the ones before it; found by review, the rollback sent them and was itself never
    sent, so the savepoint's rows committed) and at its BEGIN (a transaction never inherits a
    write of the one before). Sent at `before_execute`,
    which SQLAlchemy fires before it compiles the statement and before any
    `before_cursor_execute` listener is told of it, so that such a listener sees the
    statements in the order the database runs them, whenever it was registered."""
    if engine in _HOOKED:
        return
    event.listen(engine, "before_execute", _before_statement)
    event.listen(engine, "commit", _before_commit)
    event.listen(engine, "rollback", _drop_waiting)
    event.listen(engine, "rollback_savepoint", _drop_waiting)
    event.listen(engine, "begin", _drop_waiting)
    _HOOKED.add(engine)


def _drop_waiting(conn: Connection, *_savepoint: Any) -> None:
    _WAITING.pop(conn, None)


def _before_statement(conn: Connection, *_args: Any) -> None:
    """SQLAlchemy is about to execute a statement on `conn`: the waiting writes go first. A
    failure is raised from SQLAlchemy's execute."""
    _send_from_event(conn, roll_back=False)


def _before_commit(conn: Connection) -> None:
    """SQLAlchemy is about to COMMIT `conn`: the waiting writes go first. If one fails, the
    transaction is rolled back here before the error is raised: SQLAlchemy takes a transaction
    whose commit raised as ended, and gives its connection back to the pool unreset (it would
    keep the unit's writes open for the connection's next user)."""
    _send_from_event(conn, roll_back=True)


def _send_from_event(conn: Connection, *, roll_back: bool) -> None:
    """The writes waiting on `conn`, sent from a SQLAlchemy event. A cancellation (or a failed
    `roll_back`) invalidates the connection, as `guarded` does: these events fire outside
    SQLAlchemy's own error handling."""
    waiting = _WAITING.pop(conn, None) if _WAITING else None
    if not waiting:
        return
    try:
        _in_greenlet(conn, waiting)
    except Exception:
        if roll_back:
            try:
                conn.engine.dialect.do_rollback(conn.connection)
            except BaseException:
                conn.invalidate()
        raise
    except BaseException:
        conn.invalidate()
        raise


def _in_greenlet(conn: Connection, waiting: list[_Waiting]) -> None:
    """`waiting` sent from a SQLAlchemy event, through the adapter's `run_async` (SQLAlchemy's
    public way to await the driver from a sync event)."""
    adapter: Any = conn.connection.dbapi_connection

    async def send_each(driver: Any) -> None:
        for one in waiting:
            announce(conn.engine, conn, one.form.sql, one.args)
            try:
                outcome = await send(driver, True, one.form, one.args)
            except (*DRIVER_ERRORS, OSError) as exc:
                raise driver_error(one.operation, exc) from exc
            _checked(one, outcome)

    adapter.run_async(send_each)


def _checked(one: _Waiting, outcome: Outcome) -> None:
    problem = one.check(outcome) if one.check is not None else None
    if problem is not None:
        raise problem


async def send_waiting(conn: AsyncConnection) -> None:
    """Send the writes waiting on `conn` (PostgreSQL, `write_later`), in order, each checked:
    what a driver-way statement on `conn` does first."""
    if _WAITING:
        sync = conn.sync_connection
        waiting = _WAITING.pop(sync, None) if sync is not None else None
        if waiting:
            await send_all(conn, waiting)


async def send_all(conn: AsyncConnection, waiting: list[_Waiting]) -> None:
    driver = (await raw_connection(conn)).driver_connection
    for one in waiting:
        announce(conn.sync_engine, conn.sync_connection, one.form.sql, one.args)
        _checked(one, await guarded(conn, one.operation, send(driver, True, one.form, one.args)))


_MERGED_AS = "merged_rows"
"""The name of a unit's last rows as a CTE of the write waiting before them (`_merged`)."""


class _Merged(NamedTuple):
    """A waiting write with a unit's last rows (`write_many(last=True)`) as ONE statement: the
    rows, passed as one array per column, inserted by a data-modifying CTE in front of it."""

    sql: str
    columns: tuple[str, ...]
    arrays: Compiled
    """The rows' insert alone (`INSERT ... SELECT ... FROM unnest($1::t1[], ...)`), for its
    parameters' names, binds and processors."""
    waited_tables: frozenset[str]
    """The tables the waiting write writes (`_tables_written`), to name a failure."""


_MERGED: dict[tuple[int, int], tuple[Compiled, Compiled, _Merged | None]] = {}

_PLACEHOLDER = re.compile(r"\$(\d+)")


def _shifted(sql: str, offset: int) -> str:
    """`sql` with each `$n` placeholder numbered `offset` higher: its parameters follow another
    statement's in one argument list."""
    return _PLACEHOLDER.sub(lambda m: f"${int(m[1]) + offset}", sql)


_WRITES_TO = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.IGNORECASE)


def _tables_written(sql: str) -> frozenset[str]:
    """The tables `sql` inserts into, updates or deletes from, lower-cased (an upsert's
    `DO UPDATE SET` reads as a table "set": harmless, no table has that name)."""
    return frozenset(t.lower() for t in _WRITES_TO.findall(sql))


def _merged(
    first: Compiled, stmt: ClauseElement, many: Compiled, keys: tuple[str, ...], dialect: Dialect
) -> _Merged | None:
    """`first` (a waiting write) and the rows of `stmt` (a table's plain insert of `keys`) as
    one statement, or None when they cannot be: `stmt` is not a plain insert, or `first` is
    neither an INSERT, UPDATE or DELETE nor a `WITH` list of them that the rows' CTE can join
    (`WITH RECURSIVE`, or one that already uses the CTE's name). Cached per pair: both are
    compiled forms kept for the life of the process."""
    key = (id(first), id(many))
    hit = _MERGED.get(key)
    if hit is None or hit[0] is not first or hit[1] is not many:
        hit = _MERGED[key] = (first, many, _merge(first, stmt, many, keys, dialect))
    return hit[2]


def _merge(
    first: Compiled, stmt: ClauseElement, many: Compiled, keys: tuple[str, ...], dialect: Dialect
) -> _Merged | None:
    table = getattr(stmt, "table", None)
    if not isinstance(stmt, sa.Insert) or not isinstance(table, sa.Table):
        return None
    if many.sql != Compiled(table.insert(), dialect, keys).sql:
        return None  # not the table's plain insert of those columns (values, a SELECT, ...)
    sql = first.sql.lstrip()
    head = sql[:15].upper()
    if _MERGED_AS in sql or head.startswith("WITH RECURSIVE"):
        return None
    arrays_of = [sa.bindparam(k, type_=ARRAY(table.c[k].type)) for k in keys]
    rows = sa.func.unnest(*arrays_of).table_valued(*keys).render_derived()
    insert = table.insert().from_select(list(keys), sa.select(*(rows.c[k] for k in keys)))
    arrays = Compiled(insert, dialect)
    offset = len(first.names)
    renumbered = _shifted(arrays.sql, offset)
    if head.startswith("WITH "):
        merged = f"WITH {_MERGED_AS} AS ({renumbered}), {sql[5:]}"
    elif head.startswith(("INSERT ", "UPDATE ", "DELETE ")):
        merged = f"WITH {_MERGED_AS} AS ({renumbered}) {sql}"
    else:
        return None
    return _Merged(merged, keys, arrays, _tables_written(first.sql))


async def _send_merged(
    conn: AsyncConnection,
    driver: Any,
    waiting: _Waiting,
    merged: _Merged,
    rows: Sequence[dict[str, Any]],
    operation: str,
) -> None:
    """`waiting` and `rows` as one statement (`_merged`); `waiting`'s check on what it returned
    (the statement's own RETURNING rows and row count are the waiting write's). A failure is
    named as `_blamed` says, the rows' part being the unit's `operation`."""
    args = waiting.args + merged.arrays.args({k: [row[k] for row in rows] for k in merged.columns})
    blame = (merged.waited_tables, waiting.operation, operation)
    outcome = await _as_one(conn, driver, merged.sql, args, waiting.form.returns_rows, blame)
    _checked(waiting, outcome)


async def _as_one(
    conn: AsyncConnection,
    driver: Any,
    sql: str,
    args: tuple[Any, ...],
    returns_rows: bool,
    blame: tuple[frozenset[str], str, str],
) -> Outcome:
    """A waiting write merged with the next statement, sent as one (`_send_merged`,
    `send_after_waiting`): announced as sent, its failure named by `_blamed` (`blame`: the
    waiting write's tables and operation, the other part's operation), a cancellation
    invalidating the connection."""
    announce(conn.sync_engine, conn.sync_connection, sql, args)
    try:
        if returns_rows:
            found = await driver.fetch(sql, *args)
            return Outcome(found, len(found))
        return Outcome([], status_count(await driver.execute(sql, *args)))
    except (*DRIVER_ERRORS, OSError) as exc:
        raise driver_error(_blamed(exc, *blame), exc) from exc
    except BaseException:
        await conn.invalidate()
        raise


async def send_rows(
    conn: AsyncConnection,
    driver: Any,
    stmt: ClauseElement,
    form: Compiled,
    rows: Sequence[dict[str, Any]],
    operation: str,
    *,
    last: bool,
) -> None:
    """`rows` of `stmt` (compiled as `form`) as one asyncpg `executemany`, after the writes
    waiting on `conn`; with `last` (the unit's last write), the last waiting write and the rows
    go as ONE statement when they can (`_merged`), the ones before it sent first."""
    keys = tuple(sorted(rows[0]))
    sync = conn.sync_connection
    waiting = _WAITING.pop(sync, None) if _WAITING and sync is not None else None
    merged = _merged(waiting[-1].form, stmt, form, keys, conn.dialect) if waiting and last else None
    last_waiting = waiting.pop() if waiting and merged is not None else None
    if waiting:
        await send_all(conn, waiting)
    if last_waiting is not None and merged is not None:
        await _send_merged(conn, driver, last_waiting, merged, rows, operation)
        return
    args = [form.args(row) for row in rows]
    announce(conn.sync_engine, conn.sync_connection, form.sql, args, many=True)
    await guarded(conn, operation, driver.executemany(form.sql, args))


async def send_after_waiting(
    conn: AsyncConnection, driver: Any, form: Compiled, args: tuple[Any, ...], operation: str
) -> Outcome:
    """`form` with `args` (a driver-way write), after the writes waiting on `conn`. The last of
    them, when nothing checks its outcome (`check` None), goes with it as ONE statement: its
    parts data-modifying CTEs in front of `form` (`_prefixed`), the ones before it sent first.
    What comes back is `form`'s own. A failure is named by the write whose table the database
    names, or by both when it names none (`_blamed`).

    Why only unchecked writes: in one statement a CTE's outcome is not returned. A waiting write
    whose check is a guarantee the database itself keeps (the ledger row's number, see
    `bounded_agents.store.ledger`) is queued without one. The order of the two writes inside the
    statement is the database's to choose (PostgreSQL runs an unreferenced CTE after the main
    statement); neither reads what the other writes."""
    sync = conn.sync_connection
    queued = _WAITING.pop(sync, None) if _WAITING and sync is not None else None
    last = queued[-1] if queued else None
    prefixed = _prefixed(last.form, form) if last is not None and last.check is None else None
    if queued is None or last is None or prefixed is None:
        if queued:
            await send_all(conn, queued)
        announce(conn.sync_engine, conn.sync_connection, form.sql, args)
        outcome: Outcome = await guarded(conn, operation, send(driver, True, form, args))
        return outcome
    if len(queued) > 1:
        await send_all(conn, queued[:-1])
    sql, tables = prefixed
    blame = (tables, last.operation, operation)
    return await _as_one(conn, driver, sql, last.args + args, form.returns_rows, blame)


def _blamed(exc: BaseException, tables: frozenset[str], waited: str, operation: str) -> str:
    """Whose failure a failed merged statement is (a waiting write with the next write, or
    with the unit's rows): the waiting write's when the database names a table it writes, the
    other part's when it names another, and both when it names none (a refused value, a
    deadlock, a timeout: found by review, such a refusal of the ledger row's data was reported
    as the answer's append alone; the rows' merge named it the unit's alone)."""
    table = getattr(exc, "table_name", None)
    if table is None:
        return f"{waited} or {operation}"
    return waited if table in tables else operation


_WAITED_AS = "waited_write"
"""The CTE name of a waiting write's own statement in front of the next one (`_prefixed`)."""

_PREFIXED: dict[tuple[int, int], tuple[Compiled, Compiled, tuple[str, frozenset[str]] | None]] = {}


def _prefixed(first: Compiled, then: Compiled) -> tuple[str, frozenset[str]] | None:
    """`first` (a waiting write) as data-modifying CTEs in front of `then`: the SQL, and the
    tables `first` writes (to name a failure). None when they cannot be one statement: either
    is not an INSERT, UPDATE or DELETE (after its own `WITH` list, if any), a `WITH` list could
    not be read (`split_with`), or a CTE name would be used twice. Cached per pair: both are
    compiled forms kept for the life of the process."""
    key = (id(first), id(then))
    hit = _PREFIXED.get(key)
    if hit is None or hit[0] is not first or hit[1] is not then:
        hit = _PREFIXED[key] = (first, then, _prefix(first, then))
    return hit[2]


def _prefix(first: Compiled, then: Compiled) -> tuple[str, frozenset[str]] | None:
    own, then_split = split_with(first.sql), split_with(then.sql)
    if own is None or then_split is None:
        return None
    (ctes, main), (then_ctes, then_main) = own, then_split
    writes = ("INSERT ", "UPDATE ", "DELETE ")
    if not main.upper().startswith(writes) or not then_main.upper().startswith(writes):
        return None
    names = [n.lower() for n, _ in ctes] + [_WAITED_AS] + [n.lower() for n, _ in then_ctes]
    if len(set(names)) != len(names):
        return None
    offset = len(first.names)
    parts = [*ctes, (_WAITED_AS, main), *((n, _shifted(b, offset)) for n, b in then_ctes)]
    tail = _shifted(then_main, offset)
    sql = "WITH " + ", ".join(f"{n} AS ({body})" for n, body in parts) + " " + tail
    return sql, _tables_written(first.sql)


_CTE_HEAD = re.compile(r"\s*(\w+)\s+AS\s*\(", re.IGNORECASE)


def split_with(sql: str) -> tuple[list[tuple[str, str]], str] | None:
    """The (name, body) CTEs of `WITH a AS (...), b AS (...) <main>` and its main statement
    (no CTEs: `[]` and the statement), by matching parentheses outside quoted strings and
    identifiers. None for what this does not read (`WITH RECURSIVE`, `AS MATERIALIZED`,
    unbalanced text): the caller then sends the statements apart."""
    text = sql.strip()
    if text[:5].upper() != "WITH ":
        return [], text
    ctes: list[tuple[str, str]] = []
    i = 5
    while True:
        head = _CTE_HEAD.match(text, i)
        if head is None or head[1].upper() == "RECURSIVE":
            return None
        end = _closing(text, head.end())
        if end is None:
            return None
        ctes.append((head[1], text[head.end() : end]))
        rest = text[end + 1 :].lstrip()
        if not rest.startswith(","):
            return ctes, rest
        i = text.index(",", end) + 1


def _closing(text: str, start: int) -> int | None:
    """The index of the parenthesis that closes the one just before `start`, or None."""
    depth, i = 1, start
    while i < len(text):
        c = text[i]
        if c in "'\"":
            i = text.find(c, i + 1)  # a doubled quote reads as two strings: the same depth
            if i < 0:
                return None
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None
