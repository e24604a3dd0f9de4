"""A unit whose COMMIT itself is refused by the database (a deferred constraint): the error is
one line, nothing of the unit is kept, and the connection it goes back to the pool on opens the
next unit as a real transaction.

The SQLite half of this was a bug (a failed COMMIT left its transaction open for the next unit,
fixed with issue 37's deferred writes); this asks the same of PostgreSQL, where a COMMIT that
fails ends the transaction on the server and the question is what asyncpg and SQLAlchemy's
adapter believe afterwards: a connection that still thought itself inside a transaction would
send the next unit's statements without a BEGIN, each committing on its own, and a rollback
would then keep them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from bounded_agents.errors import StoreError
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import ledger, messages, threads
from bounded_agents.store.tx import SqlTransaction, open_write
from tests.factories import ledger_entry

_REFUSED = "refused at commit"

_PG_REFUSE = [
    f"""CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.title = '{_REFUSED}' THEN RAISE EXCEPTION '{_REFUSED}'; END IF;
        RETURN NULL;
    END $$""",
    """CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER UPDATE ON threads
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()""",
]
_CITUS = "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"
_PG_DROP = [
    "DROP TRIGGER IF EXISTS refuse_at_commit ON threads",
    "DROP FUNCTION IF EXISTS refuse_at_commit()",
]


def _title(thread_id: str, title: str) -> Callable[[AsyncConnection], Awaitable[object]]:
    return lambda conn: conn.execute(
        threads.update().where(threads.c.id == thread_id).values(title=title)
    )


async def _refusing_unit(store: SqlAgentStore, thread_id: str) -> SqlTransaction:
    """A unit whose writes are each accepted when sent and whose COMMIT the database refuses:
    on PostgreSQL a deferred constraint trigger on the title; on SQLite a message of a thread
    that does not exist, with the foreign keys checked at the COMMIT."""
    sqlite = store.engine.dialect.name == "sqlite"
    tx = await open_write(
        store.engine, "test", _title(thread_id, "in a unit" if sqlite else _REFUSED)
    )
    await SqlLedger(store.engine).record(ledger_entry(thread_id), tx=tx)
    if sqlite:
        await tx.connection.execute(sa.text("PRAGMA defer_foreign_keys = ON"))
        await tx.connection.execute(
            messages.insert().values(thread_id="no-such-thread", seq=1, role="user", content="x")
        )
    return tx


async def _backend(conn: AsyncConnection) -> Any:
    """Which server connection (PostgreSQL) or which DBAPI connection (SQLite) this is."""
    if conn.dialect.name == "postgresql":
        return await conn.scalar(sa.text("SELECT pg_backend_pid()"))
    raw = await conn.get_raw_connection()
    return id(raw.driver_connection)


async def _pg_ddl(store: SqlAgentStore, statements: list[str]) -> None:
    async with store.engine.begin() as conn:
        if await conn.scalar(sa.text(_CITUS)):
            # Citus refuses a trigger on a distributed table (and dropping one) unless told the
            # trigger touches only its own shard's row, which this one does; its function is
            # made and dropped on every node, which Citus does over one connection per node.
            await conn.execute(sa.text("SET LOCAL citus.enable_unsafe_triggers TO on"))
            await conn.execute(sa.text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))
        for statement in statements:
            await conn.execute(sa.text(statement))


@pytest.fixture
async def refusing_store(sql_store: SqlAgentStore) -> Any:
    if sql_store.engine.dialect.name == "postgresql":
        await _pg_ddl(sql_store, _PG_REFUSE)
    try:
        yield sql_store
    finally:
        if sql_store.engine.dialect.name == "postgresql":
            await _pg_ddl(sql_store, _PG_DROP)


async def test_a_commit_the_database_refuses_is_one_line_and_keeps_nothing(
    refusing_store: SqlAgentStore,
) -> None:
    store = refusing_store
    thread = await store.create_thread(actor_id="alice", agent="helper")
    tx = await _refusing_unit(store, thread.id)
    failed_on = await _backend(tx.connection)
    with pytest.raises(StoreError) as caught:
        await tx.close(commit=True)
    assert "\n" not in str(caught.value), "one line"
    assert str(caught.value).startswith("commit"), str(caught.value)
    loaded = await store.get_thread(thread.id)
    assert loaded is not None and loaded.title is None, "the unit's first write is gone"
    async with store.engine.connect() as conn:
        assert (await conn.scalar(sa.select(sa.func.count()).select_from(ledger))) == 0

    # Every pooled connection, the one the refused COMMIT came back on included, opens its next
    # unit inside a transaction: a write then a rollback keeps nothing.
    seen: set[Any] = set()
    for _ in range(store.engine.pool.size() + 2):  # type: ignore[attr-defined]
        unit = await open_write(store.engine, "test", _title(thread.id, "rolled back"))
        seen.add(await _backend(unit.connection))
        await SqlLedger(store.engine).record(ledger_entry(thread.id), tx=unit)
        await unit.close(commit=False)
        if failed_on in seen:
            break
    assert failed_on in seen, "the refused unit's connection served a later unit"
    loaded = await store.get_thread(thread.id)
    assert loaded is not None and loaded.title is None, "a rollback keeps nothing"
    async with store.engine.connect() as conn:
        assert (await conn.scalar(sa.select(sa.func.count()).select_from(ledger))) == 0

    # And a unit committed on it keeps exactly its own writes.
    unit = await open_write(store.engine, "test", _title(thread.id, "kept"))
    await SqlLedger(store.engine).record(ledger_entry(thread.id), tx=unit)
    await unit.close(commit=True)
    loaded = await store.get_thread(thread.id)
    assert loaded is not None and loaded.title == "kept"
    async with store.engine.connect() as conn:
        assert (await conn.scalar(sa.select(sa.func.count()).select_from(ledger))) == 1
