"""SqlAgentStore: threads and messages on PostgreSQL (asyncpg) or SQLite (aiosqlite).

Every operation opens its own short transaction: a journal step or an appended message stays
committed whatever happens to the request that caused it, and no SSE stream holds a connection.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from bounded_agents.core.messages import Message, unstorable_text
from bounded_agents.core.ports import (
    Thread,
    ThreadListing,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
    Transaction,
)
from bounded_agents.errors import DuplicateMessage, InvalidContent, StoreError, ThreadNotFound
from bounded_agents.store import direct, migrate
from bounded_agents.store.codec import MESSAGE_COLUMNS, from_row, to_row, to_rows, token_costs
from bounded_agents.store.engine import (
    autocommit,
    make_engine,
    on_citus,
    read_retrying,
    write_transaction,
)
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.hotread import HotReader
from bounded_agents.store.message_cache import MessageCache
from bounded_agents.store.schema import messages, thread_summaries, threads
from bounded_agents.store.tx import joined, writing

_TID = sa.bindparam("tid", type_=sa.String)
_N = sa.bindparam("n", type_=sa.Integer)
_TOKENS = sa.bindparam("tokens", type_=sa.BigInteger)
_RUNS_OFFSET = sa.bindparam("runs_offset", type_=sa.Integer)
_AFTER = sa.bindparam("after", type_=sa.Integer)
_MSG_COLS = [messages.c[name] for name in MESSAGE_COLUMNS]
_SUMMARY_COLS = (
    "covers_through_seq",
    "text",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "run_id",
)
_ANSWERS = sa.bindparam("answers", type_=sa.Boolean)
"""Whether an append stores an answer: it sets the thread's `answered` flag for good."""


class _Greatest(FunctionElement[int]):
    """GREATEST on PostgreSQL, the two-argument scalar max() on SQLite."""

    type = sa.Integer()
    inherit_cache = True


class _Least(FunctionElement[int]):
    """LEAST on PostgreSQL, the two-argument scalar min() on SQLite."""

    type = sa.Integer()
    inherit_cache = True


@compiles(_Greatest)
def _greatest_default(element: _Greatest, compiler: Any, **kw: Any) -> str:
    return f"GREATEST({compiler.process(element.clauses, **kw)})"


@compiles(_Greatest, "sqlite")
def _greatest_sqlite(element: _Greatest, compiler: Any, **kw: Any) -> str:
    return f"max({compiler.process(element.clauses, **kw)})"


@compiles(_Least)
def _least_default(element: _Least, compiler: Any, **kw: Any) -> str:
    return f"LEAST({compiler.process(element.clauses, **kw)})"


@compiles(_Least, "sqlite")
def _least_sqlite(element: _Least, compiler: Any, **kw: Any) -> str:
    return f"min({compiler.process(element.clauses, **kw)})"


def _combine(floors: list[sa.ColumnElement[Any]], widest: bool) -> sa.ColumnElement[Any]:
    combined = floors[0]
    for floor in floors[1:]:
        combined = _Least(combined, floor) if widest else _Greatest(combined, floor)
    return combined


def _newest_summary() -> sa.Select[Any]:
    """The thread's live summary: the row at the highest boundary, found by max() on the
    primary key rather than ORDER BY ... LIMIT. A LIMIT sent as a parameter lets PostgreSQL's
    generic plan guess a tenth of a long summary history and then scan the thread; max() is
    one index probe whatever the history holds."""
    return sa.select(*[thread_summaries.c[c] for c in _SUMMARY_COLS]).where(
        thread_summaries.c.thread_id == _TID,
        thread_summaries.c.covers_through_seq == _summary_boundary(),
    )


def _summary_boundary() -> sa.ScalarSelect[Any]:
    """The thread's newest summary boundary (None without a summary): one max() probe of the
    primary key, uncorrelated."""
    return (
        sa.select(sa.func.max(thread_summaries.c.covers_through_seq))
        .where(thread_summaries.c.thread_id == _TID)
        .scalar_subquery()
    )


def _thread_value(column: sa.Column[Any]) -> sa.ScalarSelect[Any]:
    """`column` of the thread row as an uncorrelated scalar subquery: PostgreSQL runs it once,
    before the page (an InitPlan), and plans the page with it as a parameter."""
    return sa.select(column).where(threads.c.id == _TID).scalar_subquery()


