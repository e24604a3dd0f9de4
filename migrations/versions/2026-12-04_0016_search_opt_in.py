"""The history search index kept only for threads that search (issue 37).

Before, every message insert of every thread fed the index (SQLite: the FTS5 insert trigger,
its tokenizer over the message and its tool text; PostgreSQL: the BEFORE trigger's
`to_tsvector`), whether any agent searched or not: about 1.6 M instructions of a 20 M bench
turn on SQLite (callgrind) and 0.27 ms of server time per 8 KB message on PostgreSQL.

- `threads.searchable`: whether the thread's messages are indexed. The store sets it when it
  creates a thread (off for the agents the module declares without `search`), and the module
  turns it on or off for its agents' threads at start-up (`SqlAgentStore.index_agents`).
- `messages.indexed`: whether this row is in the index, written by the append from the
  thread's flag in the same statement (the row already reads the bumped thread row for its
  seq: no extra lookup). The triggers fire only for indexed rows (`WHEN`): an unindexed row
  costs the index nothing, and an erased one is not taken out of an index it never entered
  (FTS5 must not be told to delete a row it does not hold).
- Turning search on later indexes the thread's old rows by setting `indexed` (a bounded batch
  at a time): on PostgreSQL the BEFORE trigger fires on that update too; on SQLite a fourth
  trigger (`messages_fts_backfill`) gives the row its key and indexes it.

Existing threads and rows stay as they were: searchable and indexed (`server_default` true).

Revision ID: 0016_search_opt_in
Revises: 0015_cache_writes
Create Date: 2026-12-04 20:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bounded_agents.store.dialect import dialect_of

revision: str = "0016_search_opt_in"
down_revision: str | None = "0015_cache_writes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NEXT_ID = "(SELECT coalesce(max(search_id), 0) + 1 FROM messages)"
_INDEX_ROW = (
    f"UPDATE messages SET search_id = {_NEXT_ID} "
    "WHERE rowid = new.rowid AND new.search_id IS NULL; "
    "INSERT INTO messages_fts(rowid, content, search_text) "
    "SELECT search_id, content, search_text FROM messages WHERE rowid = new.rowid;"
)
_DELETE_ROW = (
    "INSERT INTO messages_fts(messages_fts, rowid, content, search_text) "
    "VALUES ('delete', old.search_id, old.content, old.search_text);"
)
_SQLITE_DROP = [
    "DROP TRIGGER messages_fts_insert",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_update",
]
_SQLITE_UP = [
    f"CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.indexed BEGIN "
    f"{_INDEX_ROW} END",
    f"CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.indexed BEGIN "
    f"{_DELETE_ROW} END",
    f"CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, search_text ON messages "
    f"WHEN old.indexed AND new.indexed BEGIN {_DELETE_ROW} "
    "INSERT INTO messages_fts(rowid, content, search_text) "
    "VALUES (new.search_id, new.content, new.search_text); END",
    f"CREATE TRIGGER messages_fts_backfill AFTER UPDATE OF indexed ON messages "
    f"WHEN new.indexed AND NOT old.indexed BEGIN {_INDEX_ROW} END",
]
_SQLITE_DOWN = [
    # 0012's triggers, as 0012 made them
    f"CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN {_INDEX_ROW} END",
    f"CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN {_DELETE_ROW} END",
    f"CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, search_text ON messages "
    f"BEGIN {_DELETE_ROW} INSERT INTO messages_fts(rowid, content, search_text) "
    "VALUES (new.search_id, new.content, new.search_text); END",
]
_PG_UP = [
    "DROP TRIGGER messages_search_vector ON messages",
    "CREATE TRIGGER messages_search_vector BEFORE INSERT OR UPDATE OF content, search_text, "
    "indexed ON messages FOR EACH ROW WHEN (NEW.indexed) "
    "EXECUTE FUNCTION messages_search_vector()",
]
_PG_DOWN = [
    "DROP TRIGGER messages_search_vector ON messages",
    "CREATE TRIGGER messages_search_vector BEFORE INSERT OR UPDATE OF content, search_text "
    "ON messages FOR EACH ROW EXECUTE FUNCTION messages_search_vector()",
]


def upgrade() -> None:
    bind = op.get_bind()
    postgres = dialect_of(bind).postgres
    if postgres and _has_citus(bind):
        op.execute("SET LOCAL citus.enable_unsafe_triggers TO on")
    if not postgres:
        for statement in _SQLITE_DROP:
            op.execute(statement)
    with op.batch_alter_table("threads") as batch:
        batch.add_column(
            sa.Column("searchable", sa.Boolean, nullable=False, server_default=sa.true())
        )
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("indexed", sa.Boolean, nullable=False, server_default=sa.true()))
    for statement in _PG_UP if postgres else _SQLITE_UP:
        op.execute(statement)


def downgrade() -> None:
    """Every row indexed first (0015's index holds every message), then the columns go."""
    bind = op.get_bind()
    postgres = dialect_of(bind).postgres
    if postgres and _has_citus(bind):
        op.execute("SET LOCAL citus.enable_unsafe_triggers TO on")
    op.execute("UPDATE messages SET indexed = true WHERE NOT indexed")
    if postgres:
        for statement in _PG_DOWN:
            op.execute(statement)
    else:
        for statement in ("DROP TRIGGER messages_fts_backfill", *_SQLITE_DROP):
            op.execute(statement)
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("indexed")
    with op.batch_alter_table("threads") as batch:
        batch.drop_column("searchable")
    if not postgres:
        for statement in _SQLITE_DOWN:
            op.execute(statement)


def _has_citus(bind: sa.Connection) -> bool:
    found = bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first()
    return found is not None
