"""Usage as BIGINT: the ledger's token counts hold any figure a call may report, and their sums.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 01:05:00

A provider reporting 3,000,000,000 prompt tokens overflowed the INTEGER columns and failed the
run as a database outage; such a figure is now refused as a bad provider response before it is
booked, and the columns no longer set the limit.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("prompt_tokens", "completion_tokens")


def upgrade() -> None:
    with op.batch_alter_table("ledger", schema=None) as batch_op:
        for name in _COLUMNS:
            batch_op.alter_column(
                name, existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=False
            )


def downgrade() -> None:
    with op.batch_alter_table("ledger", schema=None) as batch_op:
        for name in _COLUMNS:
            batch_op.alter_column(
                name, existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=False
            )
