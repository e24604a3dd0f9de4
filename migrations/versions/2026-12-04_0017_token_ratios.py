"""Learned token ratios kept across restarts: `token_ratios`.

Issue 39: the ratio of a model's reported prompt tokens to the chars/4 estimate sizes its
windows, fold chunks and quota holds (`bounded_agents.core.calibration`). It was learned per
process, so every restart sized the first folds and windows by the plain estimate again. One
row per model name; on a database Citus distributed before this revision the table becomes a
reference table, as `python -m app distribute` would make it.

Revision ID: 0017_token_ratios
Revises: 0016_search_opt_in
Create Date: 2026-12-04 23:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.distribute import threads_distributed

revision: str = "0017_token_ratios"
down_revision: str | None = "0016_search_opt_in"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "token_ratios",
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.current_timestamp(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("model", name="pk_token_ratios"),
    )
    bind = op.get_bind()
    if dialect_of(bind).postgres and threads_distributed(bind):
        op.execute("SELECT create_reference_table('token_ratios')")


def downgrade() -> None:
    op.drop_table("token_ratios")
