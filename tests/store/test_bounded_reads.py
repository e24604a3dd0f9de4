"""Every bounded read on SQLite and PostgreSQL: token budgets, runs and the summary boundary.

The in-memory definition (`bounded_agents.core.reads.bounded_page`) is the contract: the SQL
statement must return exactly its page for every query shape, and read no row outside it.
"""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa

from bounded_agents.core.history import runs_window, split_runs, window_history
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    ThreadSummary,
    ThreadTurnPage,
    ThreadTurnQuery,
)
from bounded_agents.core.reads import bounded_page
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import messages
from bounded_agents.store.sql import aware_utc, turn_read
from tests.store.conftest import ContractStore
from tests.store.test_store import captured_sql

CTX = HistoryPolicyContext(thread_id="t", agent="a", actor_id="u", run_id="r")


def transcript(rng: random.Random, n: int) -> list[Message]:
    """Random runs: a user message, sometimes tool exchanges, an answer; sizes vary a lot, and
    some history is run-less (imported) or starts with an assistant greeting."""
    out: list[Message] = []
    if rng.random() < 0.3:
        out.append(Message(role="assistant", content="hello " * rng.randint(1, 30)))
    run = 0
    while len(out) < n:
        run += 1
        rid = None if rng.random() < 0.2 else f"run-{run}"
        out.append(Message(role="user", content="q" * rng.randint(1, 400), run_id=rid))
        # A run stores one answer, carrying its tool exchanges; imported (run-less) history may
        # hold several assistant messages in a row.
        calls = [
            ToolCall(id=f"c{run}-{k}", name="look", arguments={"k": k})
            for k in range(rng.choice([0, 0, 1, 2]))
        ]
        results = [ToolResult(call_id=c.id, content="r" * rng.randint(0, 2000)) for c in calls]
        answers = 1 if rid is not None else rng.choice([1, 2])
        for _ in range(answers):
            out.append(
                Message(
                    role="assistant",
                    content="a" * rng.randint(1, 600),
                    tool_calls=calls,
                    tool_results=results,
                    run_id=rid,
                )
            )
    return out[:n]


async def _thread(store: ContractStore | SqlAgentStore, msgs: list[Message]) -> str:
    thread = await store.create_thread(actor_id="alice", agent="helper", title="t")
    # Appended in several batches, as turns do: the running token sum spans appends.
    for start in range(0, len(msgs), 7):
        await store.append_messages(thread.id, msgs[start : start + 7])
    return thread.id


def _timeless(page: ThreadTurnPage) -> ThreadTurnPage:
    """The page without `previous_at`: messages carry no times in memory, so the in-memory
    contract leaves it None (its own test is below)."""
    return page.model_copy(update={"previous_at": None})


def _queries(rng: random.Random, tid: str) -> list[ThreadTurnQuery]:
    out = []
    for _ in range(12):
        out.append(
            ThreadTurnQuery(
                thread_id=tid,
                message_limit=rng.choice([None, 0, 1, 3, 10, 100]),
                token_limit=rng.choice([None, 0, 5, 40, 300, 2000, 10**6]),
                run_limit=rng.choice([None, 1, 2, 5]),
                widest=rng.random() < 0.5,
                after_summary=rng.random() < 0.5,
                count_unread=rng.random() < 0.5,
            )
        )
    return out


@pytest.mark.parametrize("seed", range(6))
async def test_every_query_shape_returns_exactly_the_in_memory_page(
    sql_store: SqlAgentStore, seed: int
) -> None:
    rng = random.Random(seed)
    msgs = transcript(rng, rng.randint(0, 60))
    tid = await _thread(sql_store, msgs)
    summary = None
    if msgs and rng.random() < 0.7:
        summary = ThreadSummary(text="so far", covers_through_seq=rng.randint(0, len(msgs)))
        await sql_store.save_summary(tid, summary)
    thread = await sql_store.get_thread(tid)
    assert thread is not None
    for query in _queries(rng, tid):
        with captured_sql(sql_store) as statements:
            page = await sql_store.load_thread_for_turn(query)
        assert page is not None
        assert _timeless(page) == bounded_page(thread, query, summary), query
        # one round trip, whatever the shape; and when a summarizing read skipped seqs (a
        # backlog past its bound, or an erased gap), one count of the messages they hold
        counted = bool(query.after_summary and query.count_unread and page.skipped)
        assert len(statements) == 1 + counted, statements
        assert (page.unread is not None) == counted


