"""Search that finds: stemmed, tool results indexed, a .dump-safe SQLite key, summary archive.

What changes against 0011 (`bounded_agents.store.search` says how each is read):

- `messages.search_text` (both databases): the text of the message's tool results except the
  search tool's own (`bounded_agents.core.search_text`), written by the store with the row;
  NULL for a message without tool results. It is indexed beside `content`.
- The index's language is `AGENT_SEARCH_LANGUAGE` (default `english`), read here, once:
  PostgreSQL's text search configuration of that name, SQLite's `porter unicode61` for
  English (FTS5 has no other stemmer) and `unicode61` otherwise.
- PostgreSQL: 0011's generated `search_vector` (`'simple'`, content only) becomes a plain
  column kept by a BEFORE INSERT/UPDATE trigger, content weighted A and tool text B, in the
  configuration `bounded_search_config()` returns (a function, so the query uses the very
  configuration the index was built with, whatever the setting says later).
- SQLite: `messages_fts` is rebuilt keyed on an explicit column, `messages.search_id` (indexed,
  assigned by the insert trigger), instead of the implicit rowid: `sqlite3 db .dump` writes
  every column's value but renumbers implicit rowids, so an index keyed on them pointed at
  other messages after a restore (issue 40, break 5). Two columns, content and search_text.
- `summary_archive`: a summary's parts that could not be compressed below its cap, with the
  seq range they cover; indexed the same way (PostgreSQL `search_vector`, SQLite
  `summary_archive_fts` keyed on `summary_archive.search_id`).

Bounded batches: the existing rows are indexed BATCH_ROWS at a time, walked by the primary key
(`(thread_id, seq) > last`, the key's own index), each batch one SELECT of at most BATCH_ROWS
rows (Python computes `search_text` from its tool results) and one UPDATE of at most as many:
memory and each statement's work are bounded whatever the table's size. They run in the
migration's one transaction (every migration of this project is one, and SQLite's is the
database's write lock anyway); PostgreSQL's GIN index is built once, after the backfill, which
is cheaper than maintaining it row by row.

Revision ID: 0012_search
Revises: 0011_search
Create Date: 2026-12-04 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from bounded_agents.core.messages import decode_tool_calls, decode_tool_results
from bounded_agents.core.search_text import indexable_tool_text
from bounded_agents.settings import get_settings
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.distribute import threads_distributed
from bounded_agents.store.migrate import MigrationRefused

revision: str = "0012_search"
down_revision: str | None = "0011_search"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH_ROWS = 2_000

_PG_VECTOR = (
    "setweight(to_tsvector(bounded_search_config(), left({row}.content, 100000)), 'A') || "
    "setweight(to_tsvector(bounded_search_config(), left(coalesce({row}.search_text, ''), "
    "100000)), 'B')"
)
_PG_ARCHIVE_VECTOR = "to_tsvector(bounded_search_config(), left({row}.content, 100000))"


def _pg_up(language: str) -> list[str]:
    return [
        "DROP INDEX ix_messages_search_vector",
        "ALTER TABLE messages DROP COLUMN search_vector",
        "ALTER TABLE messages ADD COLUMN search_vector tsvector",
        "ALTER TABLE summary_archive ADD COLUMN search_vector tsvector",
        "CREATE FUNCTION bounded_search_config() RETURNS regconfig LANGUAGE sql IMMUTABLE "
        f"AS $$ SELECT '{language}'::regconfig $$",
        "CREATE FUNCTION messages_search_vector() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN NEW.search_vector := {_PG_VECTOR.format(row='NEW')}; RETURN NEW; END $$",
        "CREATE TRIGGER messages_search_vector BEFORE INSERT OR UPDATE OF content, search_text "
        "ON messages FOR EACH ROW EXECUTE FUNCTION messages_search_vector()",
        "CREATE FUNCTION summary_archive_search_vector() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN NEW.search_vector := {_PG_ARCHIVE_VECTOR.format(row='NEW')}; RETURN NEW; END $$",
        "CREATE TRIGGER summary_archive_search_vector BEFORE INSERT OR UPDATE OF content "
        "ON summary_archive FOR EACH ROW EXECUTE FUNCTION summary_archive_search_vector()",
    ]


_PG_INDEXES = [
    "CREATE INDEX ix_messages_search_vector ON messages USING gin (search_vector)",
    "CREATE INDEX ix_summary_archive_search_vector ON summary_archive USING gin (search_vector)",
]
_PG_DOWN = [
    "DROP TRIGGER summary_archive_search_vector ON summary_archive",
    "DROP FUNCTION summary_archive_search_vector()",
    "DROP TRIGGER messages_search_vector ON messages",
    "DROP FUNCTION messages_search_vector()",
    "DROP INDEX ix_messages_search_vector",
    "ALTER TABLE messages DROP COLUMN search_vector",
    "DROP FUNCTION bounded_search_config()",
    "ALTER TABLE messages ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', left(content, 100000))) STORED",
    "CREATE INDEX ix_messages_search_vector ON messages USING gin (search_vector)",
]

_NEXT_ID = "(SELECT coalesce(max(search_id), 0) + 1 FROM {table})"
"""A new row's search key: past every key in use (its index answers it; the write lock makes
it unique: SQLite has one writer, and a plain index because every unique key of a thread's
table holds `thread_id`, for Citus, which this SQLite-only column needs not). Never the
rowid: after a .dump and restore the rowids start again from 1 while the keys are kept."""


_SQLITE_UP = [
    "DROP TRIGGER messages_fts_update",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_insert",
    "DROP TABLE messages_fts",
    "ALTER TABLE messages ADD COLUMN search_id INTEGER",
    "ALTER TABLE summary_archive ADD COLUMN search_id INTEGER",
]


def _sqlite_index(tokenizer: str) -> list[str]:
    """After the backfill: the FTS5 tables and their triggers (a trigger during the backfill
    would index rows whose key is not set yet)."""
    return [
        "CREATE INDEX ix_messages_search_id ON messages (search_id)",
        "CREATE INDEX ix_summary_archive_search_id ON summary_archive (search_id)",
        f"CREATE VIRTUAL TABLE messages_fts USING fts5(content, search_text, "
        f"content='messages', content_rowid='search_id', tokenize='{tokenizer}')",
        f"CREATE VIRTUAL TABLE summary_archive_fts USING fts5(content, "
        f"content='summary_archive', content_rowid='search_id', tokenize='{tokenizer}')",
        *_sqlite_triggers("messages", "messages_fts", ("content", "search_text")),
        *_sqlite_triggers("summary_archive", "summary_archive_fts", ("content",)),
    ]


def _sqlite_triggers(table: str, fts: str, columns: tuple[str, ...]) -> list[str]:
    cols = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    old = ", ".join(f"old.{c}" for c in columns)
    delete = f"INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.search_id, {old});"
    return [
        f"CREATE TRIGGER {fts}_insert AFTER INSERT ON {table} BEGIN "
        f"UPDATE {table} SET search_id = {_NEXT_ID.format(table=table)} "
        f"WHERE rowid = new.rowid AND new.search_id IS NULL; "
        f"INSERT INTO {fts}(rowid, {cols}) SELECT search_id, {cols} FROM {table} "
        f"WHERE rowid = new.rowid; END",
        f"CREATE TRIGGER {fts}_delete AFTER DELETE ON {table} BEGIN {delete} END",
        f"CREATE TRIGGER {fts}_update AFTER UPDATE OF {cols} ON {table} BEGIN {delete} "
        f"INSERT INTO {fts}(rowid, {cols}) VALUES (new.search_id, {new}); END",
    ]


_SQLITE_DOWN = [
    "DROP TRIGGER summary_archive_fts_update",
    "DROP TRIGGER summary_archive_fts_delete",
    "DROP TRIGGER summary_archive_fts_insert",
    "DROP TABLE summary_archive_fts",
    "DROP TRIGGER messages_fts_update",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_insert",
    "DROP TABLE messages_fts",
    "DROP INDEX ix_messages_search_id",
    "ALTER TABLE messages DROP COLUMN search_id",
    # 0011's index, as 0011 made it
    "CREATE VIRTUAL TABLE messages_fts USING fts5("
    "content, content='messages', content_rowid='rowid', tokenize='unicode61')",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) "
    "VALUES ('delete', old.rowid, old.content); END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) "
    "VALUES ('delete', old.rowid, old.content); "
    "INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
]


def sqlite_tokenizer(language: str) -> str:
    """FTS5's tokenizer for a language: its one stemmer (Porter's, English) or none."""
    return "porter unicode61" if language == "english" else "unicode61"


def upgrade() -> None:
    bind = op.get_bind()
    language = get_settings().search_language
    op.add_column("messages", sa.Column("search_text", sa.Text, nullable=True))
    op.create_table(
        "summary_archive",
        sa.Column("thread_id", sa.String(36), nullable=False),
        sa.Column("from_seq", sa.Integer, nullable=False),
        sa.Column("to_seq", sa.Integer, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.current_timestamp(),
        ),
        sa.PrimaryKeyConstraint("thread_id", "from_seq", "to_seq", name="pk_summary_archive"),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name="fk_summary_archive_thread_id_threads",
            ondelete="CASCADE",
        ),
    )
    if dialect_of(bind).postgres:
        citus = threads_distributed(bind)
        if citus:
            # Triggers on distributed tables (the search vectors') are refused without this
            # (migrations/env.py runs the whole migration over one connection per node).
            op.execute("SET LOCAL citus.enable_unsafe_triggers TO on")
        known = bind.execute(
            sa.text("SELECT 1 FROM pg_ts_config WHERE cfgname = :name"), {"name": language}
        ).first()
        if known is None:
            raise MigrationRefused(
                f"AGENT_SEARCH_LANGUAGE={language!r} is not a text search configuration of "
                "this database (SELECT cfgname FROM pg_ts_config lists them)"
            )
        for statement in _pg_up(language):
            op.execute(statement)
        _backfill(bind, f"search_vector = {_PG_VECTOR.format(row='messages')}")
        for statement in _PG_INDEXES:
            op.execute(statement)
        if citus:
            # A database distributed before this revision: its new table joins the thread's
            # shards, as `bounded_agents.store.distribute` would place it.
            op.execute(
                "SELECT create_distributed_table('summary_archive', 'thread_id', "
                "colocate_with => 'threads')"
            )
    else:
        for statement in _SQLITE_UP:
            op.execute(statement)
        _backfill(bind, "search_id = rowid")
        for statement in _sqlite_index(sqlite_tokenizer(language)):
            op.execute(statement)
        _sqlite_fill_index(bind)


_PAGE = sa.text(
    "SELECT thread_id, seq, tool_calls, tool_results FROM messages "
    "WHERE (thread_id, seq) > (:tid, :seq) ORDER BY thread_id, seq LIMIT :n"
)
_FIRST_PAGE = sa.text(
    "SELECT thread_id, seq, tool_calls, tool_results FROM messages ORDER BY thread_id, seq LIMIT :n"
)
_SET_TEXT = sa.text("UPDATE messages SET search_text = :text WHERE thread_id = :tid AND seq = :seq")


def _backfill(bind: Any, assignment: str) -> None:
    """Every message, BATCH_ROWS at a time by key: its `search_text` from its tool results,
    then `assignment` for the batch's key range (PostgreSQL: the vector; SQLite: the key)."""
    update = sa.text(
        f"UPDATE messages SET {assignment} WHERE (thread_id, seq) >= (:t0, :s0) "
        "AND (thread_id, seq) <= (:t1, :s1)"
    )
    last: tuple[str, int] | None = None
    while True:
        params: dict[str, Any] = {"n": BATCH_ROWS}
        if last is None:
            rows = bind.execute(_FIRST_PAGE, params).all()
        else:
            rows = bind.execute(_PAGE, {**params, "tid": last[0], "seq": last[1]}).all()
        if not rows:
            return
        texts = [
            {"tid": r.thread_id, "seq": r.seq, "text": text}
            for r in rows
            if r.tool_results
            and (
                text := indexable_tool_text(
                    decode_tool_calls(r.tool_calls), decode_tool_results(r.tool_results)
                )
            )
        ]
        if texts:
            bind.execute(_SET_TEXT, texts)
        first = rows[0]
        last = (rows[-1].thread_id, rows[-1].seq)
        bind.execute(update, {"t0": first.thread_id, "s0": first.seq, "t1": last[0], "s1": last[1]})
        if len(rows) < BATCH_ROWS:
            return


def _sqlite_fill_index(bind: Any) -> None:
    """SQLite: the new FTS5 index filled from `messages`, BATCH_ROWS keys per statement (a
    'rebuild' would read the whole table in one)."""
    after = 0
    while True:
        top = bind.execute(
            sa.text(
                "SELECT max(search_id) FROM (SELECT search_id FROM messages WHERE search_id > :a "
                "ORDER BY search_id LIMIT :n)"
            ),
            {"a": after, "n": BATCH_ROWS},
        ).scalar()
        if top is None:
            return
        bind.execute(
            sa.text(
                "INSERT INTO messages_fts(rowid, content, search_text) "
                "SELECT search_id, content, search_text FROM messages "
                "WHERE search_id > :a AND search_id <= :b"
            ),
            {"a": after, "b": top},
        )
        after = top


def downgrade() -> None:
    bind = op.get_bind()
    if dialect_of(bind).postgres:
        for statement in _PG_DOWN:
            op.execute(statement)
    else:
        for statement in _SQLITE_DOWN:
            op.execute(statement)
    op.drop_table("summary_archive")
    op.drop_column("messages", "search_text")
