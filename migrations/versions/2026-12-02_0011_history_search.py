"""History search: a full-text index over `messages.content` (the `search_history` tool).

PostgreSQL: `messages.search_vector`, a generated column `to_tsvector('simple', ...)` of the
first 100,000 characters of `content` (a tsvector holds at most 1 MB, and an append must never
fail on a long message), with a GIN index. Being generated, it is computed for every existing
row by the ALTER itself: old messages are searchable at once. 'simple' has no stemming and no
stop words: identifiers and names, which is what a search of a conversation is for, match
as written.

SQLite: `messages_fts`, an FTS5 table over `messages.content` (external content, by rowid:
the text is not stored twice), kept by triggers on insert, delete and update of `messages`,
and rebuilt from the table here, so old messages are searchable too. A later migration that
rebuilds `messages` (batch mode: copy, DROP, rename) loses the triggers with the dropped table
and may renumber rowids: it must create the three triggers again and end with
`INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')`. (VACUUM keeps the rowids.)

Neither object is in `schema.metadata` (`bounded_agents.store.search` says why).

Revision ID: 0011_search
Revises: 0010
Create Date: 2026-12-02 14:00:00
"""

from collections.abc import Sequence

from alembic import op

from bounded_agents.store.dialect import dialect_of

revision: str = "0011_search"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PG_UP = [
    "ALTER TABLE messages ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', left(content, 100000))) STORED",
    "CREATE INDEX ix_messages_search_vector ON messages USING gin (search_vector)",
]
_PG_DOWN = [
    "DROP INDEX ix_messages_search_vector",
    "ALTER TABLE messages DROP COLUMN search_vector",
]

_SQLITE_UP = [
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
_SQLITE_DOWN = [
    "DROP TRIGGER messages_fts_update",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_insert",
    "DROP TABLE messages_fts",
]


def upgrade() -> None:
    for statement in _PG_UP if dialect_of(op.get_bind()).postgres else _SQLITE_UP:
        op.execute(statement)


def downgrade() -> None:
    for statement in _PG_DOWN if dialect_of(op.get_bind()).postgres else _SQLITE_DOWN:
        op.execute(statement)