def _turn_read(
    *, count: bool, tokens: bool, runs: bool, widest: bool, after_summary: bool
) -> sa.Select[Any]:
    """The per-turn read, one statement and one round trip: the title, the whole-thread
    answered flag, the newest summary (when asked), and the page, oldest first.

    Every limit is a `seq` floor, because a thread's seqs run 1..last_seq without gaps:
    - count `n`: `last_seq - n + 1`, from the thread row, no rows counted;
    - tokens `B`: the first message with `tokens_before >= total_tokens - B` (one probe of the
      (thread_id, tokens_before) index; the newest alone when even it does not fit);
    - runs `r`: the r-th newest user message (one probe of (thread_id, role, seq) with OFFSET).
    The floors combine with GREATEST (every limit) or LEAST (any limit), then with the summary's
    boundary, and the page is one range scan of the (thread_id, seq) index from there to
    `last_seq`. The page is LEFT JOINed to the thread row, so an existing thread with an empty
    page still comes back as one row with NULL message columns. Portable: no LATERAL, which
    SQLite lacks.

    The range's two ends are uncorrelated subqueries, not the joined thread row's columns, and
    the upper end (`<= last_seq`, always true) is spelled out: so PostgreSQL sees a range
    between two parameters, which it guesses at 0.5% of the thread, and always reads it by the
    index. With the floor taken from the joined row it guessed a third of the thread, and for a
    thread holding most of the table it read the whole thread instead (25 ms against 0.07 at
    100,000 messages; tests/store/test_bounded_reads.py).
    """
    t = threads
    last_seq = _thread_value(t.c.last_seq)
    floors: list[sa.ColumnElement[Any]] = []
    if count:
        floors.append(last_seq - _N + 1)
    if tokens:
        first_fitting = (
            sa.select(messages.c.seq)
            .where(
                messages.c.thread_id == _TID,
                messages.c.tokens_before >= _thread_value(t.c.total_tokens) - _TOKENS,
            )
            .order_by(messages.c.tokens_before)
            .limit(1)
            .scalar_subquery()
        )
        floors.append(sa.func.coalesce(first_fitting, last_seq))
    if runs:
        nth_user = (
            sa.select(messages.c.seq)
            .where(messages.c.thread_id == _TID, messages.c.role == "user")
            .order_by(messages.c.seq.desc())
            .limit(1)
            .offset(_RUNS_OFFSET)
            .scalar_subquery()
        )
        floors.append(sa.func.coalesce(nth_user, 1))
    columns: list[Any] = [t.c.title, t.c.answered, t.c.last_seq]
    source: Any = t
    floor = _combine(floors, widest) if floors else None
    if after_summary:
        newest = _newest_summary().subquery("summary")
        source = source.outerjoin(newest, sa.true())
        columns += [newest.c[c].label(f"summary_{c}") for c in _SUMMARY_COLS]
        start = sa.func.coalesce(_summary_boundary(), 0) + 1
        floor = start if floor is None else _Greatest(start, floor)
    page = messages.alias("page")
    on = page.c.thread_id == _TID
    if floor is not None:
        on = sa.and_(on, page.c.seq >= floor, page.c.seq <= last_seq)
    columns += [page.c[name] for name in MESSAGE_COLUMNS]
    # After the message columns, so every offset before them stays put. The page's first row's
    # running sum says where the page sits in the thread's token count; the thread's last prompt
    # digest rides on one row only (the newest, or the lone row of an empty page), not on each.
    columns += [
        page.c.tokens_before.label("page_tokens_before"),
        sa.case(
            (sa.or_(page.c.seq.is_(None), page.c.seq == t.c.last_seq), t.c.last_prompt),
            else_=sa.null(),
        ).label("last_prompt"),
        sa.case(
            (sa.or_(page.c.seq.is_(None), page.c.seq == t.c.last_seq), t.c.last_reported_tokens),
            else_=sa.null(),
        ).label("last_reported_tokens"),
    ]
    return (
        sa.select(*columns)
        .select_from(source.outerjoin(page, on))
        .where(t.c.id == _TID)
        .order_by(page.c.seq)
    )


_TURN_READS: dict[tuple[bool, bool, bool, bool, bool], sa.Select[Any]] = {}
_POSITIONS: dict[int, tuple[sa.Select[Any], dict[str, int]]] = {}


def _positions(stmt: sa.Select[Any]) -> dict[str, int]:
    """Column name -> its index in `stmt`'s rows: driver rows are read by position."""
    hit = _POSITIONS.get(id(stmt))
    if hit is None or hit[0] is not stmt:
        names = [str(c.key) for c in stmt.selected_columns]
        hit = _POSITIONS[id(stmt)] = (stmt, {name: i for i, name in enumerate(names)})
    return hit[1]


