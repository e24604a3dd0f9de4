"""SQLite's search index keyed by thread: a thread's search no longer reads other threads' matches.

Before, `messages_fts MATCH :q` found every row of the DATABASE holding one of the query's words,
and the join to `messages` then kept the thread's: a thread's search cost grew with the other
threads' matching messages (`python -m bench.search_scale`: 2.6 ms alone, 47 ms beside 60,000
of them, 18x). Each FTS5 table now indexes its row's thread too, as one token, so the query
ANDs the thread's token with the words (`bounded_agents.store.search`): FTS5 walks the
thread's own doclist and skips through the words' ones.

- The token is `hex(thread_id)`, the id's UTF-8 bytes in hexadecimal: ONE token whatever the
  id holds (a UUID's dashes, a named thread's colons or accents would split it into several,
  or into none), so each row grows by one token, the least that `bm25()`'s length
  normalization can see (it counts every column's tokens, whatever their weight; found by
  attack: a UUID's five tokens flipped the order of two hits), and no id is a phrase of
  another's.
- FTS5 reads a row's columns back from its external content by name (for `highlight()` and
  its integrity check), so each table's content is now a view of its table that adds
  `thread_key` (`messages_fts_rows`, `summary_archive_fts_rows`).
- The new column is last (`content, search_text, thread_key`; the archive's `content,
  thread_key`), so `highlight()`'s column numbers stay; the query gives it weight 0 in
  `bm25()`, and holds the words to the text columns.
- Same tokenizer as the table it replaces (read from `sqlite_master`): the language the index
  was built with (0012) stays, whatever `AGENT_SEARCH_LANGUAGE` says now.
- Same triggers as 0016 made them, each giving the thread's token beside the text (FTS5's
  external content `delete` must be told the values it indexed). Only indexed rows
  (`messages.indexed`, 0016) go back into the index.
- Refilled SEARCH_BATCH keys per statement, as 0012 filled it ('rebuild' would read the whole
  table in one statement).

PostgreSQL had the same growth, by its planner's choice: with the GIN index on `search_vector`
alone, a common word's bitmap over the whole table was ANDed with the thread's (600,000 rows, the
word in 60,100: 2.8 ms, nearly all of it that bitmap; measured on this machine). The GIN index
is now on `(thread_id, search_vector)`, which GIN intersects inside one scan, skipping through
the word's posting tree to the thread's rows (the same query: 0.11 ms, 11 buffers).

- A GIN index over a varchar needs the `btree_gin` extension (in PostgreSQL's contrib,
  "trusted" since 13: a database owner may create it). Where it cannot be created (not
  installed, or not allowed), the upgrade keeps the index as it was and says so in the log;
  the search works either way.
- Partial, `WHERE search_vector IS NOT NULL`: the rows of agents that do not search (0016)
  are not in it, so their appends pay it nothing (the planner proves the predicate from the
  query's `search_vector @@ ...`).
- Built with a plain `CREATE INDEX IF NOT EXISTS` in the upgrade's transaction, as 0018
  explains (a SHARE lock on the table while it builds: reads go on, appends wait). A large
  table's operator can build it beforehand, with `CONCURRENTLY` and the same definition
  (`ix_messages_search_thread`, `ix_summary_archive_search_thread`); the upgrade then finds it
  and drops the old one only. On Citus the coordinator takes both to every shard.

Revision ID: 0021_search_thread_key
Revises: 0020_erased_threads_retention
Create Date: 2026-12-06 08:40:00
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from bounded_agents.store.dialect import dialect_of

revision: str = "0021_search_thread_key"
down_revision: str | None = "0020_erased_threads_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCH_BATCH = 2_000
log = logging.getLogger("alembic.runtime.migration")

_TABLES = {
    # fts table: (content table, text columns, which of the table's rows are in the index)
    "messages_fts": ("messages", ("content", "search_text"), "indexed"),
    "summary_archive_fts": ("summary_archive", ("content",), "1"),
}
_TRIGGERS = [
    "messages_fts_insert",
    "messages_fts_delete",
    "messages_fts_update",
    "messages_fts_backfill",
    "summary_archive_fts_insert",
    "summary_archive_fts_delete",
    "summary_archive_fts_update",
]
THREAD_KEY = "hex({row}.thread_id)"
"""The thread's token of a row (`{row}`: the table, `new` or `old`)."""


def _tokenizer(bind: Any, fts: str) -> str:
    """The tokenizer `fts` was made with (0012 chose it by the language of that day)."""
    sql = bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": fts},
    ).scalar_one()
    found = re.search(r"tokenize\s*=\s*'([^']*)'", sql)
    return found.group(1) if found else "unicode61"


def _values(fts: str, keyed: bool, row: str) -> tuple[str, str]:
    """(the FTS columns, the values of `row` for them)."""
    _, text, _ = _TABLES[fts]
    columns = (*text, "thread_key") if keyed else text
    values = [f"{row}.{c}" for c in text]
    if keyed:
        values.append(THREAD_KEY.format(row=row))
    return ", ".join(columns), ", ".join(values)


