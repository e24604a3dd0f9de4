"""The ids of threads erased whole: `erased_threads`.

A keyed `POST /v1/responses` without a conversation starts a thread named after the actor and
the Idempotency-Key, so its retry finds that thread and the key's run in it. After
`DELETE /v1/conversations/{id}` the retry found nothing, created the thread again with the
request in it, and called (and billed) the model a second time. `delete_thread` now keeps the
erased thread's id and owner here (nothing of its content), and the retry answers 410
`answer_erased`. On a database Citus distributed before this revision the table joins the
threads' colocation group by the thread id, as `python -m app distribute` would place it.

Revision ID: 0019_erased_threads
Revises: 0018_threads_agent_index
Create Date: 2026-12-05 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.distribute import threads_distributed

revision: str = "0019_erased_threads"
down_revision: str | None = "0018_threads_agent_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "erased_threads",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("actor_id", sa.String(200), nullable=False),
        sa.Column(
            "erased_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.current_timestamp(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name="pk_erased_threads"),
    )
    bind = op.get_bind()
    if dialect_of(bind).postgres and threads_distributed(bind):
        op.execute(
            "SELECT create_distributed_table('erased_threads', 'id', colocate_with => 'threads')"
        )


def downgrade() -> None:
    op.drop_table("erased_threads")