def turn_read(query: ThreadTurnQuery) -> tuple[sa.Select[Any], dict[str, Any]]:
    """The statement for `query`'s shape (built once per shape, then cached with its compiled
    form) and its parameters."""
    shape = (
        query.message_limit is not None,
        query.token_limit is not None,
        query.run_limit is not None,
        query.widest,
        query.after_summary,
    )
    stmt = _TURN_READS.get(shape)
    if stmt is None:
        count, tokens, runs, widest, after = shape
        stmt = _TURN_READS[shape] = _turn_read(
            count=count, tokens=tokens, runs=runs, widest=widest, after_summary=after
        )
    params: dict[str, Any] = {"tid": query.thread_id}
    if query.message_limit is not None:
        params["n"] = query.message_limit
    if query.token_limit is not None:
        params["tokens"] = query.token_limit
    if query.run_limit is not None:
        params["runs_offset"] = query.run_limit - 1  # OFFSET r-1: the r-th newest user message
    return stmt, params


PAGE_AT = 3
"""Where a turn read's message columns start (after title, answered, last_seq) when it asks for
no summary; with `after_summary` the summary's columns come first."""
TURN_READ_LIMITED = turn_read(ThreadTurnQuery(thread_id="", message_limit=1))[0]
"""The bounded per-turn read of a count window (parameters `tid`, `n`). Public so the
benchmark's raw-driver floor sends exactly the statement the store sends."""
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
    .values(
        last_seq=threads.c.last_seq + _N,
        total_tokens=threads.c.total_tokens + _TOKENS,
        answered=sa.or_(threads.c.answered, _ANSWERS),
        updated_at=sa.func.current_timestamp(),
    )
    .returning(threads.c.last_seq, threads.c.total_tokens)
)
_BUMP_SEQ_ONCE = (
    threads.update()
    .where(
        threads.c.id == _TID,
        ~sa.exists().where(
            messages.c.thread_id == _TID,
            messages.c.run_id == sa.bindparam("rid"),
            messages.c.role == sa.bindparam("role"),
        ),
    )
    .values(
        last_seq=threads.c.last_seq + _N,
        total_tokens=threads.c.total_tokens + _TOKENS,
        answered=sa.or_(threads.c.answered, _ANSWERS),
        updated_at=sa.func.current_timestamp(),
    )
    .returning(threads.c.last_seq, threads.c.total_tokens)
)
"""`_BUMP_SEQ` for one message of a run, guarded by the (thread_id, run_id, role) unique index:
no row comes back when that message is already stored."""
_LAST_PROMPT_VALUES = {
    "last_prompt": sa.bindparam("last_prompt", type_=sa.Text),
    "last_reported_tokens": sa.bindparam("reported", type_=sa.BigInteger),
}
_BUMP_SEQ_AND_PROMPT = _BUMP_SEQ.values(**_LAST_PROMPT_VALUES)
"""The same bump, also remembering the thread's last prompt digest: an answer's append."""
_LAST_PROMPT = sa.select(threads.c.last_prompt).where(threads.c.id == _TID)
_REPORTED = sa.select(threads.c.last_reported_tokens).where(threads.c.id == _TID)
_BUMPS = {
    (False, False): _BUMP_SEQ,
    (True, False): _BUMP_SEQ_ONCE,
    (False, True): _BUMP_SEQ_AND_PROMPT,
    (True, True): _BUMP_SEQ_ONCE.values(**_LAST_PROMPT_VALUES),
}
"""The seq bump by (one run message, with the last prompt digest)."""


def _typed(name: str, column: str) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=messages.c[column].type)


def _one_message_from(source: Any) -> sa.Select[Any]:
    """The row of a run's one message, its `seq` and `tokens_before` taken from `source` (the
    bumped thread row): it needs nothing the bump returns, so both may go out together."""
    return sa.select(
        _TID,
        source.c.last_seq,
        _typed("role", "role"),
        _typed("content", "content"),
        _typed("tool_calls", "tool_calls"),
        _typed("tool_results", "tool_results"),
        _typed("attachments", "attachments"),
        _typed("rid", "run_id"),
        _TOKENS,
        source.c.total_tokens - _TOKENS,
    )


_ONE_MESSAGE_COLS = ["thread_id", *MESSAGE_COLUMNS, "tokens", "tokens_before"]
"""The columns `_one_message_from` selects, in its order."""


def _append_one_statement(bump: sa.Update) -> sa.Insert:
    """PostgreSQL: a run's one message and its seq bump as ONE statement, the bump a
    data-modifying CTE. No row back means the bump found no row (message stored already, or
    no thread), as for the two statements."""
    bumped = bump.cte("bumped")
    insert = messages.insert().from_select(_ONE_MESSAGE_COLS, _one_message_from(bumped))
    return insert.add_cte(bumped).returning(messages.c.seq)


