"""Actor usage: a running token total per actor, so a quota check is one primary-key read.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 15:55:00

Existing ledger rows are summed into it once, so quotas keep counting what was already spent.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "actor_usage",
        sa.Column("actor_id", sa.String(length=200), nullable=False),
        sa.Column("tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("actor_id", name=op.f("pk_actor_usage")),
    )
    op.execute(
        "INSERT INTO actor_usage (actor_id, tokens) "
        "SELECT actor_id, SUM(prompt_tokens + completion_tokens) FROM ledger GROUP BY actor_id"
    )


def downgrade() -> None:
    op.drop_table("actor_usage")
