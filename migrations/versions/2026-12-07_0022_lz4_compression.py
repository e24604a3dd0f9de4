"""PostgreSQL compresses the large text columns with lz4 instead of pglz (issue 37).

Every turn writes a few tens of KB of text that PostgreSQL compresses in-line (TOAST compresses
any value over about 2 KB): the journal's `load:thread` step (the kept window, about 43 KB in
the benchmark's turn), the model steps, an 8 KB tool result in its message. With the default
method, pglz, that compression was about a fifth of the turn's own SQL time: the benchmark
turn's statements replayed raw (`bench/turnsql.py`) took 3.18-3.39 ms with pglz and 2.60 ms
with lz4 on the same database (measured on this machine, 2026-12-07). lz4 is PostgreSQL's
other built-in method (since 14, when the server is built with it, as Debian's, the official
images and the managed services are).

- Per column (`ALTER TABLE ... ALTER COLUMN ... SET COMPRESSION lz4`): it binds every writer of
  the database, whatever its session settings, and the coordinator of a Citus cluster takes it
  to every shard. A metadata change: nothing is rewritten, the upgrade takes a moment however
  large the tables; values already stored keep pglz and are read as before (a column may hold
  both), new ones use lz4.
- Where the server has no lz4 (before 14, or built without it) the upgrade changes nothing and
  says so in the log; everything works as before. Before 14 (no `SET COMPRESSION` at all) the
  downgrade changes nothing either.
- SQLite compresses nothing: no change there.
- The downgrade sets the columns back to the server's default method; values written with lz4
  stay readable (the method is stored with each value).

Revision ID: 0022_lz4_compression
Revises: 0021_search_thread_key
Create Date: 2026-12-07 12:50:00
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bounded_agents.store.dialect import dialect_of

revision: str = "0022_lz4_compression"
down_revision: str | None = "0021_search_thread_key"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")

COLUMNS = (
    ("messages", "content"),
    ("messages", "tool_calls"),
    ("messages", "tool_results"),
    ("messages", "attachments"),
    ("messages", "search_text"),
    ("runs", "request"),
    ("runs", "report"),
    ("run_steps", "payload"),
    ("summary_archive", "content"),
    ("thread_summaries", "text"),
)
"""The text columns a turn writes large values to (a thread's `last_prompt` and `fold_health`
are a few bytes: left alone)."""

_METHODS = sa.text(
    "SELECT coalesce(array_agg(v), '{}') FROM pg_settings, unnest(enumvals) AS v "
    "WHERE name = 'default_toast_compression'"
)
"""The compression methods the server offers: none before PostgreSQL 14, which has no
`SET COMPRESSION` at all (the downgrade skips it there too; found by review)."""


def _set(method: str) -> None:
    bind = op.get_bind()
    if not dialect_of(bind).postgres:
        return
    methods = bind.execute(_METHODS).scalar_one()
    if not methods:
        return  # before PostgreSQL 14: every column is pglz, and stays so
    if method == "lz4" and "lz4" not in methods:
        log.warning("this PostgreSQL has no lz4 compression: its columns keep pglz")
        return
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION {method}")


def upgrade() -> None:
    _set("lz4")


def downgrade() -> None:
    _set("default")