_ENCODED = ("content", "tool_calls", "tool_results", "attachments")
"""A message's stored columns beyond what the bump already binds (`tid`, `rid`, `role`)."""
_APPEND_ONE = {prompt: _append_one_statement(_BUMPS[(True, prompt)]) for prompt in (False, True)}
"""PostgreSQL's one-statement append of a run's one message, by (with the last prompt)."""
_INSERT_ONE_AFTER_BUMP = messages.insert().from_select(
    _ONE_MESSAGE_COLS,
    _one_message_from(threads).where(threads.c.id == _TID, sa.func.changes() == 1),
)
"""SQLite's second statement, sent in the bump's own worker-thread call
(`direct.write_together`): SQLite has no data-modifying CTE. `changes()` is the row count of
the connection's last completed write, the bump: when the bump found no row (the message is
stored already, or no thread) this inserts nothing."""
_INSERT_MESSAGES = messages.insert()
_ALL_MESSAGES = sa.select(*_MSG_COLS).where(messages.c.thread_id == _TID).order_by(messages.c.seq)
_LATEST_SUMMARY = _newest_summary()
_MESSAGES_AFTER = (
    sa.select(*_MSG_COLS)
    .where(messages.c.thread_id == _TID, messages.c.seq > _AFTER)
    .order_by(messages.c.seq)
    .limit(_N)
)


