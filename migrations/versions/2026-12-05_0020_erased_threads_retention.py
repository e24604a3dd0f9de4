"""An index on `erased_threads (erased_at)` for the sweep that ends its rows' retention.

`erased_threads` keeps the id and owner of a thread erased whole, so that a keyed `/v1` retry
after the conversation's deletion is answered 410 instead of running again (0019). The owner's
id is personal data kept after an erasure, so the row is kept only
AGENT_ERASED_THREAD_RETENTION_SECONDS (`bounded_agents.store.erase.prune_erased`, called by each
process's sweep): the sweep reads the oldest rows past it, which this index finds without
scanning the table. A plain `CREATE INDEX` in the upgrade's transaction, as 0018 explains; the
table is small (one row per thread erased whole).

Revision ID: 0020_erased_threads_retention
Revises: 0019_erased_threads
Create Date: 2026-12-05 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020_erased_threads_retention"
down_revision: str | None = "0019_erased_threads"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_erased_threads_erased_at"


def upgrade() -> None:
    op.create_index(INDEX, "erased_threads", ["erased_at"], if_not_exists=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="erased_threads")
