"""The statements `SqlAgentStore` sends on a turn's path: the bounded turn read and the one-row
append, built once at import and reused with bind parameters.

The builders' comments carry the figures (plans, row counts) that chose each form; keep them with
the code they measure.
"""

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from bounded_agents.core.ports import (
    ThreadTurnQuery,
)
from bounded_agents.store.codec import MESSAGE_COLUMNS
from bounded_agents.store.schema import erased_threads, messages, thread_summaries, threads

_TID = sa.bindparam("tid", type_=sa.String)
_N = sa.bindparam("n", type_=sa.Integer)
_TOKENS = sa.bindparam("tokens", type_=sa.BigInteger)
_RUNS_OFFSET = sa.bindparam("runs_offset", type_=sa.Integer)
_AFTER = sa.bindparam("after", type_=sa.Integer)
MSG_COLS = [messages.c[name] for name in MESSAGE_COLUMNS]
SUMMARY_COLS = (
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
    return sa.select(*[thread_summaries.c[c] for c in SUMMARY_COLS]).where(
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
        columns += [newest.c[c].label(f"summary_{c}") for c in SUMMARY_COLS]
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
        # The thread's fold health (NULL while its folds never failed), on that one row too.
        sa.case(
            (sa.or_(page.c.seq.is_(None), page.c.seq == t.c.last_seq), t.c.fold_health),
            else_=sa.null(),
        ).label("fold_health"),
        # The thread's last activity before its newest message (in a turn: before the turn's
        # own user message), on that one row: how long the thread sat idle.
        sa.case((page.c.seq + 1 == t.c.last_seq, page.c.created_at), else_=sa.null()).label(
            "previous_at"
        ),
    ]
    return (
        sa.select(*columns)
        .select_from(source.outerjoin(page, on))
        .where(t.c.id == _TID)
        .order_by(page.c.seq)
    )


_TURN_READS: dict[tuple[bool, bool, bool, bool, bool], sa.Select[Any]] = {}
_POSITIONS: dict[int, tuple[sa.Select[Any], dict[str, int]]] = {}


def positions(stmt: sa.Select[Any]) -> dict[str, int]:
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
THREAD_BY_ID = sa.select(
    threads.c.id,
    threads.c.actor_id,
    threads.c.agent,
    threads.c.title,
    threads.c.created_at,
    threads.c.updated_at,
).where(threads.c.id == _TID)
COUNT_BETWEEN = sa.select(sa.func.count()).where(
    messages.c.thread_id == _TID,
    messages.c.seq > sa.bindparam("after"),
    messages.c.seq < sa.bindparam("before"),
)
"""How many messages a thread holds between two seqs, both excluded (the primary key's range:
one shard, one index range)."""
ERASED_THREAD = sa.select(erased_threads.c.id).where(erased_threads.c.id == _TID)
_BUMP_SEQ = (
    threads.update()
    .where(threads.c.id == _TID)
    .values(
        last_seq=threads.c.last_seq + _N,
        total_tokens=threads.c.total_tokens + _TOKENS,
        answered=sa.or_(threads.c.answered, _ANSWERS),
        updated_at=sa.func.current_timestamp(),
    )
    .returning(threads.c.last_seq, threads.c.total_tokens, threads.c.searchable)
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
    .returning(threads.c.last_seq, threads.c.total_tokens, threads.c.searchable)
)
"""`_BUMP_SEQ` for one message of a run, guarded by the (thread_id, run_id, role) unique index:
no row comes back when that message is already stored."""
_LAST_PROMPT_VALUES = {
    "last_prompt": sa.bindparam("last_prompt", type_=sa.Text),
    "last_reported_tokens": sa.bindparam("reported", type_=sa.BigInteger),
}
_BUMP_SEQ_AND_PROMPT = _BUMP_SEQ.values(**_LAST_PROMPT_VALUES)
"""The same bump, also remembering the thread's last prompt digest: an answer's append."""
LAST_PROMPT = sa.select(threads.c.last_prompt).where(threads.c.id == _TID)
REPORTED = sa.select(threads.c.last_reported_tokens).where(threads.c.id == _TID)
BUMPS = {
    (False, False): _BUMP_SEQ,
    (True, False): _BUMP_SEQ_ONCE,
    (False, True): _BUMP_SEQ_AND_PROMPT,
    (True, True): _BUMP_SEQ_ONCE.values(**_LAST_PROMPT_VALUES),
}
"""The seq bump by (one run message, with the last prompt digest)."""


def _typed(name: str, column: str) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=messages.c[column].type)