@pytest.mark.parametrize("seed", range(4))
async def test_the_token_bounded_read_is_exactly_what_a_token_window_keeps(
    sql_store: SqlAgentStore, seed: int
) -> None:
    """The store cuts by the stored estimates; `select` over all of it would keep the same."""
    rng = random.Random(100 + seed)
    msgs = transcript(rng, 80)
    tid = await _thread(sql_store, msgs)
    thread = await sql_store.get_thread(tid)
    assert thread is not None
    for budget in (1, 50, 400, 1500, 6000):
        policy = window_history(max_messages=None, max_tokens=budget)
        assert policy.read_bound is not None and policy.read_bound.tokens == budget
        page = await sql_store.load_thread_for_turn(
            ThreadTurnQuery(thread_id=tid, token_limit=budget)
        )
        assert page is not None
        whole = policy.select(thread.messages, CTX)
        assert page.messages == whole.keep, budget
        assert policy.select(page.messages, CTX).keep == whole.keep
        assert page.skipped == len(whole.drop)


async def test_a_token_read_of_a_long_thread_fetches_only_its_window(
    sql_store: SqlAgentStore,
) -> None:
    msgs = [Message(role="user", content="x" * 36) for _ in range(3000)]  # 13 tokens each
    tid = await _thread(sql_store, msgs)
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, token_limit=130))
    assert page is not None
    assert len(page.messages) == 10 and page.skipped == 2990
    assert [m.seq for m in page.messages] == list(range(2991, 3001))


async def test_runs_read_never_splits_a_run_and_reads_only_those_runs(
    sql_store: SqlAgentStore,
) -> None:
    rng = random.Random(7)
    msgs = transcript(rng, 120)
    tid = await _thread(sql_store, msgs)
    thread = await sql_store.get_thread(tid)
    assert thread is not None
    runs = split_runs(thread.messages)
    for n in (1, 2, 3, 10):
        page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, run_limit=n))
        assert page is not None
        expected = [m for run in runs[-n:] for m in run]
        assert page.messages == expected, "whole runs, and nothing older is read"
        assert page.messages[0].role == "user" or len(runs) <= n
        assert runs_window(n).select(page.messages, CTX).keep == expected


async def test_after_summary_reads_past_the_boundary_and_returns_the_newest_summary(
    sql_store: SqlAgentStore,
) -> None:
    msgs = [Message(role="user", content=f"m{i}") for i in range(1, 31)]
    tid = await _thread(sql_store, msgs)
    await sql_store.save_summary(tid, ThreadSummary(text="first", covers_through_seq=10))
    await sql_store.save_summary(tid, ThreadSummary(text="second", covers_through_seq=20))
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, after_summary=True))
    assert page is not None and page.summary is not None
    assert (page.summary.text, page.summary.covers_through_seq) == ("second", 20)
    assert [m.seq for m in page.messages] == list(range(21, 31))
    bounded = await sql_store.load_thread_for_turn(
        ThreadTurnQuery(thread_id=tid, message_limit=4, after_summary=True)
    )
    assert bounded is not None
    assert [m.seq for m in bounded.messages] == [27, 28, 29, 30]
    assert bounded.skipped == 6, "the unsummarized messages the read left out"


async def test_saving_a_summary_twice_keeps_the_first_and_writes_one_row(
    store: ContractStore,
) -> None:
    tid = await _thread(store, [Message(role="user", content="hi")])
    first = ThreadSummary(text="made once", covers_through_seq=1, model="echo", prompt_tokens=9)
    await store.save_summary(tid, first)
    await store.save_summary(tid, first.model_copy(update={"text": "a replay's copy"}))
    assert await store.latest_summary(tid) == first
    assert await store.latest_summary("no-such-thread") is None


async def test_messages_after_pages_a_backlog_oldest_first(store: ContractStore) -> None:
    tid = await _thread(store, [Message(role="user", content=f"m{i}") for i in range(1, 11)])
    page = await store.messages_after(tid, 3, 4)
    assert [(m.seq, m.content) for m in page] == [(4, "m4"), (5, "m5"), (6, "m6"), (7, "m7")]
    assert await store.messages_after(tid, 10, 4) == []


