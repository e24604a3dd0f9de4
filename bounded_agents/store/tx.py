"""One transaction shared by the journal, the store and the ledger: a unit of work.

A checkpoint and the writes it stands for (the user's message and `load:thread`; a model step
and its ledger row; the answer, its journal row and the run's end) commit together or not at
all, in one round of BEGIN ... COMMIT instead of one per write. The journal opens the
transaction (its first statement is the run's lease check) and commits it; the store and the
ledger write into it when they are handed it, and open their own when they are not.

The handle is opaque to the core (`bounded_agents.core.ports.Transaction`); a write joins it only
when it was opened on the writer's own engine, so a store on another database still commits on its
own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.errors import StoreError
from bounded_agents.store.engine import (
    acquire_writer,
    is_dead_connection,
    retrying_first_statement,
    write_transaction,
)
from bounded_agents.store.errors import cause_of, wrap_db_errors


class SqlTransaction:
    """An open transaction on `engine`, through `connection`. Its opener commits it (`close`).

    On SQLite it holds this process's writer turn (`bounded_agents.store.engine.write_transaction`)
    from open to close, so no other writer of the process waits for the file's lock in a thread.
    """

    __slots__ = ("_writer", "after_commit", "closed", "connection", "engine")

    def __init__(
        self, engine: AsyncEngine, connection: AsyncConnection, writer: asyncio.Lock | None
    ) -> None:
        self.engine = engine
        self.connection = connection
        self._writer = writer
        self.after_commit: list[Callable[[], None]] = []
        """What a participant does once its writes are durable (the journal lets go of a run
        whose end committed)."""
        self.closed = False

    async def close(self, *, commit: bool) -> None:
        """Commit (or roll back) and give the connection and the writer turn back. Once only:
        closing a closed transaction does nothing (a first unit may be let go of twice)."""
        if self.closed:
            return
        self.closed = True
        try:
            async with wrap_db_errors("commit" if commit else "rollback"):
                if commit:
                    await _commit(self.connection)
                else:
                    await self.connection.rollback()
        finally:
            try:
                await self.connection.close()
            finally:
                if self._writer is not None:
                    self._writer.release()
        if commit:
            for hook in self.after_commit:
                hook()


async def _commit(connection: AsyncConnection) -> None:
    """COMMIT, a refusal by a deferred constraint included as a `StoreError`: an integrity error
    is passed on raw elsewhere because its caller tells a duplicate by it, but nothing can take
    a COMMIT's for one (the whole unit is gone, not one row)."""
    try:
        await connection.commit()
    except sa_exc.IntegrityError as exc:
        raise StoreError(f"commit: the database refused the transaction ({cause_of(exc)})") from exc


async def open_write(
    engine: AsyncEngine,
    operation: str,
    first: Callable[[AsyncConnection], Awaitable[object]] | None = None,
) -> SqlTransaction:
    """A write transaction of the caller's to share: writer turn first, then a connection.

    `first`, the transaction's first statement(s), is run here: when it fails because the
    pooled connection was dead, the whole opening is tried once more on a fresh connection
    (nothing was written), so the checkout needs no ping round trip of its own."""
    for attempt in range(2):
        retry = first is not None and attempt == 0
        writer = await acquire_writer(engine)
        try:
            async with wrap_db_errors(operation):
                with retrying_first_statement() if retry else contextlib.nullcontext():
                    connection = await engine.connect()
                try:
                    await connection.begin()
                    if first is not None:
                        await first(connection)
                except BaseException:
                    await connection.close()
                    raise
        except BaseException as error:
            if writer is not None:
                writer.release()
            if retry and is_dead_connection(error):
                continue
            raise
        return SqlTransaction(engine, connection, writer)
    raise AssertionError("unreachable")  # pragma: no cover


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
        async with write_transaction(engine) as conn:
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
