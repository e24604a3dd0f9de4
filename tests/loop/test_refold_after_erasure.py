"""A refolding policy (summarizing_runs_window) on a thread with an erased message in its kept
runs. The mid-run refold numbered the kept messages as if their seqs had no gap, so its summary
claimed to cover a message it was never handed (and the summarizer got another twice): that
message was then in no later prompt and not in the summary, a silent loss (attack round 4).
`load:thread` recorded the kept seqs when they had a gap (`keep_seqs`); since issue 37's sixth
round it names every kept message by its seq (`keep_refs`), gaps and all."""

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


def test_a_refolding_window_carries_the_real_seqs_of_owed_messages_riding_before_it() -> None:
    """A fold owed and not made (summary through 4, owed through 8): the newest owed messages
    ride before the kept ones, and a refold must fold them by their own seqs (a review found
    them numbered None, so a refold's boundary fell to 0 and they left the prompt unfolded)."""
    from bounded_agents.core.ports import ThreadSummary
    from bounded_agents.core.turn.kept import kept_messages
    from bounded_agents.core.turn.prompt import opening_prompt
    from bounded_agents.core.turn.public import AgentDefinition

    async def unused(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        raise AssertionError("not called")

    policy = summarizing_runs_window(unused, token_threshold=300, keep_recent_runs=1)
    definition = AgentDefinition(name="a", system_prompt="s", policy=policy)
    msgs = [
        Message(role="user" if i % 2 else "assistant", content=f"m{i}", seq=i) for i in range(1, 11)
    ]
    load = {
        "keep": [m.model_dump(mode="json", exclude={"seq", "run_id"}) for m in msgs[8:]],
        "summary": {"text": "S", "covers_through_seq": 4},
        "fold": {"through": 8, "messages": [m.model_dump(mode="json") for m in msgs[4:8]]},
    }
    summary = ThreadSummary(text="S", covers_through_seq=4)

    kept = kept_messages(load, {}, 10)  # a journal written before `keep_refs`
    prompt, window, omitted, _ = opening_prompt(definition, load, summary, kept=kept, user_seq=10)

    assert window is not None
    assert [m.content for m in prompt[-4:]] == ["m7", "m8", "m9", "m10"]
    assert [(m.content, m.seq) for m in window.keep] == [
        ("m7", 7),
        ("m8", 8),
        ("m9", 9),
        ("m10", 10),
    ]
    assert omitted == 2  # m5 and m6: owed, past the cap, said so in the prompt
    count = policy.refold_count(window.keep, 10**6)
    assert window.keep[count - 1].seq == 8
