"""The token ledger: one row per model call, so no spend goes unaccounted."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.core.ports import LedgerEntry, QuotaReserver, RatioBook, Transaction
from bounded_agents.errors import StoreError
from bounded_agents.store import direct, driver
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.engine import autocommit, on_citus, write_transaction
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.schema import actor_usage, ledger, token_ratios
from bounded_agents.store.tx import joined, writing

_FIELDS = (
    "run_id",
    "thread_id",
    "actor_id",
    "agent",
    "purpose",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "estimated",
    "cached_tokens",
    "cache_write_tokens",
)


_USED = sa.select(actor_usage.c.tokens).where(actor_usage.c.actor_id == sa.bindparam("actor"))


_BUMP_USAGE_SQL = (
    "INSERT INTO actor_usage (actor_id, tokens, last_ledger_id) VALUES (:actor_id, :tokens, 1) "
    "ON CONFLICT (actor_id) DO UPDATE SET tokens = actor_usage.tokens + excluded.tokens, "
    "last_ledger_id = actor_usage.last_ledger_id + 1 "
    "RETURNING last_ledger_id"
)
_TOKENS = sa.bindparam("tokens", type_=sa.BigInteger)
_ENTRY_BINDS = [sa.bindparam(f, type_=ledger.c[f].type) for f in _FIELDS]
"""Every bind typed: PostgreSQL cannot infer a type for a parameter in a SELECT list."""
_BUMP_USAGE = sa.text(_BUMP_USAGE_SQL).bindparams(
    _TOKENS, sa.bindparam("actor_id", type_=ledger.c.actor_id.type)
)
"""The actor's running total, created or bumped atomically, and the id of the ledger row that
books it (the actor's next: ledger rows are keyed by (actor_id, id), see
`bounded_agents.store.schema`). The row lock (PostgreSQL) or the write lock (SQLite) hands out each
id once. Written out because PostgreSQL and SQLite spell the upsert alike, and SQLAlchemy's dialect
`insert().on_conflict_do_update()` has no cache key: it was compiled afresh on every model
call."""
_ENTRY = f"INSERT INTO ledger (id, {', '.join(_FIELDS)}) SELECT last_ledger_id, " + ", ".join(
    f":{f}" for f in _FIELDS
)
_RECORD = sa.text(
    f"WITH usage_bumped AS ({_BUMP_USAGE_SQL}) INSERT INTO ledger (id, {', '.join(_FIELDS)}) "
    f"VALUES ((SELECT last_ledger_id FROM usage_bumped), {', '.join(f':{f}' for f in _FIELDS)})"
).bindparams(_TOKENS, *_ENTRY_BINDS)
"""PostgreSQL: the bump and the ledger row it numbers as one statement (a data-modifying CTE).
The number is a scalar subquery of the bump's row: were there none, the id would be NULL and
the key would refuse the row, so the statement holds its own check and nothing reads its
outcome. That lets it wait on the unit's connection and ride, as CTEs, in front of the unit's
next write (`bounded_agents.store.waiting.send_after_waiting`: one round trip less, issue
37). The CTE's name is its own so that it never clashes with the next write's (`bumped`)."""
_INSERT_NUMBERED = ledger.insert()
"""Citus: the ledger row, numbered by the bump sent before it (`_BUMP_USAGE`), so that each of
the two statements goes to the actor's shard (`bounded_agents.store.engine.on_citus`)."""
_INSERT_AFTER_BUMP = sa.text(f"{_ENTRY} FROM actor_usage WHERE actor_id = :actor_id").bindparams(
    *_ENTRY_BINDS
)
"""SQLite: the ledger row, numbered from the bumped total's row, sent in the bump's own
worker-thread call (SQLite has no data-modifying CTE). The bump is an upsert, so it always
has its row to number from."""


_RESERVE = sa.text(
    "INSERT INTO actor_usage (actor_id, tokens) VALUES (:actor_id, :tokens) "
    "ON CONFLICT (actor_id) DO UPDATE SET tokens = actor_usage.tokens + excluded.tokens "
    "WHERE actor_usage.tokens < :limit"
)
"""Check and bump in one statement: the row lock (PostgreSQL) or the write lock (SQLite) makes
concurrent reservations queue, so each sees the total the one before it left. No row yet means
nothing spent: the first reservation always goes in (every quota is at least 1)."""
_RELEASE = sa.text("UPDATE actor_usage SET tokens = tokens - :tokens WHERE actor_id = :actor_id")


def _no_usage_row() -> StoreError:
    """An upsert always returns its row; if not, the unit rolls back."""
    return StoreError("ledger_record: the usage upsert returned no row")


def _numbered(outcome: driver.Outcome) -> StoreError | None:
    return None if outcome.rows and outcome.rows[0][0] is not None else _no_usage_row()


