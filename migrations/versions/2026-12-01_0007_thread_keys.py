"""Thread keys: every key of a thread's tables holds `thread_id`, every key of the usage tables
`actor_id`, so Citus can distribute them by those columns (docs/scale-out.md).

- messages: keyed by (thread_id, seq), which was already unique; the surrogate `id` nothing read
  is dropped.
- runs: keyed by (thread_id, id), with a plain index on `id` for the lookups by run id alone.
- run_steps: gains `thread_id`, copied from its run, and is keyed by (thread_id, run_id,
  position), its foreign key to runs by (thread_id, run_id).
- ledger: keyed by (actor_id, id). `id` is no longer an autoincrement (SQLite autoincrements only
  a lone INTEGER PRIMARY KEY) but the row's number among its actor's rows, counted by
  `actor_usage.last_ledger_id`; existing ids are kept, each actor's counter starts at its
  highest.

Every row is kept. On SQLite a changed key means a table is rebuilt (batch mode). Written when
migrations ran with foreign keys on, where rebuilding `runs` would drop it, cascading to its
steps: run_steps loses its foreign key before runs is rebuilt and gets the new one after. They
run with foreign keys off now (`bounded_agents.store.migrate`), which is what kept the rows of 0005.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bounded_agents.store.dialect import dialect_of

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _postgres() -> bool:
    return dialect_of(op.get_bind()).postgres


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch_op:
        batch_op.drop_constraint("pk_messages", type_="primary")
        batch_op.drop_column("id")
        batch_op.drop_constraint("uq_messages_thread_id_seq", type_="unique")
        batch_op.create_primary_key("pk_messages", ["thread_id", "seq"])

    op.add_column("run_steps", sa.Column("thread_id", sa.String(length=36), nullable=True))
    op.execute(
        "UPDATE run_steps SET thread_id = "
        "(SELECT runs.thread_id FROM runs WHERE runs.id = run_steps.run_id)"
    )
    with op.batch_alter_table("run_steps") as batch_op:
        batch_op.drop_constraint("fk_run_steps_run_id_runs", type_="foreignkey")
        batch_op.drop_constraint("pk_run_steps", type_="primary")
        batch_op.alter_column("thread_id", existing_type=sa.String(length=36), nullable=False)
        batch_op.create_primary_key("pk_run_steps", ["thread_id", "run_id", "position"])

    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_constraint("pk_runs", type_="primary")
        batch_op.create_primary_key("pk_runs", ["thread_id", "id"])
        batch_op.create_index("ix_runs_id", ["id"])

    with op.batch_alter_table("run_steps") as batch_op:
        batch_op.create_foreign_key(
            "fk_run_steps_thread_id_runs",
            "runs",
            ["thread_id", "run_id"],
            ["thread_id", "id"],
            ondelete="CASCADE",
        )

    with op.batch_alter_table("actor_usage") as batch_op:
        batch_op.add_column(
            sa.Column("last_ledger_id", sa.BigInteger(), server_default="0", nullable=False)
        )
    op.execute(
        "UPDATE actor_usage SET last_ledger_id = (SELECT COALESCE(MAX(ledger.id), 0) "
        "FROM ledger WHERE ledger.actor_id = actor_usage.actor_id)"
    )
    # Every actor with ledger rows has a usage row (0003 made them, each booking bumps one);
    # should one be missing, it is made here, so its next row cannot reuse an id.
    op.execute(
        "INSERT INTO actor_usage (actor_id, tokens, last_ledger_id) "
        "SELECT actor_id, SUM(prompt_tokens + completion_tokens), MAX(id) FROM ledger "
        "WHERE actor_id NOT IN (SELECT actor_id FROM actor_usage) GROUP BY actor_id"
    )
    if _postgres():
        op.execute("ALTER TABLE ledger ALTER COLUMN id DROP DEFAULT")
        op.execute("DROP SEQUENCE IF EXISTS ledger_id_seq")
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.drop_constraint("pk_ledger", type_="primary")
        batch_op.drop_index("ix_ledger_actor_id")
        if not _postgres():
            batch_op.alter_column(
                "id", existing_type=sa.Integer(), type_=sa.BigInteger(), autoincrement=False
            )
        batch_op.create_primary_key("pk_ledger", ["actor_id", "id"])


def downgrade() -> None:
    # Ledger ids are numbered per actor now: renumber them across actors, oldest first, so
    # the single-column key of 0006 holds.
    with op.batch_alter_table("ledger") as batch_op:
        batch_op.drop_constraint("pk_ledger", type_="primary")
    op.execute(
        "UPDATE ledger SET id = numbered.n FROM (SELECT actor_id, id, ROW_NUMBER() OVER "
        "(ORDER BY created_at, actor_id, id) AS n FROM ledger) AS numbered "
        "WHERE ledger.actor_id = numbered.actor_id AND ledger.id = numbered.id"
    )
    with op.batch_alter_table("ledger") as batch_op:
        if not _postgres():
            batch_op.alter_column("id", existing_type=sa.BigInteger(), type_=sa.Integer())
        batch_op.create_primary_key("pk_ledger", ["id"])
        batch_op.create_index("ix_ledger_actor_id", ["actor_id"])
    if _postgres():
        op.execute("CREATE SEQUENCE ledger_id_seq OWNED BY ledger.id")
        op.execute(
            "SELECT setval('ledger_id_seq', COALESCE((SELECT MAX(id) FROM ledger), 0) + 1, false)"
        )
        op.execute("ALTER TABLE ledger ALTER COLUMN id SET DEFAULT nextval('ledger_id_seq')")
    with op.batch_alter_table("actor_usage") as batch_op:
        batch_op.drop_column("last_ledger_id")

    with op.batch_alter_table("run_steps") as batch_op:
        batch_op.drop_constraint("fk_run_steps_thread_id_runs", type_="foreignkey")
        batch_op.drop_constraint("pk_run_steps", type_="primary")
        batch_op.create_primary_key("pk_run_steps", ["run_id", "position"])
        batch_op.drop_column("thread_id")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_index("ix_runs_id")
        batch_op.drop_constraint("pk_runs", type_="primary")
        batch_op.create_primary_key("pk_runs", ["id"])
    with op.batch_alter_table("run_steps") as batch_op:
        batch_op.create_foreign_key(
            "fk_run_steps_run_id_runs", "runs", ["run_id"], ["id"], ondelete="CASCADE"
        )

    with op.batch_alter_table("messages") as batch_op:
        batch_op.drop_constraint("pk_messages", type_="primary")
        batch_op.create_unique_constraint("uq_messages_thread_id_seq", ["thread_id", "seq"])
    # A fresh surrogate key (what 0006 had: nothing refers to its values).
    if _postgres():
        op.execute("ALTER TABLE messages ADD COLUMN id BIGSERIAL NOT NULL")
        op.execute("ALTER TABLE messages ADD CONSTRAINT pk_messages PRIMARY KEY (id)")
    else:
        with op.batch_alter_table("messages") as batch_op:
            batch_op.add_column(sa.Column("id", sa.Integer(), nullable=False))
            batch_op.create_primary_key("pk_messages", ["id"])
