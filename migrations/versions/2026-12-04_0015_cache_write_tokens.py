"""Prompt-cache writes booked apart: `ledger.cache_write_tokens`.

Anthropic bills the tokens a call writes to its prompt cache above the plain input price
(1.25x for 5 minutes, 2x for an hour) and reports them as `cache_creation_input_tokens`; like
`cached_tokens` (0006) they are part of `prompt_tokens`, kept apart so a cost figure can price
them. Rows written before hold 0 (no provider figure was kept).

Revision ID: 0015_cache_writes
Revises: 0011_search
Create Date: 2026-12-04 18:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_cache_writes"
down_revision: str | None = "0013_fold_health"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.add_column(
            sa.Column("cache_write_tokens", sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.drop_column("cache_write_tokens")
