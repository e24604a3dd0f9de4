"""Commits per turn at the durable floor (issue 37), counted at the engine (SQLAlchemy's `commit`
event on the store's engine: every transaction the store, the SQL journal and the ledger commit
goes through it), on SQLite and PostgreSQL, for every history policy.

The floor: the user's message durable before the first model call (1 commit), each tool round's
results durable before the next model call (1 commit per round, carrying the model step that
asked for the tools), the answer and the run's end at the end (1 commit, carrying the last model
step). A plain turn is 2 commits, a turn with tools 2 + its tool rounds.

The DBOS runtime is not held to it: its steps commit in DBOS's own system database, outside
the store's engine (docs/reliability.md states its floor, measured by the last test here).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event

from bounded_agents.core.history import (
    HistoryPolicy,
    summarizing_runs_window,
    window_history,
)
from bounded_agents.core.messages import ToolCall
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, CountingSummarizer, LoopEnv

POLICIES: dict[str, Callable[[], HistoryPolicy]] = {
    "window": lambda: window_history(max_messages=10),
    "tokens": lambda: window_history(max_messages=None, max_tokens=4000),
    "summarizing": lambda: window_history(max_messages=10, summarize=CountingSummarizer()),
    "summarizing_runs": lambda: summarizing_runs_window(
        CountingSummarizer(), token_threshold=50_000, keep_recent_runs=4
    ),
}


async def _lookup(q: str) -> str:
    return f"found {q}"


def _script(rounds: int) -> ScriptedProvider:
    """`rounds` model steps each asking for two tool calls, then the answer."""
    steps = [
        reply(
            "",
            tool_calls=[
                ToolCall(id=f"c{r}{i}", name="lookup", arguments={"q": f"{r}{i}"}) for i in range(2)
            ],
        )
        for r in range(rounds)
    ]
    return ScriptedProvider([*steps, reply("done")])


async def _commits_of_a_turn(env: LoopEnv, policy: HistoryPolicy, rounds: int) -> int:
    tid = await env.thread([user("q0"), assistant("a0")])
    loop = env.loop(_script(rounds), policy, tools={"lookup": FunctionTool("lookup", _lookup)})
    commits = [0]

    def on_commit(_conn: Any) -> None:
        commits[0] += 1

    sync = env.store.engine.sync_engine
    event.listen(sync, "commit", on_commit)
    try:
        result = await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=str(uuid.uuid4())
        )
    finally:
        event.remove(sync, "commit", on_commit)
    assert result.message.content == "done"
    assert len(result.message.tool_results) == 2 * rounds
    return commits[0]


@SQL_JOURNAL_ONLY
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("rounds", [0, 1, 2])
async def test_a_turn_commits_two_plus_one_per_tool_round(
    env: LoopEnv, policy: str, rounds: int
) -> None:
    assert await _commits_of_a_turn(env, POLICIES[policy](), rounds) == 2 + rounds


@pytest.mark.parametrize("runtime_name", ["dbos"])
@pytest.mark.parametrize("rounds", [0, 1, 2])
async def test_under_dbos_a_turn_commits_its_own_floor(env: LoopEnv, rounds: int) -> None:
    """DBOS's floor, stated (it is not the SQL journal's: nothing is shared with its steps):
    the store's engine commits 9 + 4 per tool round of two calls (each write on its own: the
    run row, the message, the lease, the quota hold and booking of each model call, the
    answer, the run's end), and DBOS's system database at least 12 + 6 per round (each step's
    output and the workflow's own rows; its queue threads may add more meanwhile)."""
    from sqlalchemy.engine import Engine

    commits = {"store": 0, "dbos": 0}
    store_engine = env.store.engine.sync_engine

    def on_commit(conn: Any) -> None:
        commits["store" if conn.engine is store_engine else "dbos"] += 1

    tid = await env.thread([user("q0"), assistant("a0")])
    loop = env.loop(
        _script(rounds), POLICIES["window"](), tools={"lookup": FunctionTool("lookup", _lookup)}
    )
    event.listen(Engine, "commit", on_commit)
    try:
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=str(uuid.uuid4())
        )
    finally:
        event.remove(Engine, "commit", on_commit)
    assert commits["store"] == 9 + 4 * rounds, commits
    assert commits["dbos"] >= 12 + 6 * rounds, commits


@SQL_JOURNAL_ONLY
async def test_a_model_step_riding_in_a_failed_answer_unit_is_booked_once(env: LoopEnv) -> None:
    """The answer's unit (the last model step, the answer, the run's end) fails at the run's
    end once: the model step and its ledger row are committed on their own, the answer then
    stores alone, and the run's report and the ledger each hold the call once."""
    from sqlalchemy import exc

    from bounded_agents.store.schema import ledger

    def fail(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        # Inside: on PostgreSQL the run's end and the unit's journal rows are one statement.
        if "UPDATE runs SET status" in statement and "report=" in statement and not failed:
            failed.append(1)
            orig = conn.dialect.loaded_dbapi.OperationalError("injected: disk I/O error")
            raise exc.OperationalError(statement, None, orig)

    failed: list[int] = []
    tid = await env.thread([user("q0"), assistant("a0")])
    run_id = str(uuid.uuid4())
    sync = env.store.engine.sync_engine
    event.listen(sync, "before_cursor_execute", fail)
    try:
        result = await env.loop(_script(0), POLICIES["window"]()).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=run_id
        )
    finally:
        event.remove(sync, "before_cursor_execute", fail)
    assert failed == [1] and result.message.content == "done"
    assert len(result.report.ledger) == 1
    async with env.store.engine.connect() as conn:
        rows = await conn.execute(
            ledger.select().with_only_columns(ledger.c.id).where(ledger.c.run_id == run_id)
        )
        assert len(rows.all()) == 1
    assert (await env.step_names(run_id)).count("model:1") == 1


@SQL_JOURNAL_ONLY
async def test_a_turn_that_moves_the_learned_token_ratio_adds_one_commit_and_the_next_none(
    env: LoopEnv,
) -> None:
    """Issue 39's saved token ratios: a turn whose model reported more tokens than the
    estimate (a learned ratio above 1) saves it after the turn, one commit of its own; the
    next turn, the ratio unmoved, is at the floor again. (The scripted model above reports
    fewer tokens than the estimate: a ratio the loop never applies, never saved.)"""
    tid = await env.thread([user("q0"), assistant("a0")])
    counting = [
        reply(f"a{i}", prompt_tokens=4000) for i in range(2)
    ]  # far above the estimate: ratio 4.0 (clamped)
    loop = env.loop(ScriptedProvider(counting), POLICIES["window"]())
    commits = [0]

    def on_commit(_conn: Any) -> None:
        commits[0] += 1

    sync = env.store.engine.sync_engine
    event.listen(sync, "commit", on_commit)
    per_turn = []
    try:
        for _ in range(2):
            before = commits[0]
            await loop.run_turn(
                agent="helper",
                thread_id=tid,
                actor_id="alice",
                content="go " + "word " * 300,  # over MIN_SAMPLE_TOKENS: it teaches
                run_id=str(uuid.uuid4()),
            )
            per_turn.append(commits[0] - before)
    finally:
        event.remove(sync, "commit", on_commit)
    assert per_turn == [2 + 1, 2], per_turn
    assert await env.ledger.load_ratios() == {"scripted": 4.0}
