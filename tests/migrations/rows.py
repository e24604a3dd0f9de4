"""Rows for every table of the schema at any revision, made from the tables as reflected then.

Nothing here names a revision: a migration that adds a table or a column of a plain type is
seeded without an edit. Columns whose values carry meaning beyond their type (a CHECK's set of
values, JSON the migrations decode, the actor a usage row belongs to) are named in `_HINTS`; a
new such column makes the seed's INSERT fail loudly until it is named there too.

The rows keep the app's invariants, so what a migration derives from them is what it would
derive from a real database: parents before children through every foreign key, seq 1..n per
thread, one `running` run per thread (held by a live lease), a usage row for every actor with
ledger rows, each run's request as the app writes it, tool calls and results encoded by the
store's own codec. Every third nullable column is NULL, BIGINT
columns hold figures past 2^31, text holds non-ASCII characters, quotes and backslashes.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from bounded_agents.core.messages import Attachment, Message, ToolCall, ToolResult
from bounded_agents.core.ports import RunRequest
from bounded_agents.store.codec import to_row
from bounded_agents.store.search import is_search_object

ACTORS = ("alice", "bøb", "carol")
ROOT_ROWS = len(ACTORS)
"""Rows of a table with no foreign key: one per actor, so a table keyed by actor holds each."""
CHILD_ROWS = 6
"""Rows per parent row of a table with a foreign key."""

_NAMESPACE = uuid.UUID("8e0d1f3c-5a4b-4c2d-9e8f-7a6b5c4d3e2f")
_START = dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)
_LIVE_LEASE = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_TEXT = "ünïcødé ✓ 'single' \"double\" \\ back\\slash %s _ $1"

_CALL = ToolCall(
    id="call_1", name="read_page", arguments={"url": "https://example.com/zürich", "depth": 2}
)
_CALLS = [
    ToolCall(id="call_2", name="read_page", arguments={"url": "https://example.com/a"}),
    ToolCall(id="call_3", name="search", arguments={"q": "météo demain", "n": 3}),
]
CONVERSATION = (
    Message(role="user", content="What is the weather in Zürich? ☀"),
    Message(
        role="assistant",
        content="It is 18 °C.",
        tool_calls=[_CALL],
        tool_results=[ToolResult(call_id="call_1", content="<html>… 18 °C …</html>")],
    ),
    Message(role="user", content="And tomorrow? Check two sources."),
    Message(
        role="assistant",
        content="One source failed; the other says 21 °C.",
        tool_calls=_CALLS,
        tool_results=[
            ToolResult(call_id="call_2", content="timeout", is_error=True),
            ToolResult(call_id="call_3", content='{"tomorrow": "21 °C"}'),
        ],
    ),
    Message(role="system", content="Summary of the earlier turns: weather in Zürich."),
    Message(
        role="user",
        content="Here is a picture.",
        attachments=[Attachment(name="sky.png", media_type="image/png", data="iVBORw0KGgo=")],
    ),
)
"""One thread's messages: the conversation a thread's `CHILD_ROWS` messages go through."""

_MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_results", "attachments")


Hint = Callable[[dict[str, Any], int, int], Any]
"""A column's value from the row's other values, its index in its table, and its index among
its parent's rows."""


def _message_field(name: str) -> Hint:
    return lambda _row, _i, k: to_row("", 0, CONVERSATION[k % len(CONVERSATION)])[name]


def _lease(row: dict[str, Any], _i: int, _k: int) -> Any:
    # A running run is held by a live process elsewhere: nothing resumes it at start-up.
    return _LIVE_LEASE if row.get("status") == "running" else None


def _request(row: dict[str, Any], _i: int, k: int) -> str:
    fields = ("id", "thread_id", "actor_id", "agent")
    run_id, thread_id, actor_id, agent = (row.get(f, "") for f in fields)
    content = CONVERSATION[(2 * k) % len(CONVERSATION)].content
    return RunRequest(
        run_id=run_id, thread_id=thread_id, actor_id=actor_id, agent=agent, content=content
    ).model_dump_json()


_HINTS: dict[str, Hint] = {
    **{name: _message_field(name) for name in _MESSAGE_FIELDS},
    "actor_id": lambda _row, i, _k: ACTORS[i % len(ACTORS)],
    "status": lambda _row, _i, k: "running" if k == 0 else ("completed" if k % 2 else "failed"),
    "lease_expires_at": _lease,
    "request": _request,
}
"""Values by column name, where the type says too little (see the module docstring); each is
made after the row's other columns, in this order."""

SKIPPED = frozenset({"alembic_version"})

Rows = dict[str, list[dict[str, Any]]]


def reflect(conn: sa.Connection) -> sa.MetaData:
    """The schema's tables; not the search index's (an FTS5 table and its shadow tables are
    SQLite's own, filled by triggers, never written or compared as data)."""
    meta = sa.MetaData()
    meta.reflect(bind=conn, only=lambda name, _meta: not is_search_object(name, "table"))
    return meta


def _data_columns(table: sa.Table) -> list[sa.Column[Any]]:
    """The columns that hold data: the search index's (`search_vector`, generated in 0011 and
    trigger-kept from 0012; SQLite's `search_id` key, assigned by a trigger) are the
    database's function of the others, never written, and compared through them."""
    return [
        c for c in table.columns if c.computed is None and not is_search_object(c.name, "column")
    ]


def seed(conn: sa.Connection, *, big: bool = True) -> Rows:
    """Insert rows into every table (parents first) and return them, by table. `big`: BIGINT
    columns hold figures past 2^31 (False: figures an INTEGER holds too)."""
    made: Rows = {}
    for table in reflect(conn).sorted_tables:
        if table.name in SKIPPED:
            continue
        rows = _rows(table, made, big)
        conn.execute(table.insert(), rows)
        made[table.name] = rows
    return made


