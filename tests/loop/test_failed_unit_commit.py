"""A tool round whose commit fails (the database refuses a row, or goes away at COMMIT) after
the model call that asked for the tools returned: that call was paid for, so its ledger row is
booked on its own and the actor's total equals its ledger (attack round 6: the row rolled back
with the unit and was never booked, and the call's reservation stayed on the actor's total)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import ToolCall
from bounded_agents.durable import journal_rows
from bounded_agents.errors import RunFailed, StoreError
from bounded_agents.store import tx as tx_module
from bounded_agents.store.schema import actor_usage, ledger
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv


async def look(q: str) -> str:
    return "found"


async def _ledger(env: LoopEnv) -> tuple[list[Any], int]:
    """(the ledger's rows as (prompt, completion) tokens, alice's total)."""
    async with env.store.engine.connect() as conn:
        booked = (
            await conn.execute(sa.select(ledger.c.prompt_tokens, ledger.c.completion_tokens))
        ).all()
        total = await conn.scalar(
            sa.select(actor_usage.c.tokens).where(actor_usage.c.actor_id == "alice")
        )
    return list(booked), int(total or 0)


@SQL_JOURNAL_ONLY
async def test_a_failed_tool_round_commit_books_the_paid_call_alone(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = journal_rows.SqlUnit.commit
    failed: list[bool] = []

    async def fails_once(self: journal_rows.SqlUnit, steps: list[tuple[int, str, str]]) -> None:
        if any(name.startswith("tool:") for _, name, _ in steps) and not failed:
            failed.append(True)
            await self.rollback()
            raise StoreError("journal_unit: the database went away at COMMIT")
        await real(self, steps)

    monkeypatch.setattr(journal_rows.SqlUnit, "commit", fails_once)
    tid = await env.thread([])
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})
    model = ScriptedProvider([reply("", tool_calls=[call]), reply("done")])
    loop_tools = {"look": FunctionTool("look", look)}
    loop = env.loop(model, window_history(max_messages=10), quota=1_000_000, tools=loop_tools)

    with pytest.raises(RunFailed):
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=str(uuid.uuid4())
        )

    assert failed == [True] and len(model.calls) == 1
    booked, total = await _ledger(env)
    assert len(booked) == 1  # the one call that returned
    assert total == sum(int(p) + int(c) for p, c in booked)


@SQL_JOURNAL_ONLY
async def test_a_commit_that_landed_but_whose_answer_was_lost_is_taken_as_committed(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The COMMIT reached the server and committed, then the connection died before its reply
    (a network cut, a proxy restart): the driver raises, though every row of the unit is
    stored. Taken as a failed unit, the turn failed (RunFailed, after 1 of its 2 model
    calls) with its tool round stored, and the context's commit of what waited collided with
    the stored steps. The journal now reads whether the unit's last step is stored before it
    calls the unit failed: the turn answers, each call booked once."""
    real_commit = tx_module._commit
    real_unit_commit = journal_rows.SqlUnit.commit
    lost: list[bool] = []
    tool_round: list[bool] = []

    async def commit_then_lose_the_reply(connection: Any) -> None:
        await real_commit(connection)
        if tool_round == [True] and not lost:
            lost.append(True)
            # what SQLAlchemy raises when the driver's connection is gone at COMMIT
            died = sa.exc.DBAPIError(
                "COMMIT", None, ConnectionResetError(), connection_invalidated=True
            )
            raise StoreError("commit: database error (ConnectionDoesNotExistError)") from died

    async def unit_commit(self: journal_rows.SqlUnit, steps: list[tuple[int, str, str]]) -> None:
        tool_round[:] = [any(name.startswith("tool:") for _, name, _ in steps)]
        await real_unit_commit(self, steps)

    monkeypatch.setattr(tx_module, "_commit", commit_then_lose_the_reply)
    monkeypatch.setattr(journal_rows.SqlUnit, "commit", unit_commit)
    tid = await env.thread([])
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})
    model = ScriptedProvider([reply("", tool_calls=[call]), reply("done")])
    loop_tools = {"look": FunctionTool("look", look)}
    loop = env.loop(model, window_history(max_messages=10), quota=1_000_000, tools=loop_tools)

    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=str(uuid.uuid4())
    )

    assert lost == [True] and len(model.calls) == 2
    assert result.message.content == "done"
    booked, total = await _ledger(env)
    assert len(booked) == 2  # one row per call made, none twice
    assert total == sum(int(p) + int(c) for p, c in booked)
    thread = await env.store.get_thread(tid)
    assert thread is not None
    [question, answer] = thread.messages  # the answer holds its round: call and result
    assert (question.content, answer.content) == ("q", "done")
    assert [(r.call_id, r.content) for r in answer.tool_results] == [("c1", "found")]
