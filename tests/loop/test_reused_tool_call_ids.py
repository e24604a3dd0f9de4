"""A provider that reuses a tool-call id within a turn (local servers number calls per
response): the loop renames the repeat `<id>_<n>` before the calls run, so every call of the
turn has its own checkpoint and its own result on the stored answer. The renaming is a function
of the recorded model step, so a run resumed after a failure renames alike and runs no tool
twice (both journals)."""

from __future__ import annotations

import uuid

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import ToolCall
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.loop.conftest import LoopEnv


async def test_a_run_resumed_after_reused_ids_replays_each_call_once_under_its_new_id(
    env: LoopEnv,
) -> None:
    ran: list[str] = []

    async def note(text: str) -> str:
        ran.append(text)
        return f"noted {text}"

    tools = {"note": FunctionTool("note", note)}
    calls = [
        ToolCall(id="c1", name="note", arguments={"text": "a"}),
        ToolCall(id="c1", name="note", arguments={"text": "b"}),
    ]
    tid = await env.thread()
    run_id = str(uuid.uuid4())
    first = env.loop(
        ScriptedProvider([reply(tool_calls=calls), ProviderError("down")]),
        window_history(max_messages=5),
        tools=tools,
    )
    with pytest.raises(RunFailed):  # the model call after the tools fails the run
        await first.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=run_id
        )
    assert ran == ["a", "b"]
    steps = await env.step_names(run_id)
    assert [s for s in steps if s.startswith("tool:")] == ["tool:1:c1", "tool:1:c1_2"]

    answering = ScriptedProvider([reply("done")])
    second = env.loop(answering, window_history(max_messages=5), tools=tools)
    result = await second.resume(run_id)

    assert ran == ["a", "b"], "no tool ran again on the resume"
    message = result.message
    assert [c.id for c in message.tool_calls] == ["c1", "c1_2"]
    assert [(r.call_id, r.content) for r in message.tool_results] == [
        ("c1", "noted a"),
        ("c1_2", "noted b"),
    ]
    sent = answering.calls[0].messages
    assert [c.id for m in sent if m.role == "assistant" for c in m.tool_calls] == ["c1", "c1_2"]
    assert [(m.tool_call_id, m.content) for m in sent if m.role == "tool"] == [
        ("c1", "noted a"),
        ("c1_2", "noted b"),
    ]