def snapshot(conn: sa.Connection) -> Rows:
    """Every row of every table, read back through the tables as reflected now."""
    return {
        table.name: [dict(row._mapping) for row in conn.execute(sa.select(*_data_columns(table)))]
        for table in reflect(conn).sorted_tables
        if table.name not in SKIPPED
    }


def counts(rows: Rows) -> dict[str, int]:
    return {name: len(table_rows) for name, table_rows in rows.items()}


def differences(
    before: Rows, after: Rows, *, dropped: Mapping[tuple[str, str], str] = {}
) -> list[str]:
    """What of `before` is not in `after`, one line per table: a table gone, a column gone
    (unless `dropped` names it, with the reason), rows lost, added or changed in the columns
    both have. Empty when every row is there with every value."""
    problems: list[str] = []
    for name, old in before.items():
        if name not in after:
            problems.append(f"{name}: table gone with its {len(old)} rows")
            continue
        new = after[name]
        old_columns = set(old[0]) if old else set()
        new_columns = set(new[0]) if new else old_columns
        gone = {c for c in old_columns - new_columns if (name, c) not in dropped}
        if gone:
            problems.append(f"{name}: columns gone with their values: {sorted(gone)}")
        kept = sorted(old_columns & new_columns)
        lost = _projected(old, kept) - _projected(new, kept)
        added = _projected(new, kept) - _projected(old, kept)
        if lost or added:
            example = dict(zip(kept, next(iter(lost or added)), strict=True))
            problems.append(
                f"{name}: {len(old)} rows before, {len(new)} after; {sum(lost.values())} lost "
                f"or changed, {sum(added.values())} new or changed; e.g. {example}"
            )
    return problems


def _projected(rows: list[dict[str, Any]], columns: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row[c] for c in columns) for row in rows)


def _rows(table: sa.Table, made: Rows, big: bool) -> list[dict[str, Any]]:
    constraints = sorted(table.foreign_key_constraints, key=lambda fk: fk.name or "")
    fan_out = constraints[0] if constraints else None
    parents: list[dict[str, Any] | None] = (
        list(made[fan_out.referred_table.name]) if fan_out is not None else [None]
    )
    per_parent = CHILD_ROWS if fan_out is not None else ROOT_ROWS
    numbered_per_parent = _numbered_per_parent(table, fan_out)
    rows: list[dict[str, Any]] = []
    for parent in parents:
        for k in range(per_parent):
            i = len(rows)
            row: dict[str, Any] = {}
            for fk in constraints:
                referred = parent if fk is fan_out else _pick(made[fk.referred_table.name], i)
                assert referred is not None
                for element in fk.elements:
                    row[element.parent.name] = referred[element.column.name]
            for column in _data_columns(table):
                if column.name not in row and column.name not in _HINTS:
                    row[column.name] = _value(table, column, i, k, numbered_per_parent, big)
            for name, hint in _HINTS.items():
                if name in table.columns and name not in row:
                    row[name] = _fitted(table.columns[name], hint(row, i, k))
            rows.append(row)
    return rows


def _pick(rows: list[dict[str, Any]], i: int) -> dict[str, Any]:
    return rows[i % len(rows)]


def _numbered_per_parent(table: sa.Table, fan_out: sa.ForeignKeyConstraint | None) -> set[str]:
    """Integer columns numbered 1..n under each parent row (a message's seq, a step's
    position): those in a key or unique constraint together with the parent's columns."""
    if fan_out is None:
        return set()
    parent_columns = {c.name for c in fan_out.columns}
    keys = [table.primary_key.columns, *(i.columns for i in table.indexes if i.unique)]
    keys += [c.columns for c in table.constraints if isinstance(c, sa.UniqueConstraint)]
    return {
        c.name
        for key in keys
        if parent_columns < {c.name for c in key}
        for c in key
        if c.name not in parent_columns and isinstance(c.type, sa.Integer)
    }


def _fitted(column: sa.Column[Any], value: Any) -> Any:
    if isinstance(value, dt.datetime) and not getattr(column.type, "timezone", True):
        return value.replace(tzinfo=None)
    return value


def _value(
    table: sa.Table, column: sa.Column[Any], i: int, k: int, per_parent: set[str], big: bool
) -> Any:
    if column.name in per_parent:
        return k + 1
    if column.nullable and i % 3 == 2:
        return None
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return i % 2 == 1
    if isinstance(kind, sa.BigInteger) and big:
        return 3_000_000_000 + i
    if isinstance(kind, sa.Integer):
        return i + 1
    if isinstance(kind, sa.DateTime):
        return _fitted(column, _START + dt.timedelta(minutes=i, microseconds=i))
    if isinstance(kind, sa.Float):  # exact in binary, so a round trip compares equal
        return 1.0 + i / 8
    if isinstance(kind, sa.String) and kind.length is not None:
        if kind.length == 36:  # the project's ids: uuid4 strings
            return str(uuid.uuid5(_NAMESPACE, f"{table.name}.{column.name}.{i}"))
        return f"{column.name} {i} {_TEXT}"[: kind.length]
    if isinstance(kind, sa.String):  # TEXT: the project keeps JSON in it
        return json.dumps({"table": table.name, "row": i, "text": _TEXT}, ensure_ascii=False)
    raise TypeError(
        f"no seed value for {table.name}.{column.name} ({kind!r}): teach tests/migrations/rows.py"
    )
