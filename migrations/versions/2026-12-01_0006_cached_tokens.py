"""Prompt caching: cached input tokens booked apart, and each thread's last prompt digest.

`ledger.cached_tokens` is the part of a call's prompt tokens the provider served from its cache
(0 for rows written before, when no provider figure was kept). `threads.last_prompt` is the
digest of the thread's last chat prompt, written with each answer; NULL until the next one;
`threads.last_reported_tokens` the provider's count of that call (NULL when estimated).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.add_column(
            sa.Column("cached_tokens", sa.BigInteger(), server_default="0", nullable=False)
        )
    with op.batch_alter_table("threads") as batch_op:
        batch_op.add_column(sa.Column("last_prompt", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("last_reported_tokens", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("threads") as batch_op:
        batch_op.drop_column("last_reported_tokens")
        batch_op.drop_column("last_prompt")
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.drop_column("cached_tokens")
