"""SqlAgentStore: threads and messages on PostgreSQL (asyncpg) or SQLite (aiosqlite).

Every operation opens its own short transaction: a journal step or an appended message stays
committed whatever happens to the request that caused it, and no SSE stream holds a connection.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.core.messages import (
    MAX_SEQ,
    THREAD_ID_CHARS,
    EncodedLists,
    Message,
    holdable_thread_id,
    storable_lists,
    unstorable_thread,
)
from bounded_agents.core.ports import (
    ArchivedPart,
    FoldHealth,
    SearchHit,
    Thread,
    ThreadListing,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    Transaction,
)
from bounded_agents.core.prefix import forget_kept_json
from bounded_agents.core.summary import chunk_digest
from bounded_agents.errors import (
    DuplicateMessage,
    InvalidContent,
    StoreError,
    ThreadErased,
    ThreadNotFound,
)
from bounded_agents.store import archive, direct, driver, erase, migrate, search, search_index
from bounded_agents.store.codec import (
    aware_utc,
    fold_health_of,
    from_row,
    previous_at,
    thread_of,
    to_row,
    to_rows,
    token_costs,
)
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.engine import (
    autocommit,
    is_sqlite,
    make_engine,
    on_citus,
    read_retrying,
    write_transaction,
)
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.hotread import HotReader
from bounded_agents.store.message_cache import MessageCache
from bounded_agents.store.schema import messages, thread_summaries, threads
from bounded_agents.store.statements import (
    ALL_MESSAGES,
    APPEND_ONE,
    BUMPS,
    COUNT_BETWEEN,
    ENCODED,
    ERASED_THREAD,
    INSERT_MESSAGES,
    INSERT_ONE_AFTER_BUMP,
    LAST_PROMPT,
    LATEST_SUMMARY,
    MESSAGES_AFTER,
    MESSAGES_AT,
    MSG_COLS,
    PAGE_AT,
    REPORTED,
    RUN_MESSAGES,
    SUMMARY_COLS,
    THREAD_BY_ID,
    THREAD_LISTING,
    TURN_READ_LIMITED,
    positions,
    turn_read,
)
from bounded_agents.store.tx import joined, writing


def may_hold_thread_id(engine: AsyncEngine, thread_id: str) -> bool:
    """Whether a thread of `engine`'s database may have `thread_id`; a read (or a run's insert)
    by any other finds none without sending it. PostgreSQL's column holds 36 characters, so a
    longer id is none there (and Citus, routing by it, refused its cast as a database error);
    SQLite stored longer ones before creation refused them (`holdable_thread_id`)."""
    if not holdable_thread_id(thread_id):
        return False
    return len(thread_id) <= THREAD_ID_CHARS or dialect_of(engine).sqlite


class SqlAgentStore:
    """`AgentStore`, `ThreadTurnReader`, `SummaryStore`, `TransactionalStore`,
    `PromptDigestStore`, `FoldHealthStore` and `ErasingStore` over SQLAlchemy Core (no ORM
    identity map to pay for)."""

    joins_transactions = True

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = autocommit(engine)
        self._hot = HotReader(engine)
        self.message_cache = MessageCache()
        """Messages the turn read rebuilt, handed back when the next turn reads the same rows."""
        self._unsearched: frozenset[str] = frozenset()
        """Agents whose new threads are not indexed (`index_agents`)."""
        self._maintenance: Callable[[], AsyncEngine] | None = None
        """Builds an engine without the statement timeout, for the start-up work (migrations,
        the search index's switch) that may rightly take minutes; None: use `engine`."""

    @classmethod
    def from_url(cls, url: str, **engine_options: Any) -> SqlAgentStore:
        """Build a store and its engine; `engine_options` go to `make_engine` (pool sizes...).
        With a `statement_timeout`, the start-up work (`create_schema`, `index_agents`) runs on
        an engine of its own without it: a migration that waits for another process's lock,
        or rewrites a large table, is not a database that stopped answering."""
        store = cls(make_engine(url, **engine_options))
        if engine_options.get("statement_timeout") is not None and not is_sqlite(url):
            unbounded = {**engine_options, "statement_timeout": None}
            store._maintenance = functools.partial(make_engine, url, **unbounded)
        return store

    @asynccontextmanager
    async def _maintenance_engine(self) -> AsyncIterator[AsyncEngine]:
        if self._maintenance is None:
            yield self._engine
            return
        engine = self._maintenance()
        try:
            yield engine
        finally:
            await engine.dispose()

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def create_schema(self) -> None:
        """Bring the database to the newest Alembic revision (`alembic upgrade head`)."""
        async with wrap_db_errors("create_schema"), self._maintenance_engine() as engine:
            await migrate.upgrade(engine)

    async def dispose(self) -> None:
        await self._hot.close()
        self.message_cache.clear()
        await self._engine.dispose()

    # --- AgentStore ------------------------------------------------------------------------

    async def create_thread(self, *, actor_id: str, agent: str, title: str | None = None) -> Thread:
        _check_thread(None, actor_id, agent, title)
        thread_id = str(uuid.uuid4())
        async with wrap_db_errors("create_thread"), write_transaction(self._engine) as conn:
            await conn.execute(
                threads.insert().values(
                    id=thread_id, actor_id=actor_id, agent=agent, title=title, **self._search(agent)
                )
            )
            row = (await conn.execute(THREAD_BY_ID, {"tid": thread_id})).one()
        return thread_of(row, [])

    async def create_named_thread(
        self,
        thread_id: str,
        *,
        actor_id: str,
        agent: str,
        title: str | None = None,
        unless_erased: bool = False,
    ) -> Thread:
        """`NamedThreadCreator`: INSERT ... ON CONFLICT DO NOTHING on the id, then the row, in
        one transaction: two requests racing to create it get the one thread. With
        `unless_erased`, `erased_threads` is read after the insert: on PostgreSQL that read
        takes a snapshot after the insert waited out an erasure holding the row, and on SQLite
        the transaction holds the write lock, so an erasure is seen whenever it committed."""
        _check_thread(thread_id, actor_id, agent, title)
        values: dict[str, object] = {
            "id": thread_id,
            "actor_id": actor_id,
            "agent": agent,
            "title": title,
            **self._search(agent),
        }
        stmt = dialect_of(self._engine).insert(threads).values(values).on_conflict_do_nothing()
        async with wrap_db_errors("create_thread"), write_transaction(self._engine) as conn:
            await conn.execute(stmt)
            if unless_erased and (await conn.execute(ERASED_THREAD, {"tid": thread_id})).first():
                raise ThreadErased(thread_id)  # rolls the insert back
            row = (await conn.execute(THREAD_BY_ID, {"tid": thread_id})).one()
        return thread_of(row, [])

    def _may_hold(self, thread_id: str) -> bool:
        return may_hold_thread_id(self._engine, thread_id)

    def _search(self, agent: str) -> dict[str, bool]:
        """A new thread's index flag: off for an agent said not to search, else the default."""
        return {"searchable": False} if agent in self._unsearched else {}

    async def index_agents(self, searching: Collection[str], not_searching: Collection[str]) -> int:
        """`SearchIndexer` (`bounded_agents.store.search_index`)."""
        self._unsearched = (self._unsearched | frozenset(not_searching)) - frozenset(searching)
        async with self._maintenance_engine() as engine:
            return await search_index.index_agents(engine, searching, not_searching)

    async def get_thread(self, thread_id: str) -> Thread | None:
        if not self._may_hold(thread_id):
            return None
        async with wrap_db_errors("get_thread"), self._reader.connect() as conn:
            head = (await conn.execute(THREAD_BY_ID, {"tid": thread_id})).one_or_none()
            if head is None:
                return None
            rows = (await conn.execute(ALL_MESSAGES, {"tid": thread_id})).all()
        return thread_of(head, [from_row(r) for r in rows])

    async def get_thread_info(self, thread_id: str) -> Thread | None:
        """The thread without its messages: what an ownership check needs (the HTTP route's,
        and a turn's first read where the runtime does not check the owner in the run's
        insert). One driver call on the turn read's dedicated connections when one is free."""
        if not self._may_hold(thread_id):
            return None
        params = {"tid": thread_id}

        async def read(conn: AsyncConnection) -> Any:
            return (await conn.execute(THREAD_BY_ID, params)).all()

        async with wrap_db_errors("get_thread_info"):
            rows = await self._hot.fetch(THREAD_BY_ID, params)
            if rows is None:  # no dedicated connection free: the pool's way
                rows = await read_retrying(self._reader, read)
        return thread_of(rows[0], []) if rows else None

    async def append_messages(
        self, thread_id: str, messages_: Sequence[Message], *, tx: Transaction | None = None
    ) -> list[Message]:
        """Append all of `messages_` or none of them, with contiguous `seq` numbers; with `tx`,
        inside that transaction (see `bounded_agents.store.tx`).

        The thread's `last_seq` counter is bumped first, with `UPDATE ... RETURNING`: that write
        takes the thread row's lock (PostgreSQL) or the database write lock (SQLite), so two
        concurrent appends are serialized and can never pick the same `seq`. A single message
        of a run (what the loop writes) is bumped only if its run has not stored that role yet:
        a replayed write then changes nothing and raises `DuplicateMessage` without a failed
        statement, which would abort a shared transaction on PostgreSQL.
        """
        return await self._append_checked(thread_id, messages_, None, tx)

    async def append_answer(
        self,
        thread_id: str,
        messages_: Sequence[Message],
        last_prompt: str,
        *,
        tx: Transaction | None = None,
        reported_tokens: int | None = None,
    ) -> list[Message]:
        """`append_messages`, remembering `last_prompt` and `reported_tokens` in the same UPDATE
        of the thread row (`PromptDigestStore`): no statement of its own."""
        return await self._append_checked(thread_id, messages_, (last_prompt, reported_tokens), tx)

    async def reported_tokens(self, thread_id: str) -> int | None:
        async with wrap_db_errors("reported_tokens"), self._reader.connect() as conn:
            value = (await conn.execute(REPORTED, {"tid": thread_id})).scalar()
        return None if value is None else int(value)

    async def last_prompt(self, thread_id: str) -> str | None:
        async with wrap_db_errors("last_prompt"), self._reader.connect() as conn:
            value = (await conn.execute(LAST_PROMPT, {"tid": thread_id})).scalar()
        return None if value is None else str(value)

    async def _append_checked(
        self,
        thread_id: str,
        messages_: Sequence[Message],
        last_prompt: tuple[str, int | None] | None,
        tx: Transaction | None,
    ) -> list[Message]:
        if not messages_:
            return []
        lists: list[EncodedLists] = []
        for m in messages_:
            reason, encoded = storable_lists(m)
            if reason is not None:
                raise InvalidContent(reason)
            lists.append(encoded)
        try:
            return await self._append(thread_id, messages_, lists, last_prompt, tx)
        except (sa_exc.IntegrityError, driver.UniqueConflict) as exc:
            if isinstance(exc, driver.UniqueConflict):
                detail, name = exc.detail, exc.message
            else:
                detail = str(exc.orig)
                name = f"append_messages: database error ({type(exc.orig).__name__})"
            if "run_id" not in detail:
                raise StoreError(name) from exc
            dup = next((m for m in messages_ if m.run_id is not None), messages_[0])
            raise DuplicateMessage(dup.run_id or "", dup.role) from exc

    async def _append(
        self,
        thread_id: str,
        messages_: Sequence[Message],
        lists: Sequence[EncodedLists],
        last_prompt: tuple[str, int | None] | None,
        tx: Transaction | None,
    ) -> list[Message]:
        """`lists`: each message's lists as its check encoded them (`storable_lists`);
        `last_prompt`: the answer's prompt digest and the provider's count, or None."""
        n = len(messages_)
        costs = token_costs(messages_)
        added = sum(costs)
        params: dict[str, Any] = {
            "tid": thread_id,
            "n": n,
            "tokens": added,
            "answers": any(m.role == "assistant" for m in messages_),
        }
        only = messages_[0] if n == 1 and messages_[0].run_id is not None else None
        if only is not None:
            params.update(rid=only.run_id, role=only.role)
        if last_prompt is not None:
            params["last_prompt"], params["reported"] = last_prompt
        async with writing(self._engine, tx, "append_messages") as conn:
            if only is not None and not on_citus(self._engine):
                row = to_row(thread_id, 0, only, lists[0])
                params.update({k: row[k] for k in ENCODED})
                stored = await self._append_one(conn, params, last_prompt is not None)
                if stored is None:
                    await self._refuse(conn, thread_id, only)
                return [only.model_copy(update={"seq": stored})]
            # Several messages; or, under Citus, one too: the bump and then the insert, each
            # routed to the thread's shard (see `on_citus`).
            bump = BUMPS[(only is not None, last_prompt is not None)]
            bumped = (await direct.write(conn, bump, params, "append_messages")).one_or_none()
            if bumped is None:
                if only is not None:
                    await self._refuse(conn, thread_id, only)
                raise ThreadNotFound(thread_id)
            last, total, searchable = bumped
            first = last - n + 1
            rows, _ = to_rows(thread_id, first, total - added, messages_, costs, lists)
            for row in rows:
                row["indexed"] = searchable
            if n == 1:
                await direct.write(conn, INSERT_MESSAGES, rows[0], "append_messages")
            else:
                await conn.execute(INSERT_MESSAGES, rows)
        return [m.model_copy(update={"seq": first + i}) for i, m in enumerate(messages_)]

    @staticmethod
    async def _append_one(
        conn: AsyncConnection, params: dict[str, Any], prompt: bool
    ) -> int | None:
        """A run's one message and its seq bump in one round trip (`direct.write_bumped`): its
        `seq`, or None when the bump found no row (the message is stored already, or no
        thread)."""
        seq = await direct.write_bumped(
            conn,
            combined=APPEND_ONE[prompt],
            bump=BUMPS[(True, prompt)],
            then=INSERT_ONE_AFTER_BUMP,
            params=params,
            operation="append_messages",
        )
        return None if seq is None else int(seq)

    async def _refuse(self, conn: AsyncConnection, thread_id: str, message: Message) -> NoReturn:
        """A run's one message whose bump found no row: stored already, or no thread."""
        if await self._exists(conn, thread_id):
            raise DuplicateMessage(message.run_id or "", message.role)
        raise ThreadNotFound(thread_id)

    async def _exists(self, conn: AsyncConnection, thread_id: str) -> bool:
        return (await conn.execute(THREAD_BY_ID, {"tid": thread_id})).first() is not None

    # --- ThreadTurnReader ------------------------------------------------------------------

    async def load_thread_for_turn(
        self, query: ThreadTurnQuery, *, tx: Transaction | None = None
    ) -> ThreadTurnPage | None:
        """The page `query` asks for (see `turn_read`), the title, whether the thread was ever
        answered and, with `after_summary`, its newest summary, in one round trip (and a count
        when the query asks `count_unread` and seqs were skipped: `_count_between`). None for an
        unknown thread. With `tx`, read inside that transaction (it sees its own writes)."""
        stmt, params = turn_read(query)
        shared = joined(self._engine, tx)
        async with wrap_db_errors("load_thread_for_turn"):
            if shared is not None:
                rows = await self._hot.fetch_on(shared, stmt, params)
            else:
                found = await self._hot.fetch(stmt, params)
                if found is None:  # no dedicated connection free: the pool's way
                    async with self._reader.connect() as conn:
                        found = (await conn.execute(stmt, params)).all()
                rows = found
        if not rows:
            return None
        at = positions(stmt)
        first = rows[0]
        offset = PAGE_AT + (len(SUMMARY_COLS) if query.after_summary else 0)
        page, payload = self.message_cache.page(query.thread_id, rows, offset)
        summary = None
        if query.after_summary and first[at["summary_covers_through_seq"]] is not None:
            summary = ThreadSummary(**{c: first[at[f"summary_{c}"]] for c in SUMMARY_COLS})
        boundary = summary.covers_through_seq if summary is not None else 0
        next_seq = page[0].seq if page and page[0].seq is not None else first[at["last_seq"]] + 1
        skipped = max(0, next_seq - boundary - 1)
        unread = None
        if query.after_summary and query.count_unread and skipped:
            unread = await self._count_between(shared, query.thread_id, boundary, next_seq)
        last = rows[-1]
        return ThreadTurnPage(
            messages=page,
            title=first[at["title"]],
            has_assistant_message=bool(first[at["answered"]]),
            summary=summary,
            skipped=skipped,
            unread=unread,
            tokens_before=int(first[at["page_tokens_before"]] or 0),
            last_prompt=last[at["last_prompt"]],
            reported_tokens=last[at["last_reported_tokens"]],
            previous_at=previous_at(rows, at["previous_at"]),
            fold_health=fold_health_of(last[at["fold_health"]]),
            payload_bytes=payload,
        )

    async def _count_between(
        self, shared: AsyncConnection | None, thread_id: str, after: int, before: int
    ) -> int:
        """Messages of the thread with `after < seq < before`: what a summarizing read skipped,
        counted, as erased messages leave seqs and no rows (`ThreadTurnPage.unread`). Asked only
        when seqs were skipped: a backlog past the read's bound, or an erased gap."""
        params = {"tid": thread_id, "after": after, "before": before}
        async with wrap_db_errors("load_thread_for_turn"):
            if shared is not None:
                return int((await shared.execute(COUNT_BETWEEN, params)).scalar_one())
            rows = await self._hot.fetch(COUNT_BETWEEN, params)  # as the read went: no checkout
            if rows is None:
                async with self._reader.connect() as conn:
                    rows = (await conn.execute(COUNT_BETWEEN, params)).all()
            return int(rows[0][0])

    # --- FoldHealthStore -------------------------------------------------------------------

    async def fold_health(self, thread_id: str) -> FoldHealth | None:
        stmt = sa.select(threads.c.fold_health).where(threads.c.id == thread_id)
        async with wrap_db_errors("fold_health"), self._reader.connect() as conn:
            return fold_health_of((await conn.execute(stmt)).scalar_one_or_none())

    async def save_fold_health(
        self, thread_id: str, health: FoldHealth | None, *, tx: Transaction | None = None
    ) -> None:
        """One UPDATE of the thread row; written only when the health changed (the loop
        compares), so a healthy thread never pays it."""
        value = None if health is None else health.model_dump_json()
        stmt = threads.update().where(threads.c.id == thread_id).values(fold_health=value)
        async with writing(self._engine, tx, "save_fold_health") as conn:
            await conn.execute(stmt)

    # --- SummaryStore ----------------------------------------------------------------------

    async def latest_summary(self, thread_id: str) -> ThreadSummary | None:
        async with wrap_db_errors("latest_summary"), self._reader.connect() as conn:
            row = (await conn.execute(LATEST_SUMMARY, {"tid": thread_id})).one_or_none()
        return None if row is None else ThreadSummary(**row._mapping)

    async def save_summary(
        self, thread_id: str, summary: ThreadSummary, *, tx: Transaction | None = None
    ) -> None:
        """INSERT ... ON CONFLICT DO NOTHING on (thread_id, covers_through_seq): a fold that is
        replayed after a crash finds its row and leaves it as the first attempt wrote it."""
        values = {"thread_id": thread_id, **summary.model_dump(include=set(SUMMARY_COLS))}
        insert = dialect_of(self._engine).insert
        stmt = insert(thread_summaries).values(values).on_conflict_do_nothing()
        async with writing(self._engine, tx, "save_summary") as conn:
            await conn.execute(stmt)

    async def save_summary_if_intact(
        self,
        thread_id: str,
        summary: ThreadSummary,
        folded: Sequence[int],
        base: int | None = None,
        *,
        digest: str | None = None,
    ) -> bool:
        """`IntactSummarySaver`. On PostgreSQL the thread row is locked FOR KEY SHARE first,
        which waits for an erasure's FOR UPDATE (`store.erase`) and makes it wait: the count
        that follows is a statement of its own, so it sees an erasure that committed while the
        lock waited, and one that comes after waits for this commit, then deletes the summary
        as it deletes every summary covering its message. On SQLite the first statement is a
        write that changes nothing, as an erasure's is, so the transaction holds the write lock
        before it counts (a deferred BEGIN that read first would count in a snapshot). The
        count is of the range `folded` spans (one index range), against how many seqs it
        holds; with `digest`, that range's rows are read and compared instead (the chunk's
        size, bounded by the fold's budget); the summary it was written on (`base`) is one
        primary-key probe."""
        if not folded:
            return False
        values = {"thread_id": thread_id, **summary.model_dump(include=set(SUMMARY_COLS))}
        insert = dialect_of(self._engine).insert
        lo, hi = min(folded), max(folded)
        async with writing(self._engine, None, "save_summary_if_intact") as conn:
            if dialect_of(conn).postgres:
                lock = sa.select(threads.c.id).where(threads.c.id == thread_id)
                await conn.execute(lock.with_for_update(key_share=True))
            else:  # a write first, so the deferred BEGIN takes the write lock (not a snapshot)
                await conn.execute(
                    threads.update()
                    .where(threads.c.id == thread_id)
                    .values(updated_at=threads.c.updated_at)
                )
            span = (messages.c.thread_id == thread_id, messages.c.seq.between(lo, hi))
            if digest is None:
                count = sa.select(sa.func.count()).where(*span)
                if (await conn.execute(count)).scalar_one() != len(set(folded)):
                    return False
            else:  # the rows themselves, not their number: a thread made again has the seqs
                rows = sa.select(messages.c.seq, messages.c.role, messages.c.content).where(*span)
                found = (await conn.execute(rows.order_by(messages.c.seq))).all()
                if chunk_digest([(r.seq, r.role, r.content) for r in found]) != digest:
                    return False
            if base is not None:  # the notes it carries on: erased with any message they cover
                kept = sa.select(thread_summaries.c.thread_id).where(
                    thread_summaries.c.thread_id == thread_id,
                    thread_summaries.c.covers_through_seq == base,
                )
                if (await conn.execute(kept)).first() is None:
                    return False
            await conn.execute(insert(thread_summaries).values(values).on_conflict_do_nothing())
        return True

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        if after_seq >= MAX_SEQ:
            return []  # no message is past it (`_held`)
        params = {"tid": thread_id, "after": max(after_seq, 0), "n": limit}
        async with wrap_db_errors("messages_after"), self._reader.connect() as conn:
            rows = (await conn.execute(MESSAGES_AFTER, params)).all()
        return [from_row(r) for r in rows]

    async def list_threads(
        self, actor_id: str, *, limit: int, offset: int = 0
    ) -> list[ThreadListing]:
        """The actor's threads, newest activity first (`THREAD_LISTING`)."""
        params = {"actor": actor_id, "limit": limit, "offset": offset}
        async with wrap_db_errors("list_threads"), self._reader.connect() as conn:
            rows = (await conn.execute(THREAD_LISTING, params)).all()
        return [
            ThreadListing(
                id=r.id,
                agent=r.agent,
                title=r.title,
                messages=r.last_seq,
                created_at=aware_utc(r.created_at),
                updated_at=aware_utc(r.updated_at),
            )
            for r in rows
        ]

    # --- ErasingStore (bounded_agents.store.erase) -----------------------------------------

    async def delete_thread(self, thread_id: str) -> bool:
        erased = await erase.delete_thread(self._engine, thread_id)
        self.message_cache.forget(thread_id)
        forget_kept_json()
        return erased

    async def delete_message(self, thread_id: str, seq: int, *, digest: str | None = None) -> bool:
        """The cache is dropped for the thread too: it holds the message's text in memory."""
        if not _held(seq):
            return False
        erased = await erase.delete_message(self._engine, thread_id, seq, digest=digest)
        self.message_cache.forget(thread_id)
        forget_kept_json()
        return erased

    async def prune_erased(self, older_than_seconds: float, limit: int) -> int:
        return await erase.prune_erased(self._engine, older_than_seconds, limit)

    async def thread_erased(self, thread_id: str) -> bool:
        """`ErasedThreadReader`: one read of `erased_threads` by its key."""
        async with wrap_db_errors("thread_erased"), self._reader.connect() as conn:
            return (await conn.execute(ERASED_THREAD, {"tid": thread_id})).first() is not None

    # --- transcript paging (HTTP) ----------------------------------------------------------

    async def list_messages(
        self, thread_id: str, *, limit: int, before: int | None = None
    ) -> list[Message]:
        """Up to `limit` messages with `seq < before` (newest page when None), oldest first."""
        if before is not None and before < 1:
            return []
        stmt = sa.select(*MSG_COLS).where(messages.c.thread_id == thread_id)
        if before is not None and before <= MAX_SEQ:  # past it bounds nothing (`_held`)
            stmt = stmt.where(messages.c.seq < before)
        stmt = stmt.order_by(messages.c.seq.desc()).limit(limit)
        async with wrap_db_errors("list_messages"), self._reader.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [from_row(r) for r in reversed(rows)]

    async def run_messages(self, thread_id: str, run_id: str) -> list[Message]:
        """The messages `run_id` wrote (`RUN_MESSAGES`)."""
        async with wrap_db_errors("run_messages"), self._reader.connect() as conn:
            rows = (await conn.execute(RUN_MESSAGES, {"tid": thread_id, "rid": run_id})).all()
        return [from_row(r) for r in rows]

    # --- HistorySearcher, SummaryArchive (bounded_agents.store.search, .archive) -----------

    async def search_history(
        self, thread_id: str, query: str, *, limit: int, max_chars: int | None = None
    ) -> list[SearchHit]:
        """`HistorySearcher`: ranked full-text queries of the thread's messages and archived
        summary parts (`store.search`)."""
        if not self._may_hold(thread_id):
            return []
        async with wrap_db_errors("search_history"), self._reader.connect() as conn:
            return await search.search_history(conn, thread_id, query, limit, max_chars)

    async def messages_at(self, thread_id: str, seqs: Collection[int]) -> list[Message]:
        """`HistorySearcher`: one read (`MESSAGES_AT`) of the positions a thread can hold."""
        params = {"tid": thread_id, "seqs": sorted(s for s in seqs if _held(s))}
        async with wrap_db_errors("messages_at"), self._reader.connect() as conn:
            return [from_row(r) for r in (await conn.execute(MESSAGES_AT, params)).all()]

    async def archive_summary_part(
        self,
        thread_id: str,
        from_seq: int,
        to_seq: int,
        content: str,
        *,
        tx: Transaction | None = None,
    ) -> ArchivedPart:
        async with writing(self._engine, tx, "archive_summary_part") as conn:
            return await archive.archive_part(conn, thread_id, from_seq, to_seq, content)

    async def archived_parts(
        self, thread_id: str, *, limit: int = 100, before_seq: int | None = None
    ) -> list[ArchivedPart]:
        if before_seq is not None and before_seq < 1:
            return []
        if before_seq is not None and before_seq > MAX_SEQ:
            before_seq = None  # bounds nothing (`_held`)
        async with wrap_db_errors("archived_parts"), self._reader.connect() as conn:
            return await archive.parts(conn, thread_id, limit, before_seq)


def _held(seq: int) -> bool:
    """Whether `seq` is a position a thread can hold (1 to `MAX_SEQ`). Any other names no
    message and never reaches the SQL: PostgreSQL refuses a number past 32 bits (SQLite past
    64) as a database error, a `StoreError` that reads as an outage (found by attack through
    the Python API, which the HTTP routes' own bound does not cover)."""
    return 0 < seq <= MAX_SEQ


def _check_thread(thread_id: str | None, actor_id: str, agent: str, title: str | None) -> None:
    reason = unstorable_thread(thread_id=thread_id, actor_id=actor_id, agent=agent, title=title)
    if reason is not None:
        raise InvalidContent(reason)


__all__ = [
    "PAGE_AT",
    "TURN_READ_LIMITED",
    "SqlAgentStore",
    "aware_utc",
    "may_hold_thread_id",
    "turn_read",
]
