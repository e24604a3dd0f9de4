"""SqlAgentStore: threads and messages on PostgreSQL (asyncpg) or SQLite (aiosqlite).

Every operation opens its own short transaction: a journal step or an appended message stays
committed whatever happens to the request that caused it, and no SSE stream holds a connection.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.messages import Message, unstorable_text
from app.core.ports import Thread, ThreadTurnPage, ThreadTurnQuery
from app.errors import DuplicateMessage, InvalidContent, StoreError, ThreadNotFound
from app.store import migrate
from app.store.codec import MESSAGE_COLUMNS, from_row, to_row
from app.store.engine import autocommit, make_engine
from app.store.errors import wrap_db_errors
from app.store.schema import messages, threads

_TID = sa.bindparam("tid", type_=sa.String)
_LIMIT = sa.bindparam("n", type_=sa.Integer)
_MSG_COLS = [messages.c[name] for name in MESSAGE_COLUMNS]
# Uncorrelated on purpose (the thread id is a parameter, not `threads.id`): PostgreSQL then
# runs it once as an InitPlan on the (thread_id, role) index, where the correlated form was
# run once per returned row, as a scan.
_ANSWERED = (
    sa.exists()
    .where(messages.c.thread_id == _TID, messages.c.role == "assistant")
    .label("answered")
)


def _turn_read(limited: bool) -> sa.Select[Any]:
    """The per-turn read, one statement and one round trip: title, the whole-thread answered
    flag, and the newest `n` messages (or all), oldest first.

    The page is a derived table (`ORDER BY seq DESC LIMIT n` on the unique (thread_id, seq)
    index) LEFT JOINed to the thread row, so an existing thread with an empty page still comes
    back as one row with NULL message columns. Portable: no LATERAL, which SQLite lacks.
    """
    page = sa.select(*_MSG_COLS).where(messages.c.thread_id == _TID).order_by(messages.c.seq.desc())
    if limited:
        page = page.limit(_LIMIT)
    sub = page.subquery("page")
    return (
        sa.select(threads.c.title, _ANSWERED, *[sub.c[name] for name in MESSAGE_COLUMNS])
        .select_from(threads.outerjoin(sub, sa.true()))
        .where(threads.c.id == _TID)
        .order_by(sub.c.seq)
    )


TURN_READ_LIMITED = _turn_read(limited=True)
"""The bounded per-turn read (parameters `tid`, `n`). Public so the benchmark's raw-driver floor
sends exactly the statement the store sends."""
_TURN_READ_ALL = _turn_read(limited=False)
_THREAD_BY_ID = sa.select(
    threads.c.id,
    threads.c.actor_id,
    threads.c.agent,
    threads.c.title,
    threads.c.created_at,
    threads.c.updated_at,
).where(threads.c.id == _TID)
_BUMP_SEQ = (
    threads.update()
    .where(threads.c.id == _TID)
    .values(last_seq=threads.c.last_seq + _LIMIT, updated_at=sa.func.current_timestamp())
    .returning(threads.c.last_seq)
)
_INSERT_MESSAGES = messages.insert()
_ALL_MESSAGES = sa.select(*_MSG_COLS).where(messages.c.thread_id == _TID).order_by(messages.c.seq)


class SqlAgentStore:
    """`AgentStore` and `ThreadTurnReader` over SQLAlchemy Core (no ORM identity map to pay for)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = autocommit(engine)

    @classmethod
    def from_url(cls, url: str, **engine_options: Any) -> SqlAgentStore:
        """Build a store and its engine; `engine_options` go to `make_engine` (pool sizes...)."""
        return cls(make_engine(url, **engine_options))

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def create_schema(self) -> None:
        """Bring the database to the newest Alembic revision (`alembic upgrade head`)."""
        async with wrap_db_errors("create_schema"):
            await migrate.upgrade(self._engine)

    async def dispose(self) -> None:
        await self._engine.dispose()

    # --- AgentStore ------------------------------------------------------------------------

    async def create_thread(self, *, actor_id: str, agent: str, title: str | None = None) -> Thread:
        if title is not None:
            reason = unstorable_text(Message(role="user", content=title))
            if reason is not None:
                raise InvalidContent(reason.replace("message text", "title"))
        thread_id = str(uuid.uuid4())
        async with wrap_db_errors("create_thread"), self._engine.begin() as conn:
            await conn.execute(
                threads.insert().values(id=thread_id, actor_id=actor_id, agent=agent, title=title)
            )
            row = (await conn.execute(_THREAD_BY_ID, {"tid": thread_id})).one()
        return _thread(row, [])

    async def get_thread(self, thread_id: str) -> Thread | None:
        async with wrap_db_errors("get_thread"), self._reader.connect() as conn:
            head = (await conn.execute(_THREAD_BY_ID, {"tid": thread_id})).one_or_none()
            if head is None:
                return None
            rows = (await conn.execute(_ALL_MESSAGES, {"tid": thread_id})).all()
        return _thread(head, [from_row(r) for r in rows])

    async def get_thread_info(self, thread_id: str) -> Thread | None:
        """The thread without its messages: what an ownership check needs."""
        async with wrap_db_errors("get_thread_info"), self._reader.connect() as conn:
            head = (await conn.execute(_THREAD_BY_ID, {"tid": thread_id})).one_or_none()
        return None if head is None else _thread(head, [])

    async def append_messages(self, thread_id: str, messages_: Sequence[Message]) -> list[Message]:
        """Append all of `messages_` or none of them, with contiguous `seq` numbers.

        The thread's `last_seq` counter is bumped first, with `UPDATE ... RETURNING`: that write
        takes the thread row's lock (PostgreSQL) or the database write lock (SQLite), so two
        concurrent appends are serialized and can never pick the same `seq`.
        """
        if not messages_:
            return []
        for m in messages_:
            reason = unstorable_text(m)
            if reason is not None:
                raise InvalidContent(reason)
        n = len(messages_)
        try:
            return await self._append(thread_id, messages_, n)
        except sa_exc.IntegrityError as exc:
            if "run_id" not in str(exc.orig):
                raise StoreError(f"append_messages: {type(exc.orig).__name__}") from exc
            dup = next((m for m in messages_ if m.run_id is not None), messages_[0])
            raise DuplicateMessage(dup.run_id or "", dup.role) from exc

    async def _append(self, thread_id: str, messages_: Sequence[Message], n: int) -> list[Message]:
        async with wrap_db_errors("append_messages"), self._engine.begin() as conn:
            last = (await conn.execute(_BUMP_SEQ, {"tid": thread_id, "n": n})).scalar_one_or_none()
            if last is None:
                raise ThreadNotFound(thread_id)
            first = last - n + 1
            await conn.execute(
                _INSERT_MESSAGES,
                [to_row(thread_id, first + i, m) for i, m in enumerate(messages_)],
            )
        return [m.model_copy(update={"seq": first + i}) for i, m in enumerate(messages_)]

    # --- ThreadTurnReader ------------------------------------------------------------------

    async def load_thread_for_turn(self, query: ThreadTurnQuery) -> ThreadTurnPage | None:
        """The newest `query.message_limit` messages (None: all), the title, and whether the
        thread was ever answered, in one round trip. None for an unknown thread."""
        limit = query.message_limit
        stmt = _TURN_READ_ALL if limit is None else TURN_READ_LIMITED
        params: dict[str, Any] = {"tid": query.thread_id}
        if limit is not None:
            params["n"] = limit
        async with wrap_db_errors("load_thread_for_turn"), self._reader.connect() as conn:
            rows = (await conn.execute(stmt, params)).all()
        if not rows:
            return None
        first = rows[0]
        page = [from_row(r, 2) for r in rows if r[2] is not None]
        return ThreadTurnPage(messages=page, title=first[0], has_assistant_message=bool(first[1]))

    # --- transcript paging (HTTP) ----------------------------------------------------------

    async def list_messages(
        self, thread_id: str, *, limit: int, before: int | None = None
    ) -> list[Message]:
        """Up to `limit` messages with `seq < before` (newest page when None), oldest first."""
        stmt = sa.select(*_MSG_COLS).where(messages.c.thread_id == thread_id)
        if before is not None:
            stmt = stmt.where(messages.c.seq < before)
        stmt = stmt.order_by(messages.c.seq.desc()).limit(limit)
        async with wrap_db_errors("list_messages"), self._reader.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [from_row(r) for r in reversed(rows)]

    async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
        """The messages `run_id` wrote, seq order: at most two rows, found by the unique
        (thread_id, run_id, role) index."""
        stmt = (
            sa.select(*_MSG_COLS)
            .where(messages.c.thread_id == thread_id, messages.c.run_id == run_id)
            .order_by(messages.c.seq)
        )
        async with wrap_db_errors("run_messages"), self._reader.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [from_row(r) for r in rows]


def _thread(row: Any, msgs: list[Message]) -> Thread:
    return Thread(
        id=row.id,
        actor_id=row.actor_id,
        agent=row.agent,
        title=row.title,
        messages=msgs,
        created_at=aware_utc(row.created_at),
        updated_at=aware_utc(row.updated_at),
    )


def aware_utc(value: datetime | None) -> datetime | None:
    """SQLite keeps no time zone and returns naive datetimes; its CURRENT_TIMESTAMP is UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value
