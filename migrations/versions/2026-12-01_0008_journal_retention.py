"""Journal retention: a completed run's steps are deleted once they are old enough.

`runs.steps_pruned_at` says when the run's journal was deleted (NULL while it is kept). The
partial index holds only completed runs whose journal is still there, so the pruner finds the
next batch without walking every run it pruned before.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PRUNABLE = "status = 'completed' AND steps_pruned_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("steps_pruned_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_runs_prunable",
        "runs",
        ["updated_at"],
        postgresql_where=sa.text(_PRUNABLE),
        sqlite_where=sa.text(_PRUNABLE),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_prunable", table_name="runs")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("steps_pruned_at")
