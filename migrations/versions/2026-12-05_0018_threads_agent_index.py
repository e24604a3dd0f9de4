"""An index on `threads (agent, searchable)` for start-up's `index_agents` (issue 37).

Every start-up runs two statements that pick threads by agent (`bounded_agents.store.search_index`):
`_TURN_OFF` (`UPDATE threads SET searchable = false WHERE agent IN (...) AND searchable`) and
`_THREADS_OFF` (`SELECT id, last_seq FROM threads WHERE agent IN (...) AND NOT searchable`).
`threads` had no index on `agent` (only `(actor_id, updated_at)`), so each scanned the whole
table; with this one both read only their agents' threads, and only the rows whose flag they
change or look for.

A plain `CREATE INDEX`, not `CONCURRENTLY`: the app runs every migration of an upgrade in one
transaction it opens itself (`bounded_agents.store.migrate.migration_connection`), under the
transaction-scoped advisory lock that queues processes started together (`migrations/env.py`).
`CREATE INDEX CONCURRENTLY` cannot run in a transaction, and Alembic's `autocommit_block` fails
on a transaction it did not begin (its assertion on `_transaction`); committing there would also
release the lock and split the upgrade's transaction. The build holds a SHARE lock on `threads`
(reads go on, appends wait) for as long as it takes: one small B-tree entry per thread, seconds
for millions of threads. An operator with a table too large for that can build it beforehand,
`CREATE INDEX CONCURRENTLY ix_threads_agent_searchable ON threads (agent, searchable)`: the
upgrade then finds it (`IF NOT EXISTS`) and builds nothing. On a database Citus distributed,
the coordinator takes `CREATE INDEX` (and `CONCURRENTLY`) to every shard; nothing in
`bounded_agents.store.distribute` names indexes.

Revision ID: 0018_threads_agent_index
Revises: 0017_token_ratios
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018_threads_agent_index"
down_revision: str | None = "0017_token_ratios"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_threads_agent_searchable"


def upgrade() -> None:
    op.create_index(INDEX, "threads", ["agent", "searchable"], if_not_exists=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="threads")