def _every_shape(tid: str, *, tokens: int) -> list[ThreadTurnQuery]:
    """One query of each shape a policy reads with: count, tokens, runs, after a summary (with
    a count and alone), any-limit (`widest`) and every-limit combinations."""
    return [
        ThreadTurnQuery(thread_id=tid, message_limit=10),
        ThreadTurnQuery(thread_id=tid, token_limit=tokens),
        ThreadTurnQuery(thread_id=tid, run_limit=3),
        ThreadTurnQuery(thread_id=tid, message_limit=15, after_summary=True),
        ThreadTurnQuery(thread_id=tid, after_summary=True),
        ThreadTurnQuery(thread_id=tid, token_limit=tokens * 3 // 2, run_limit=5, widest=True),
        ThreadTurnQuery(thread_id=tid, message_limit=10, token_limit=tokens * 3 // 2),
    ]


@pytest.mark.postgres
async def test_postgres_plans_every_read_shape_as_an_index_range_not_a_scan(
    postgres_url: str,
) -> None:
    """With planner statistics of a long thread, the page of every query shape is read by an
    index range on (thread_id, seq) (or a bitmap over it), never by scanning the thread."""
    from tests.conftest import emptied_store

    async with emptied_store(postgres_url) as store:
        tid = await _thread(store, [Message(role="user", content=f"m{i}") for i in range(3000)])
        await store.save_summary(tid, ThreadSummary(text="s", covers_through_seq=2990))
        async with store.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")
        for query in _every_shape(tid, tokens=200):
            stmt, params = turn_read(query)
            sql = stmt.params(**params).compile(
                dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}
            )
            async with store.engine.connect() as conn:
                plan = [r[0] for r in await conn.exec_driver_sql(f"EXPLAIN {sql}")]
            text = "\n".join(plan)
            assert "Seq Scan on messages page" not in text, text
            assert "pk_messages" in text, text  # the (thread_id, seq) key


@pytest.mark.postgres
async def test_postgres_keeps_the_index_range_when_one_long_thread_fills_the_table(
    postgres_url: str,
) -> None:
    """The plan must not hinge on the planner's guess at the page's size. The floor comes from
    the thread row, a value the planner cannot see: it used to guess a third of the thread,
    and for a thread holding most of the table (one user's long thread, a new deployment) a
    third of the thread cost more by index than reading the table, so every turn read the
    whole thread (25 ms against 0.07 at 100,000 messages in the bench; 2 ms here at 10,000).
    Seeded as the bench seeds (8 KB tool results stored out of line, so the rows are narrow and
    the table looks cheap to read)."""
    from bench.data import build_thread
    from tests.conftest import emptied_store

    async with emptied_store(postgres_url) as store:
        for length in (100, 1_000):
            await build_thread(store, length)
        tid, _ = await build_thread(store, 10_000)
        await store.save_summary(tid, ThreadSummary(text="s", covers_through_seq=9_990))
        async with store.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")
        shapes = _every_shape(tid, tokens=2000)
        # The statement as asyncpg prepares it, planned both ways: a custom plan knows the
        # thread id, the generic one (what a prepared statement settles on) does not.
        async with store.engine.connect() as conn:
            for mode in ("force_custom_plan", "force_generic_plan"):
                await conn.exec_driver_sql(f"SET plan_cache_mode = {mode}")
                for query in shapes:
                    stmt, params = turn_read(query)
                    sql = stmt.compile(dialect=store.engine.dialect)
                    values = {**sql.params, **params}
                    args = tuple(values[name] for name in sql.positiontup or [])
                    found = await conn.exec_driver_sql(f"EXPLAIN ANALYZE {sql}", args)
                    plan = [r[0] for r in found]
                    text = "\n".join([mode, repr(query), *plan])
                    assert "Seq Scan on messages" not in text, text
                    removed = sum(
                        int(line.rsplit(":", 1)[1]) for line in plan if "Rows Removed" in line
                    )
                    assert removed < 100, text  # no part of the thread read only to be dropped


@pytest.mark.parametrize("seed", range(3))
async def test_a_hysteresis_window_over_the_bounded_read_cuts_where_the_whole_thread_does(
    sql_store: SqlAgentStore, seed: int
) -> None:
    """Turn after turn, the store's page (at most the high mark) equals the in-memory page,
    with where it starts (`skipped`, `tokens_before`), and `select` over it keeps exactly what
    it keeps over the whole thread."""
    rng = random.Random(300 + seed)
    msgs = transcript(rng, 70)
    policies = [
        window_history(max_messages=12, min_messages=5),
        window_history(max_messages=None, max_tokens=1500, min_tokens=600),
        window_history(max_messages=20, min_messages=8, max_tokens=2500, min_tokens=1000),
    ]
    thread = await sql_store.create_thread(actor_id="alice", agent="helper", title="t")
    for m in msgs:
        await sql_store.append_messages(thread.id, [m])
        if m.role != "user":
            continue
        whole = await sql_store.get_thread(thread.id)
        assert whole is not None
        for policy in policies:
            query = ThreadTurnQuery.of(thread.id, policy.read_bound, after_summary=False)
            page = await sql_store.load_thread_for_turn(query)
            assert page is not None
            assert _timeless(page) == bounded_page(whole, query), policy
            ctx = CTX.model_copy(
                update={"skipped": page.skipped, "tokens_before": page.tokens_before}
            )
            assert policy.select(page.messages, ctx).keep == policy.select(whole.messages, CTX).keep


async def test_the_last_prompt_digest_is_written_with_the_answer_and_read_with_the_turn(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper", title="t")
    await sql_store.append_messages(thread.id, [Message(role="user", content="q")])
    query = ThreadTurnQuery(thread_id=thread.id, message_limit=10)
    assert (await sql_store.load_thread_for_turn(query)).last_prompt is None  # type: ignore[union-attr]
    await sql_store.append_answer(thread.id, [Message(role="assistant", content="a")], "AAAAAAAA")
    await sql_store.append_messages(thread.id, [Message(role="user", content="q2")])
    with captured_sql(sql_store) as statements:
        page = await sql_store.load_thread_for_turn(query)
    assert page is not None and page.last_prompt == "AAAAAAAA"
    assert len(statements) == 1, "the digest comes with the turn read"
    empty = await sql_store.load_thread_for_turn(query.model_copy(update={"message_limit": 0}))
    assert empty is not None and empty.last_prompt == "AAAAAAAA"
    assert await sql_store.last_prompt(thread.id) == "AAAAAAAA"
    whole = await sql_store.get_thread(thread.id)
    assert whole is not None and [m.seq for m in whole.messages] == [1, 2, 3]


async def test_the_turn_read_says_when_the_message_before_the_newest_was_stored(
    sql_store: SqlAgentStore,
) -> None:
    """How long a thread sat idle comes with the turn read (one round trip, no new one): the
    stored time of the message before the newest (the turn's own user message), and None
    when the page does not hold it."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper", title="t")
    await sql_store.append_messages(thread.id, [Message(role="user", content="q")])
    query = ThreadTurnQuery(thread_id=thread.id, message_limit=10)
    alone = await sql_store.load_thread_for_turn(query)
    assert alone is not None and alone.previous_at is None, "no message before the newest"
    await sql_store.append_messages(thread.id, [Message(role="assistant", content="a")])
    await sql_store.append_messages(thread.id, [Message(role="user", content="q2")])
    async with sql_store.engine.connect() as conn:
        stored = (
            await conn.execute(
                sa.select(messages.c.created_at).where(
                    messages.c.thread_id == thread.id, messages.c.seq == 2
                )
            )
        ).scalar_one()
    for limit in (2, 10, None):
        with captured_sql(sql_store) as statements:
            page = await sql_store.load_thread_for_turn(
                query.model_copy(update={"message_limit": limit})
            )
        assert page is not None and page.previous_at == aware_utc(stored), limit
        assert page.previous_at is not None and page.previous_at.tzinfo is not None
        assert len(statements) == 1, "the time rides on the turn read"
    newest_only = await sql_store.load_thread_for_turn(
        query.model_copy(update={"message_limit": 1})
    )
    assert newest_only is not None and newest_only.previous_at is None
