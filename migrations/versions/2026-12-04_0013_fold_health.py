"""Fold health: `threads.fold_health`, the last fold's outcome and the backoff after refused or
failed folds (`FoldHealth` as JSON), kept with the thread so a restart does not forget it.

Nullable and NULL for every existing thread: a thread whose folds never failed has none, and
the turn read and the fold treat NULL as healthy. No row is rewritten, on either database.

Revision ID: 0013_fold_health
Revises: 0011_search
Create Date: 2026-12-04 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_fold_health"
down_revision: str | None = "0012_search"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("threads", sa.Column("fold_health", sa.Text(), nullable=True))


def downgrade() -> None:
    # A plain ALTER TABLE ... DROP COLUMN on both (SQLite 3.35+): no batch copy of `threads`,
    # whose rebuild would cascade into every table that references it.
    op.drop_column("threads", "fold_health")
