"""Failed runs' journals expire too: a second partial index for the pruner's other queue.

A failed run keeps its journal so it can be resumed; one nobody resumes would keep it forever.
The pruner takes failed runs older than their own (longer) retention from this index, as it
takes completed runs from `ix_runs_prunable`.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 06:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PRUNABLE_FAILED = "status = 'failed' AND steps_pruned_at IS NULL"


def upgrade() -> None:
    op.create_index(
        "ix_runs_prunable_failed",
        "runs",
        ["updated_at"],
        postgresql_where=sa.text(_PRUNABLE_FAILED),
        sqlite_where=sa.text(_PRUNABLE_FAILED),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_prunable_failed", table_name="runs")
