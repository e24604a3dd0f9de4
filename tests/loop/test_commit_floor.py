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
@pytest.mark.xfail(strict=True, reason="issue 37: today 3 + 1 per round (+1 more with refolds)")
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("rounds", [0, 1, 2])
async def test_a_turn_commits_two_plus_one_per_tool_round(
    env: LoopEnv, policy: str, rounds: int
) -> None:
    assert await _commits_of_a_turn(env, POLICIES[policy](), rounds) == 2 + rounds