class SqlLedger:
    """`Ledger`, `QuotaReserver` and `TransactionalLedger` on the `ledger` and `actor_usage`
    tables; `RatioBook` on `token_ratios`."""

    joins_transactions = True

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = autocommit(engine)

    async def record(self, entry: LedgerEntry, *, tx: Transaction | None = None) -> None:
        """The row and the actor's running total, in one transaction (with `tx`, in that one:
        the model step the row books commits with it)."""
        await self.record_reserved(entry, 0, tx=tx)

    async def record_reserved(
        self, entry: LedgerEntry, reserved: int, *, tx: Transaction | None = None
    ) -> None:
        tokens = entry.prompt_tokens + entry.completion_tokens - reserved
        params = {**entry.model_dump(), "tokens": tokens}
        shared = joined(self._engine, tx) is not None
        async with writing(self._engine, tx, "ledger_record") as conn:
            if on_citus(self._engine):
                bumped = (await direct.write(conn, _BUMP_USAGE, params, "ledger_record")).rows
                numbered = bumped[0][0] if bumped else None
                if numbered is None:
                    raise _no_usage_row()
                row = {**entry.model_dump(), "id": numbered}
                await direct.write(conn, _INSERT_NUMBERED, row, "ledger_record")
            elif dialect_of(self._engine).postgres:
                # Nothing here needs the row's number, nor checks it (`_RECORD`): in a unit of
                # the journal's it waits for the unit's next statement and rides with it.
                await direct.write_later(conn, _RECORD, params, "ledger_record", defer=shared)
            else:
                # On SQLite the two statements ride in the unit's next call to the worker
                # thread (deferred), the bump's row checked there.
                await direct.write_later(
                    conn,
                    _BUMP_USAGE,
                    params,
                    "ledger_record",
                    then=_INSERT_AFTER_BUMP,
                    check=_numbered,
                    defer=shared,
                )

    async def reserve(self, actor_id: str, tokens: int, limit: int) -> bool:
        async with wrap_db_errors("ledger_reserve"), write_transaction(self._engine) as conn:
            bumped = await conn.execute(
                _RESERVE, {"actor_id": actor_id, "tokens": tokens, "limit": limit}
            )
        return bool(bumped.rowcount)

    async def release(self, actor_id: str, tokens: int) -> None:
        async with wrap_db_errors("ledger_release"), write_transaction(self._engine) as conn:
            await conn.execute(_RELEASE, {"actor_id": actor_id, "tokens": tokens})

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

    async def load_ratios(self) -> dict[str, float]:
        """Every model's learned token ratio: one small table, read once at start-up."""
        async with wrap_db_errors("load_ratios"), self._reader.connect() as conn:
            rows = await conn.execute(sa.select(token_ratios.c.model, token_ratios.c.ratio))
            return {row.model: float(row.ratio) for row in rows}

    async def save_ratios(self, ratios: Mapping[str, float]) -> None:
        """Upsert each model's ratio, in one transaction of its own (never a turn's: it is
        written after the turn that learned it, and only when it moved)."""
        if not ratios:
            return
        insert = dialect_of(self._engine).insert
        # The time comes with the values: Citus refuses a function that is not IMMUTABLE
        # (`current_timestamp`) in the DO UPDATE SET of a reference table's upsert.
        now = datetime.now(UTC)
        rows = [{"model": m, "ratio": r, "updated_at": now} for m, r in sorted(ratios.items())]
        stmt = insert(token_ratios).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=[token_ratios.c.model],
            set_={"ratio": stmt.excluded.ratio, "updated_at": stmt.excluded.updated_at},
        )
        async with wrap_db_errors("save_ratios"), self._engine.begin() as conn:
            await conn.execute(stmt)


class MemoryLedger:
    """In-process ledger for tests and the MemoryStore."""

    def __init__(self) -> None:
        self.entries: list[LedgerEntry] = []
        self.reserved: dict[str, int] = {}
        """actor id -> tokens held for calls in flight."""
        self.ratios: dict[str, float] = {}
        """model name -> learned token ratio (`RatioBook`)."""

    async def record(self, entry: LedgerEntry) -> None:
        self.entries.append(entry)

    async def record_reserved(
        self, entry: LedgerEntry, reserved: int, *, tx: Transaction | None = None
    ) -> None:
        """`tx` is accepted as `QuotaReserver` says (the loop passes it to every ledger) and
        unused: nothing in memory is shared with a transaction."""
        del tx
        self.entries.append(entry)
        await self.release(entry.actor_id, reserved)

    async def reserve(self, actor_id: str, tokens: int, limit: int) -> bool:
        # `tokens_used` never suspends: the check and the bump are one step on the event loop.
        if await self.tokens_used(actor_id) >= limit:
            return False
        self.reserved[actor_id] = self.reserved.get(actor_id, 0) + tokens
        return True

    async def release(self, actor_id: str, tokens: int) -> None:
        self.reserved[actor_id] = self.reserved.get(actor_id, 0) - tokens

    async def tokens_used(self, actor_id: str) -> int:
        spent = sum(
            e.prompt_tokens + e.completion_tokens for e in self.entries if e.actor_id == actor_id
        )
        return spent + self.reserved.get(actor_id, 0)

    async def entries_for_run(self, run_id: str) -> list[LedgerEntry]:
        return [e for e in self.entries if e.run_id == run_id]

    async def load_ratios(self) -> dict[str, float]:
        return dict(self.ratios)

    async def save_ratios(self, ratios: Mapping[str, float]) -> None:
        self.ratios.update(ratios)


if TYPE_CHECKING:  # mypy holds both ledgers to the ports the loop calls them through
    _SQL_RESERVES: QuotaReserver = SqlLedger(cast(AsyncEngine, None))
    _MEMORY_RESERVES: QuotaReserver = MemoryLedger()
    _SQL_RATIOS: RatioBook = SqlLedger(cast(AsyncEngine, None))
    _MEMORY_RATIOS: RatioBook = MemoryLedger()
