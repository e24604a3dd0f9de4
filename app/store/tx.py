"""One transaction shared by the journal, the store and the ledger: a unit of work.

A checkpoint and the writes it stands for (the user's message and `load:thread`; a model step
and its ledger row; the answer, its journal row and the run's end) commit together or not at
all, in one round of BEGIN ... COMMIT instead of one per write. The journal opens the
transaction (its first statement is the run's lease check) and commits it; the store and the
ledger write into it when they are handed it, and open their own when they are not.

The handle is opaque to the core (`app.core.ports.Transaction`); a write joins it only when it
was opened on the writer's own engine, so a store on another database still commits on its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.store.errors import wrap_db_errors


class SqlTransaction:
    """An open transaction on `engine`, through `connection`. Its opener commits it."""

    __slots__ = ("connection", "engine")

    def __init__(self, engine: AsyncEngine, connection: AsyncConnection) -> None:
        self.engine = engine
        self.connection = connection


def joined(engine: AsyncEngine, tx: object | None) -> AsyncConnection | None:
    """The shared transaction's connection when `tx` is one on `engine`, else None."""
    if isinstance(tx, SqlTransaction) and tx.engine is engine:
        return tx.connection
    return None


@asynccontextmanager
async def writing(
    engine: AsyncEngine, tx: object | None, operation: str
) -> AsyncIterator[AsyncConnection]:
    """The connection to write on: the shared transaction's (committed by its opener), or a
    transaction of the block's own, committed when the block ends."""
    shared = joined(engine, tx)
    async with wrap_db_errors(operation):
        if shared is not None:
            yield shared
            return
        async with engine.begin() as conn:
            yield conn


@asynccontextmanager
async def reading(
    reader: AsyncEngine, engine: AsyncEngine, tx: object | None, operation: str
) -> AsyncIterator[AsyncConnection]:
    """The connection to read on: the shared transaction's (it sees that transaction's own
    uncommitted writes, which the turn read must), or a pooled one of `reader`."""
    shared = joined(engine, tx)
    async with wrap_db_errors(operation):
        if shared is not None:
            yield shared
            return
        async with reader.connect() as conn:
            yield conn