def _one_message_from(source: Any) -> sa.Select[Any]:
    """The row of a run's one message, its `seq`, `tokens_before` and `indexed` taken from
    `source` (the bumped thread row): it needs nothing the bump returns, so both may go out
    together, and the search index learns whether to take the row at no extra lookup."""
    return sa.select(
        _TID,
        source.c.last_seq,
        _typed("role", "role"),
        _typed("content", "content"),
        _typed("tool_calls", "tool_calls"),
        _typed("tool_results", "tool_results"),
        _typed("attachments", "attachments"),
        _typed("rid", "run_id"),
        _typed("search_text", "search_text"),
        _TOKENS,
        source.c.total_tokens - _TOKENS,
        source.c.searchable,
    )


_ONE_MESSAGE_COLS = [
    "thread_id",
    *MESSAGE_COLUMNS,
    "search_text",
    "tokens",
    "tokens_before",
    "indexed",
]
"""The columns `_one_message_from` selects, in its order."""


def _append_one_statement(bump: sa.Update) -> sa.Insert:
    """PostgreSQL: a run's one message and its seq bump as ONE statement, the bump a
    data-modifying CTE. No row back means the bump found no row (message stored already, or
    no thread), as for the two statements."""
    bumped = bump.cte("bumped")
    insert = messages.insert().from_select(_ONE_MESSAGE_COLS, _one_message_from(bumped))
    return insert.add_cte(bumped).returning(messages.c.seq)


ENCODED = ("content", "tool_calls", "tool_results", "attachments", "search_text")
"""A message's stored columns beyond what the bump already binds (`tid`, `rid`, `role`)."""
APPEND_ONE = {prompt: _append_one_statement(BUMPS[(True, prompt)]) for prompt in (False, True)}
"""PostgreSQL's one-statement append of a run's one message, by (with the last prompt)."""
INSERT_ONE_AFTER_BUMP = messages.insert().from_select(
    _ONE_MESSAGE_COLS,
    _one_message_from(threads).where(threads.c.id == _TID, sa.func.changes() == 1),
)
"""SQLite's second statement, sent in the bump's own worker-thread call
(`direct.write_together`): SQLite has no data-modifying CTE. `changes()` is the row count of
the connection's last completed write, the bump: when the bump found no row (the message is
stored already, or no thread) this inserts nothing."""
INSERT_MESSAGES = messages.insert()
ALL_MESSAGES = sa.select(*MSG_COLS).where(messages.c.thread_id == _TID).order_by(messages.c.seq)
LATEST_SUMMARY = _newest_summary()
MESSAGES_AFTER = (
    sa.select(*MSG_COLS)
    .where(messages.c.thread_id == _TID, messages.c.seq > _AFTER)
    .order_by(messages.c.seq)
    .limit(_N)
)


MESSAGES_AT = (
    sa.select(*MSG_COLS)
    .where(messages.c.thread_id == _TID, messages.c.seq.in_(sa.bindparam("seqs", expanding=True)))
    .order_by(messages.c.seq)
)
"""The thread's messages at some seqs (`HistorySearcher.messages_at`)."""


THREAD_LISTING = (
    sa.select(
        threads.c.id,
        threads.c.agent,
        threads.c.title,
        threads.c.last_seq,
        threads.c.created_at,
        threads.c.updated_at,
    )
    .where(threads.c.actor_id == sa.bindparam("actor"))
    .order_by(threads.c.updated_at.desc(), threads.c.id.desc())
    .limit(sa.bindparam("limit"))
    .offset(sa.bindparam("offset"))
)
"""An actor's threads, newest activity first: one range of the `(actor_id, updated_at)` index."""
RUN_MESSAGES = (
    sa.select(*MSG_COLS)
    .where(messages.c.thread_id == sa.bindparam("tid"), messages.c.run_id == sa.bindparam("rid"))
    .order_by(messages.c.seq)
)
"""The messages a run wrote, seq order: at most two rows, by the unique (thread_id, run_id,
role) index."""


__all__ = [
    "ALL_MESSAGES",
    "APPEND_ONE",
    "BUMPS",
    "COUNT_BETWEEN",
    "ENCODED",
    "ERASED_THREAD",
    "INSERT_MESSAGES",
    "INSERT_ONE_AFTER_BUMP",
    "LAST_PROMPT",
    "LATEST_SUMMARY",
    "MESSAGES_AFTER",
    "MESSAGES_AT",
    "MSG_COLS",
    "PAGE_AT",
    "REPORTED",
    "RUN_MESSAGES",
    "SUMMARY_COLS",
    "THREAD_BY_ID",
    "THREAD_LISTING",
    "TURN_READ_LIMITED",
    "positions",
    "turn_read",
]