class SqlAgentStore:
    """`AgentStore`, `ThreadTurnReader`, `SummaryStore`, `TransactionalStore` and
    `PromptDigestStore` over SQLAlchemy Core (no ORM identity map to pay for)."""

    joins_transactions = True

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = autocommit(engine)
        self._hot = HotReader(engine)
        self.message_cache = MessageCache()
        """Messages the turn read rebuilt, handed back when the next turn reads the same rows."""

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
        await self._hot.close()
        self.message_cache.clear()
        await self._engine.dispose()

    # --- AgentStore ------------------------------------------------------------------------

    async def create_thread(self, *, actor_id: str, agent: str, title: str | None = None) -> Thread:
        _check_title(title)
        thread_id = str(uuid.uuid4())
        async with wrap_db_errors("create_thread"), write_transaction(self._engine) as conn:
            await conn.execute(
                threads.insert().values(id=thread_id, actor_id=actor_id, agent=agent, title=title)
            )
            row = (await conn.execute(_THREAD_BY_ID, {"tid": thread_id})).one()
        return _thread(row, [])

    async def create_named_thread(
        self, thread_id: str, *, actor_id: str, agent: str, title: str | None = None
    ) -> Thread:
        """`NamedThreadCreator`: INSERT ... ON CONFLICT DO NOTHING on the id, then the row, in
        one transaction: two requests racing to create it get the one thread."""
        _check_title(title)
        values = {"id": thread_id, "actor_id": actor_id, "agent": agent, "title": title}
        dialect = postgresql if self._engine.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(threads).values(values).on_conflict_do_nothing()
        async with wrap_db_errors("create_thread"), write_transaction(self._engine) as conn:
            await conn.execute(stmt)
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

        async def read(conn: AsyncConnection) -> Any:
            return (await conn.execute(_THREAD_BY_ID, {"tid": thread_id})).one_or_none()

        async with wrap_db_errors("get_thread_info"):
            head = await read_retrying(self._reader, read)
        return None if head is None else _thread(head, [])

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
            value = (await conn.execute(_REPORTED, {"tid": thread_id})).scalar()
        return None if value is None else int(value)

    async def last_prompt(self, thread_id: str) -> str | None:
        async with wrap_db_errors("last_prompt"), self._reader.connect() as conn:
            value = (await conn.execute(_LAST_PROMPT, {"tid": thread_id})).scalar()
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
        for m in messages_:
            reason = unstorable_text(m)
            if reason is not None:
                raise InvalidContent(reason)
        try:
            return await self._append(thread_id, messages_, last_prompt, tx)
        except (sa_exc.IntegrityError, direct.UniqueConflict) as exc:
            if isinstance(exc, direct.UniqueConflict):
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
        last_prompt: tuple[str, int | None] | None,
        tx: Transaction | None,
    ) -> list[Message]:
        """`last_prompt`: the answer's prompt digest and the provider's count, or None."""
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
                row = to_row(thread_id, 0, only)
                params.update({k: row[k] for k in _ENCODED})
                stored = await self._append_one(conn, params, last_prompt is not None)
                if stored is None:
                    await self._refuse(conn, thread_id, only)
                return [only.model_copy(update={"seq": stored})]
            # Several messages; or, under Citus, one too: the bump and then the insert, each
            # routed to the thread's shard (see `on_citus`).
            bump = _BUMPS[(only is not None, last_prompt is not None)]
            bumped = (await direct.write(conn, bump, params, "append_messages")).one_or_none()
            if bumped is None:
                if only is not None:
                    await self._refuse(conn, thread_id, only)
                raise ThreadNotFound(thread_id)
            last, total = bumped
            first = last - n + 1
            rows, _ = to_rows(thread_id, first, total - added, messages_, costs)
            if n == 1:
                await direct.write(conn, _INSERT_MESSAGES, rows[0], "append_messages")
            else:
                await conn.execute(_INSERT_MESSAGES, rows)
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
            combined=_APPEND_ONE[prompt],
            bump=_BUMPS[(True, prompt)],
            then=_INSERT_ONE_AFTER_BUMP,
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
        return (await conn.execute(_THREAD_BY_ID, {"tid": thread_id})).first() is not None

    # --- ThreadTurnReader ------------------------------------------------------------------

    async def load_thread_for_turn(
        self, query: ThreadTurnQuery, *, tx: Transaction | None = None
    ) -> ThreadTurnPage | None:
        """The page `query` asks for (see `turn_read`), the title, whether the thread was ever
        answered and, with `after_summary`, its newest summary, in one round trip. None for an
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
        at = _positions(stmt)
        first = rows[0]
        offset = PAGE_AT + (len(_SUMMARY_COLS) if query.after_summary else 0)
        rebuild, tid = self.message_cache.message, query.thread_id
        page = [rebuild(tid, r, offset) for r in rows if r[offset] is not None]
        summary = None
        if query.after_summary and first[at["summary_covers_through_seq"]] is not None:
            summary = ThreadSummary(**{c: first[at[f"summary_{c}"]] for c in _SUMMARY_COLS})
        boundary = summary.covers_through_seq if summary is not None else 0
        next_seq = page[0].seq if page and page[0].seq is not None else first[at["last_seq"]] + 1
        last = rows[-1]
        return ThreadTurnPage(
            messages=page,
            title=first[at["title"]],
            has_assistant_message=bool(first[at["answered"]]),
            summary=summary,
            skipped=max(0, next_seq - boundary - 1),
            tokens_before=int(first[at["page_tokens_before"]] or 0),
            last_prompt=last[at["last_prompt"]],
            reported_tokens=last[at["last_reported_tokens"]],
        )

    # --- SummaryStore ----------------------------------------------------------------------

    async def latest_summary(self, thread_id: str) -> ThreadSummary | None:
        async with wrap_db_errors("latest_summary"), self._reader.connect() as conn:
            row = (await conn.execute(_LATEST_SUMMARY, {"tid": thread_id})).one_or_none()
        return None if row is None else ThreadSummary(**row._mapping)

    async def save_summary(
        self, thread_id: str, summary: ThreadSummary, *, tx: Transaction | None = None
    ) -> None:
        """INSERT ... ON CONFLICT DO NOTHING on (thread_id, covers_through_seq): a fold that is
        replayed after a crash finds its row and leaves it as the first attempt wrote it."""
        values = {"thread_id": thread_id, **summary.model_dump(include=set(_SUMMARY_COLS))}
        dialect = postgresql if self._engine.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(thread_summaries).values(values).on_conflict_do_nothing()
        async with writing(self._engine, tx, "save_summary") as conn:
            await conn.execute(stmt)

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        async with wrap_db_errors("messages_after"), self._reader.connect() as conn:
            rows = (
                await conn.execute(
                    _MESSAGES_AFTER, {"tid": thread_id, "after": after_seq, "n": limit}
                )
            ).all()
        return [from_row(r) for r in rows]

    async def list_threads(
        self, actor_id: str, *, limit: int, offset: int = 0
    ) -> list[ThreadListing]:
        """The actor's threads, newest activity first: one range of the `(actor_id,
        updated_at)` index."""
        stmt = (
            sa.select(
                threads.c.id,
                threads.c.agent,
                threads.c.title,
                threads.c.last_seq,
                threads.c.created_at,
                threads.c.updated_at,
            )
            .where(threads.c.actor_id == actor_id)
            .order_by(threads.c.updated_at.desc(), threads.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        async with wrap_db_errors("list_threads"), self._reader.connect() as conn:
            rows = (await conn.execute(stmt)).all()
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


def _check_title(title: str | None) -> None:
    if title is not None:
        reason = unstorable_text(Message(role="user", content=title))
        if reason is not None:
            raise InvalidContent(reason.replace("message text", "title"))


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
