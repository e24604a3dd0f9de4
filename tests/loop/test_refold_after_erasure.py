"""A refolding policy (summarizing_runs_window) on a thread with an erased message in its kept
runs. The mid-run refold numbered the kept messages as if their seqs had no gap, so its summary
claimed to cover a message it was never handed (and the summarizer got another twice): that
message was then in no later prompt and not in the summary, a silent loss (attack round 4).
`load:thread` now records the kept seqs when they have a gap (`keep_seqs`)."""

from __future__ import annotations

import uuid

import pytest

from bounded_agents.core.history import HistoryPolicyContext, HistorySummary
from bounded_agents.core.history.runs import summarizing_runs_window
from bounded_agents.core.messages import Message, ToolCall
from bounded_agents.core.ports import Usage
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import LoopEnv

handed: list[list[str]] = []


async def recording(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    handed.append([m.content for m in messages])
    prior = ctx.summary.text + " " if ctx.summary else ""
    return HistorySummary(
        text=prior + " ".join(m.content for m in messages),
        usage=Usage(prompt_tokens=10, completion_tokens=3),
    )


async def look(q: str) -> str:
    return "r" * 2000  # about 500 tokens: the run's tool step reaches the threshold


@pytest.mark.parametrize("runtime_name", ["sql"])
async def test_a_refold_over_an_erased_gap_loses_no_message(env: LoopEnv) -> None:
    handed.clear()
    tid = await env.thread(
        [
            user("q0 alpha"),
            assistant("a0"),
            user("q1 beta"),
            assistant("a1"),
            user("q2 GAMMA-FACT"),
            assistant("a2"),
        ]
    )
    assert await env.store.delete_message(tid, 6)  # the newest answer is erased
    policy = summarizing_runs_window(recording, token_threshold=300, keep_recent_runs=2)
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})
    model = ScriptedProvider([reply("", tool_calls=[call]), reply("done"), reply("next")])
    loop = env.loop(model, policy, tools={"look": FunctionTool("look", look)})
    first = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=str(uuid.uuid4())
    )
    assert first.report.summary is not None and first.report.summary.made  # the refold ran
    await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="later", run_id=str(uuid.uuid4())
    )
    given = [c for chunk in handed for c in chunk]
    assert len(given) == len(set(given)), f"a message handed twice: {handed}"
    summarized = any("GAMMA-FACT" in c for c in given)
    next_prompt = [m.content[:80] for m in model.calls[-1].messages]
    in_prompt = any("GAMMA-FACT" in c for c in next_prompt)
    covered = first.report.summary.covers_through_seq
    assert summarized or in_prompt, (
        f"q2 (seq 5) lost: summary covers {covered}, summarizer was handed {handed}, "
        f"next prompt {next_prompt}"
    )
