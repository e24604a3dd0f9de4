"""A refolding policy written against the declared protocols alone, run by the unchanged loop.

Its rule is its own (fold all but the newest two kept messages once more than `limit` are
kept), nothing like `SummarizingRunsWindow`'s token threshold: the loop asks it "refold?"
(`RefoldingPolicy.refold_count`) and knows none of its fields.
"""

from __future__ import annotations

from collections.abc import Sequence

from bounded_agents.core.history.powers import supports_refolding
from bounded_agents.core.messages import Message, ToolCall
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    ReadBound,
    Usage,
)
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv


class KeepAtMost:
    """Keeps everything at load; between model calls, refolds past `limit` kept messages."""

    read_bound: ReadBound | None = None

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.asked: list[int] = []

    async def summarize(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(
            text=f"- {len(messages)} messages folded",
            usage=Usage(prompt_tokens=20, completion_tokens=4),
        )

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=list(messages), drop=[])

    def refold_count(self, kept: Sequence[Message], history_tokens: int) -> int:
        self.asked.append(len(kept))
        return len(kept) - 2 if len(kept) > self.limit else 0


async def _echo(q: str) -> str:
    return f"found {q}"


async def _run(env: LoopEnv, policy: KeepAtMost) -> tuple[list[str], ScriptedProvider]:
    history = [user("q1", "r1"), assistant("a1", "r1"), user("q2", "r2"), assistant("a2", "r2")]
    tid = await env.thread(history)
    call = ToolCall(id="c1", name="find", arguments={"q": "x"})
    model = ScriptedProvider([reply(tool_calls=[call]), reply("done")])
    loop = env.loop(model, policy, tools={"find": FunctionTool("find", _echo)})
    await loop.run_turn(agent="helper", thread_id=tid, actor_id="alice", content="q3", run_id="r3")
    return await env.step_names("r3"), model


def test_the_custom_policy_declares_the_refolding_power() -> None:
    assert supports_refolding(KeepAtMost(limit=3))


@SQL_JOURNAL_ONLY
async def test_a_custom_refolding_policy_refolds_mid_run_when_its_own_rule_says(
    env: LoopEnv,
) -> None:
    policy = KeepAtMost(limit=3)
    steps, model = await _run(env, policy)
    assert steps.index("model:1") < steps.index("history:summarize") < steps.index("model:2")
    assert policy.asked == [5], "asked once, before the second model call, with 5 kept"
    second = [m.content for m in model.calls[1].messages]
    assert any("3 messages folded" in c for c in second), second
    assert "q1" not in second and "q2" not in second


@SQL_JOURNAL_ONLY
async def test_a_custom_refolding_policy_whose_rule_says_no_folds_nothing(env: LoopEnv) -> None:
    policy = KeepAtMost(limit=10)
    steps, _ = await _run(env, policy)
    assert not any(s.startswith("history:summarize") for s in steps)
    assert policy.asked == [5]