def _create(fts: str, keyed: bool, tokenizer: str) -> list[str]:
    table, text, _ = _TABLES[fts]
    columns, _ = _values(fts, keyed, table)
    if not keyed:
        return [
            f"CREATE VIRTUAL TABLE {fts} USING fts5({columns}, content='{table}', "
            f"content_rowid='search_id', tokenize='{tokenizer}')"
        ]
    source = f"{fts}_rows"
    text_columns = ", ".join(text)
    return [
        f"CREATE VIEW {source} AS SELECT search_id, {text_columns}, "
        f"{THREAD_KEY.format(row=table)} AS thread_key FROM {table}",
        f"CREATE VIRTUAL TABLE {fts} USING fts5({columns}, content='{source}', "
        f"content_rowid='search_id', tokenize='{tokenizer}')",
    ]


def _triggers(keyed: bool) -> list[str]:
    """0016's triggers (messages) and 0012's (the archive), with the thread's token when
    `keyed`."""
    out: list[str] = []
    for fts, (table, text, indexed) in _TABLES.items():
        cols, from_table = _values(fts, keyed, table)
        _, old = _values(fts, keyed, "old")
        _, new = _values(fts, keyed, "new")
        index_row = (
            f"UPDATE {table} SET search_id = (SELECT coalesce(max(search_id), 0) + 1 "
            f"FROM {table}) WHERE rowid = new.rowid AND new.search_id IS NULL; "
            f"INSERT INTO {fts}(rowid, {cols}) SELECT search_id, {from_table} FROM {table} "
            "WHERE rowid = new.rowid;"
        )
        delete = f"INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.search_id, {old});"
        when_new = " WHEN new.indexed" if indexed == "indexed" else ""
        when_old = " WHEN old.indexed" if indexed == "indexed" else ""
        when_both = " WHEN old.indexed AND new.indexed" if indexed == "indexed" else ""
        out += [
            f"CREATE TRIGGER {fts}_insert AFTER INSERT ON {table}{when_new} BEGIN {index_row} END",
            f"CREATE TRIGGER {fts}_delete AFTER DELETE ON {table}{when_old} BEGIN {delete} END",
            f"CREATE TRIGGER {fts}_update AFTER UPDATE OF {', '.join(text)} ON {table}"
            f"{when_both} BEGIN {delete} "
            f"INSERT INTO {fts}(rowid, {cols}) VALUES (new.search_id, {new}); END",
        ]
        if indexed == "indexed":
            out.append(
                f"CREATE TRIGGER {fts}_backfill AFTER UPDATE OF indexed ON {table} "
                f"WHEN new.indexed AND NOT old.indexed BEGIN {index_row} END"
            )
    return out


def _fill(bind: Any, fts: str, keyed: bool) -> None:
    """The index refilled from its table's indexed rows, SEARCH_BATCH keys per statement."""
    table, _, indexed = _TABLES[fts]
    cols, values = _values(fts, keyed, table)
    after = 0
    while True:
        top = bind.execute(
            sa.text(
                f"SELECT max(search_id) FROM (SELECT search_id FROM {table} "
                "WHERE search_id > :a ORDER BY search_id LIMIT :n)"
            ),
            {"a": after, "n": SEARCH_BATCH},
        ).scalar()
        if top is None:
            return
        bind.execute(
            sa.text(
                f"INSERT INTO {fts}(rowid, {cols}) SELECT search_id, {values} FROM {table} "
                f"WHERE search_id > :a AND search_id <= :b AND {indexed}"
            ),
            {"a": after, "b": top},
        )
        after = top


_PG_INDEXES = {
    # table: (the index on the vector alone, 0012's; the one keyed by thread)
    "messages": ("ix_messages_search_vector", "ix_messages_search_thread"),
    "summary_archive": ("ix_summary_archive_search_vector", "ix_summary_archive_search_thread"),
}


def _btree_gin(bind: Any) -> bool:
    """Whether `btree_gin` is there, created now if it can be (in a savepoint: a refusal
    leaves the upgrade's transaction as it was)."""
    if bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'")).first():
        return True
    try:
        with bind.begin_nested():
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS btree_gin"))
    except sa.exc.DBAPIError as exc:
        log.warning(
            "search index left unkeyed by thread: btree_gin could not be created (%s)",
            type(getattr(exc, "orig", exc)).__name__,
        )
        return False
    return True


def _postgres(bind: Any, keyed: bool) -> None:
    for table, (plain, by_thread) in _PG_INDEXES.items():
        if keyed:
            if not _btree_gin(bind):
                return
            op.execute(
                f"CREATE INDEX IF NOT EXISTS {by_thread} ON {table} USING gin "
                "(thread_id, search_vector) WHERE search_vector IS NOT NULL"
            )
            op.execute(f"DROP INDEX IF EXISTS {plain}")
        else:
            op.execute(f"CREATE INDEX IF NOT EXISTS {plain} ON {table} USING gin (search_vector)")
            op.execute(f"DROP INDEX IF EXISTS {by_thread}")


def _rebuild(keyed: bool) -> None:
    bind = op.get_bind()
    if dialect_of(bind).postgres:
        _postgres(bind, keyed)
        return
    tokenizers = {fts: _tokenizer(bind, fts) for fts in _TABLES}
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER {trigger}")
    for fts in _TABLES:
        op.execute(f"DROP TABLE {fts}")
        if not keyed:
            op.execute(f"DROP VIEW {fts}_rows")
        for statement in _create(fts, keyed, tokenizers[fts]):
            op.execute(statement)
        _fill(bind, fts, keyed)
    for statement in _triggers(keyed):
        op.execute(statement)


def upgrade() -> None:
    _rebuild(keyed=True)


def downgrade() -> None:
    _rebuild(keyed=False)
