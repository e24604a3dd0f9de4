"""Rolling summaries and token-bounded reads: thread_summaries, per-message token estimates,
and a flag on ledger rows booked by the estimate.

Existing messages get their estimate and running sum computed here, thread by thread, so a
token-budget read of an old thread selects exactly what the in-memory policy would.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 01:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000


def upgrade() -> None:
    op.create_table(
        "thread_summaries",
        sa.Column("thread_id", sa.String(length=36), nullable=False),
        sa.Column("covers_through_seq", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=True),
        sa.Column("model", sa.String(length=200), server_default="", nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_thread_summaries_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "thread_id", "covers_through_seq", name=op.f("pk_thread_summaries")
        ),
    )
    with op.batch_alter_table("threads") as batch_op:
        batch_op.add_column(
            sa.Column("total_tokens", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("answered", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.add_column(
            sa.Column("estimated", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("messages") as batch_op:
        batch_op.add_column(sa.Column("tokens", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(
            sa.Column("tokens_before", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.drop_index("ix_messages_thread_id_role")
        batch_op.create_index("ix_messages_thread_id_role_seq", ["thread_id", "role", "seq"])
        batch_op.create_index("ix_messages_thread_id_tokens_before", ["thread_id", "tokens_before"])
    _backfill_token_estimates(op.get_bind())
    op.execute(
        "UPDATE threads SET answered = EXISTS (SELECT 1 FROM messages "
        "WHERE messages.thread_id = threads.id AND messages.role = 'assistant')"
    )


def _backfill_token_estimates(conn: sa.Connection) -> None:
    """Estimate every stored message the way the store estimates new ones, in seq order, and
    keep each thread's running sum. Rows are read in keyset pages, so memory stays flat."""
    from bounded_agents.core.tokens import estimate_message_tokens
    from bounded_agents.store.codec import from_row

    columns = "seq, role, content, tool_calls, tool_results, attachments, run_id"
    thread_ids = [r[0] for r in conn.execute(sa.text("SELECT id FROM threads ORDER BY id"))]
    for tid in thread_ids:
        total, after = 0, 0
        while True:
            rows = conn.execute(
                sa.text(
                    f"SELECT {columns} FROM messages WHERE thread_id = :tid AND seq > :after "
                    "ORDER BY seq LIMIT :n"
                ),
                {"tid": tid, "after": after, "n": _BATCH},
            ).all()
            if not rows:
                break
            updates = []
            for row in rows:
                tokens = estimate_message_tokens(from_row(row))
                updates.append({"tid": tid, "seq": row[0], "tokens": tokens, "before": total})
                total += tokens
            conn.execute(
                sa.text(
                    "UPDATE messages SET tokens = :tokens, tokens_before = :before "
                    "WHERE thread_id = :tid AND seq = :seq"
                ),
                updates,
            )
            after = rows[-1][0]
        conn.execute(
            sa.text("UPDATE threads SET total_tokens = :total WHERE id = :tid"),
            {"total": total, "tid": tid},
        )


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch_op:
        batch_op.drop_index("ix_messages_thread_id_tokens_before")
        batch_op.drop_index("ix_messages_thread_id_role_seq")
        batch_op.create_index("ix_messages_thread_id_role", ["thread_id", "role"])
        batch_op.drop_column("tokens_before")
        batch_op.drop_column("tokens")
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.drop_column("estimated")
    with op.batch_alter_table("threads") as batch_op:
        batch_op.drop_column("answered")
        batch_op.drop_column("total_tokens")
    op.drop_table("thread_summaries")
