"""The token ledger: one row per model call, so no spend goes unaccounted."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.ports import LedgerEntry
from app.store.engine import autocommit
from app.store.errors import wrap_db_errors
from app.store.schema import actor_usage, ledger

_FIELDS = (
    "run_id",
    "thread_id",
    "actor_id",
    "agent",
    "purpose",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
)


_INSERT = ledger.insert()
_USED = sa.select(actor_usage.c.tokens).where(actor_usage.c.actor_id == sa.bindparam("actor"))


_BUMP_USAGE = sa.text(
    "INSERT INTO actor_usage (actor_id, tokens) VALUES (:actor_id, :tokens) "
    "ON CONFLICT (actor_id) DO UPDATE SET tokens = actor_usage.tokens + excluded.tokens"
)
"""The actor's running total, created or bumped atomically. Written out because PostgreSQL and
SQLite spell the upsert alike, and SQLAlchemy's dialect `insert().on_conflict_do_update()` has
no cache key: it was compiled afresh on every model call."""


class SqlLedger:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = autocommit(engine)

    async def record(self, entry: LedgerEntry) -> None:
        """The row and the actor's running total, in one transaction."""
        tokens = entry.prompt_tokens + entry.completion_tokens
        async with wrap_db_errors("ledger_record"), self._engine.begin() as conn:
            await conn.execute(_INSERT, entry.model_dump())
            await conn.execute(_BUMP_USAGE, {"actor_id": entry.actor_id, "tokens": tokens})

    async def tokens_used(self, actor_id: str) -> int:
        """One primary-key read of the running total (not a sum over the actor's history)."""
        async with wrap_db_errors("ledger_tokens_used"), self._reader.connect() as conn:
            used = (await conn.execute(_USED, {"actor": actor_id})).scalar()
        return int(used or 0)

    async def entries_for_run(self, run_id: str) -> list[LedgerEntry]:
        cols = [ledger.c[f] for f in _FIELDS]
        async with wrap_db_errors("ledger_entries"), self._reader.connect() as conn:
            rows = await conn.execute(
                sa.select(*cols).where(ledger.c.run_id == run_id).order_by(ledger.c.id)
            )
            return [LedgerEntry(**dict(zip(_FIELDS, r, strict=True))) for r in rows]


class MemoryLedger:
    """In-process ledger for tests and the MemoryStore."""

    def __init__(self) -> None:
        self.entries: list[LedgerEntry] = []

    async def record(self, entry: LedgerEntry) -> None:
        self.entries.append(entry)

    async def tokens_used(self, actor_id: str) -> int:
        return sum(
            e.prompt_tokens + e.completion_tokens for e in self.entries if e.actor_id == actor_id
        )

    async def entries_for_run(self, run_id: str) -> list[LedgerEntry]:
        return [e for e in self.entries if e.run_id == run_id]
