"""Idempotency keys: a turn's key and request fingerprint on its run's row, unique per thread.

`runs.idempotency_key` and `runs.request_fingerprint` are NULL for a turn sent without an
`Idempotency-Key`. The partial unique index on (thread_id, actor_id, idempotency_key) is what
settles two concurrent requests with one key: only one run row can be inserted.

Both directions alter `runs` in place, never by a copy: `runs` is a parent table (`run_steps`
cascades from it), and on SQLite a rebuild (copy, DROP, rename) with foreign keys enforced
deletes every journal step. SQLite adds a column with ALTER TABLE ADD COLUMN and, from 3.35,
drops one with ALTER TABLE DROP COLUMN; an older SQLite cannot downgrade this revision.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 09:00:00
"""

import sqlite3
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bounded_agents.store.dialect import dialect_of

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEYED = "idempotency_key IS NOT NULL"
_INDEX = "uq_runs_thread_id_actor_id_idempotency_key"
_COLUMNS = ("request_fingerprint", "idempotency_key")


def upgrade() -> None:
    # Not in batch mode: a plain ADD COLUMN on either database, so no table is rebuilt.
    op.add_column("runs", sa.Column("idempotency_key", sa.String(255), nullable=True))
    op.add_column("runs", sa.Column("request_fingerprint", sa.String(64), nullable=True))
    op.create_index(
        _INDEX,
        "runs",
        ["thread_id", "actor_id", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text(_KEYED),
        sqlite_where=sa.text(_KEYED),
    )


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="runs")
    if dialect_of(op.get_bind()).sqlite and sqlite3.sqlite_version_info < (3, 35, 0):
        raise RuntimeError(
            f"downgrading revision 0010 needs SQLite 3.35 or later (ALTER TABLE DROP COLUMN); "
            f"this is {sqlite3.sqlite_version}, and rebuilding `runs` would cascade into "
            "`run_steps`"
        )
    for column in _COLUMNS:
        op.drop_column("runs", column)  # ALTER TABLE ... DROP COLUMN, in place
