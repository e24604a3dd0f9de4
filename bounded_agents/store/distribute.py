"""Distribute a migrated PostgreSQL database with Citus: `python -m app distribute`.

A thread and everything in it (messages, runs, journal steps, summaries) share one colocation
group, keyed by the thread id, so a turn is answered by one worker; an actor's token ledger and
running total share another, keyed by the actor (docs/scale-out.md says why two); the one
global table, the learned token ratios, is a reference table (a copy on every node). The plan
names each table, its distribution column and its group, nothing else: Citus distributes the
table as the migrations left it, so a migration that adds a column (or an index holding the
distribution column) needs no change here; one that adds a table must add it to `PLAN`
(tests/store/test_distribute.py fails until it does).

Idempotent: a table Citus already distributes is left as it is, so the command can be run
again after a failure halfway, or on every deploy. It holds the migrations' advisory lock
while it works, so a `migrate` started meanwhile waits for it. Later migrations run on the
coordinator as before: Citus propagates `ALTER TABLE` and `CREATE INDEX` to the shards.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.errors import ConfigError
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.migrate import MIGRATION_LOCK_KEY


@dataclass(frozen=True)
class Distribution:
    table: str
    column: str
    colocate_with: str
    """'none' starts a colocation group (with the shard count asked for); a table name joins
    that table's group, which must be distributed first; `REFERENCE` makes it a reference
    table (no distribution column: `column` is empty)."""


REFERENCE = "reference"


PLAN: tuple[Distribution, ...] = (
    Distribution("threads", "id", "none"),
    Distribution("messages", "thread_id", "threads"),
    Distribution("runs", "thread_id", "threads"),
    Distribution("run_steps", "thread_id", "threads"),
    Distribution("thread_summaries", "thread_id", "threads"),
    Distribution("summary_archive", "thread_id", "threads"),
    Distribution("erased_threads", "id", "threads"),
    Distribution("actor_usage", "actor_id", "none"),
    Distribution("ledger", "actor_id", "actor_usage"),
    Distribution("token_ratios", "", REFERENCE),
)
"""Parents before the tables whose foreign keys point at them, and each group's first table
before the tables that join it. `alembic_version` stays a plain table on the coordinator."""


def threads_distributed(bind: sa.Connection) -> bool:
    """Whether this PostgreSQL database has Citus and its `threads` table is distributed: a
    migration that adds a table to a database distributed before it places the table as
    `PLAN` does (the migrations run on the coordinator, over a synchronous connection)."""
    if bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first() is None:
        return False
    row = bind.execute(
        sa.text("SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'threads'::regclass")
    ).first()
    return row is not None


@dataclass(frozen=True)
class Outcome:
    table: str
    column: str
    shards: int
    colocation_id: int
    done_now: bool
    """False: it was distributed already (the command changed nothing for it)."""

    def line(self) -> str:
        if not self.column:
            how = "made" if self.done_now else "already"
            return f"{self.table}: {how} a reference table (a copy on every node)"
        how = "distributed" if self.done_now else "already distributed"
        return (
            f"{self.table}: {how} by {self.column} "
            f"({self.shards} shards, colocation group {self.colocation_id})"
        )


_CITUS = sa.text("SELECT extversion FROM pg_extension WHERE extname = 'citus'")
_EXISTING = sa.text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
)
_DISTRIBUTED = sa.text(
    "SELECT table_name::text AS name, distribution_column AS column_name, "
    "colocation_id, shard_count FROM citus_tables "
    "WHERE citus_table_type IN ('distributed', 'reference')"
)


async def distribute(engine: AsyncEngine, *, shard_count: int | None = None) -> list[Outcome]:
    """Distribute every table of `PLAN` that is not distributed yet; what each table is now.

    `shard_count`: shards of each new colocation group (Citus's `citus.shard_count`, 32 by
    default, when None). It does not change a group that exists already."""
    database = dialect_of(engine)
    if not database.postgres:
        raise ConfigError(
            f"distribute needs PostgreSQL with the Citus extension; this is {database.name}"
        )
    if shard_count is not None and shard_count < 1:
        raise ConfigError("the shard count must be at least 1")
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await _check_ready(conn)
        await conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        # The search index's triggers (migration 0012) only set the row's own tsvector column,
        # which Citus runs on each shard safely; it refuses any trigger without this.
        await conn.execute(sa.text("SET citus.enable_unsafe_triggers TO on"))
        try:
            return await _distribute(conn, shard_count)
        finally:
            await conn.execute(
                sa.text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )


async def _check_ready(conn: AsyncConnection) -> None:
    if (await conn.execute(_CITUS)).scalar() is None:
        available = (
            await conn.execute(
                sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'citus'")
            )
        ).scalar()
        if available is None:
            raise ConfigError(
                "the Citus extension is not installed on this PostgreSQL server: install it "
                "and add it to shared_preload_libraries on every node (docs/scale-out.md)"
            )
        raise ConfigError(
            "the citus extension is not created in this database: run CREATE EXTENSION citus "
            "on the coordinator and on every worker, then add the workers with "
            "citus_add_node (docs/scale-out.md)"
        )
    existing = set((await conn.execute(_EXISTING)).scalars())
    if "threads" not in existing:
        missing = [d.table for d in PLAN if d.table not in existing]
        raise ConfigError(
            f"tables {missing} do not exist: run `python -m app migrate` first, then distribute"
        )


async def _present(conn: AsyncConnection) -> tuple[Distribution, ...]:
    """The plan's tables this database has: one migrated to an older revision lacks the later
    tables, which the migration that creates them distributes (0012: `summary_archive`)."""
    existing = set((await conn.execute(_EXISTING)).scalars())
    return tuple(plan for plan in PLAN if plan.table in existing)


async def _distribute(conn: AsyncConnection, shard_count: int | None) -> list[Outcome]:
    before = await _distributed(conn)
    present = await _present(conn)
    for plan in present:
        if plan.table in before:
            continue
        params: dict[str, object] = {"table": plan.table}
        sql = "SELECT create_reference_table(:table"
        if plan.colocate_with != REFERENCE:
            params.update(column=plan.column, colocate=plan.colocate_with)
            sql = "SELECT create_distributed_table(:table, :column, colocate_with => :colocate"
        if plan.colocate_with == "none" and shard_count is not None:
            sql += ", shard_count => :shards"
            params["shards"] = shard_count
        try:
            await conn.execute(sa.text(sql + ")"), params)
        except sa_exc.DBAPIError as exc:
            # Most often a key that does not hold the distribution column, which Citus
            # requires of every primary key, unique index and foreign key.
            detail = (str(exc.orig).strip().splitlines() or [""])[0]
            raise ConfigError(f"Citus refused to distribute {plan.table}: {detail}") from exc
    for plan in present:
        if plan.table not in before:
            # Rows that were there before (a database that ran on one server) were copied into
            # the shards; their local copies, which Citus no longer reads, are dropped.
            await conn.execute(
                sa.text("SELECT truncate_local_data_after_distributing_table(:table)"),
                {"table": plan.table},
            )
    after = await _distributed(conn)
    outcomes = []
    for plan in present:
        column, colocation_id, shards = after[plan.table]
        if plan.colocate_with == REFERENCE:
            if column:  # distributed by hand: a reference table was expected
                raise ConfigError(
                    f"{plan.table} is distributed by {column}; this app needs it as a reference "
                    "table (undistribute_table it, then run distribute again)"
                )
            made = plan.table not in before
            outcomes.append(Outcome(plan.table, "", shards, colocation_id, made))
            continue
        group = after[plan.colocate_with][1] if plan.colocate_with != "none" else colocation_id
        if column != plan.column or colocation_id != group:
            # Distributed by hand some other way: a turn's statements would cross shards.
            raise ConfigError(
                f"{plan.table} is distributed by {column} in colocation group {colocation_id}; "
                f"this app needs it by {plan.column}"
                + (f", colocated with {plan.colocate_with}" if plan.colocate_with != "none" else "")
                + " (undistribute_table it, then run distribute again)"
            )
        outcomes.append(
            Outcome(plan.table, column, shards, colocation_id, plan.table not in before)
        )
    return outcomes


async def _distributed(conn: AsyncConnection) -> dict[str, tuple[str, int, int]]:
    """Distributed and reference tables: name -> (distribution column, empty for a reference
    table; colocation group; shard count)."""
    return {
        row.name: (
            "" if row.column_name == "<none>" else row.column_name,
            row.colocation_id,
            row.shard_count,
        )
        for row in await conn.execute(_DISTRIBUTED)
    }
