"""The golden journals: four turns' journals and prompts, byte for byte as recorded.

A journaled run is replayed by a later version of this code: every step's name and the exact
JSON text of its payload are persisted compatibility data, and so is what the model is sent
(a replay must send the same prompt). These fixtures were recorded from the loop BEFORE it was
split into the turn pipeline (issue 28), so a refactor that changes one byte of a journal or a
prompt fails here. They were recorded again once, on purpose, when `load:thread` began naming
its kept messages by seq (issue 37's sixth round): only that step's bytes changed, every prompt
and every other step stayed as recorded. The recordings from before are kept in
golden/before_keep_refs, and `test_golden_replay.py` resumes both kinds. Each turn runs on the
SQL journal over SQLite and over PostgreSQL against the same fixture: the stored JSON is the
same on both.

To record them again (only when a journal change is intended, and said so in the commit):

    AGENT_GOLDEN_RECORD=1 .venv/bin/pytest tests/loop/test_golden_journal.py -p no:cacheprovider

which rewrites tests/loop/golden/<turn>.json from the current code (the SQLite run writes, the
PostgreSQL run compares against what is there: run it twice if PostgreSQL came first).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bounded_agents.core.history import summarizing_runs_window, whole_thread, window_history
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySummary,
    ModelProvider,
    ToolSpec,
    Usage,
)
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv, ToolBinding

GOLDEN = Path(__file__).parent / "golden"
RECORD = os.environ.get("AGENT_GOLDEN_RECORD") == "1"


class RecordingSummarizer:
    """Answers every fold with what it covers, and keeps what it was handed."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.asked.append(
            {
                "messages": [m.model_dump(mode="json") for m in messages],
                "summary": ctx.summary.text if ctx.summary is not None else None,
                "summary_max_tokens": ctx.summary_max_tokens,
                "fold_task": ctx.fold_task,
            }
        )
        last = messages[-1].seq if messages else 0
        return HistorySummary(
            text=f"- the user asked {len(messages)} things through {last}",
            usage=Usage(prompt_tokens=40, completion_tokens=9),
        )


class Look:
    """A tool whose result is long enough to push a run past a refold threshold."""

    spec = ToolSpec(name="look", description="look", parameters={"type": "object"})

    async def invoke(self, arguments: dict[str, object]) -> ToolResult:
        return ToolResult(call_id="", content="seen " * 100)


def _history(runs: int, words: int) -> list[Message]:
    out: list[Message] = []
    for i in range(runs):
        out += [user(f"q{i} " * words, run_id=f"old-{i}"), assistant(f"a{i} " * words, f"old-{i}")]
    return out


async def _echo(q: str) -> str:
    return f"found {q}"


Turn = tuple[
    list[Message], HistoryPolicy, ModelProvider, dict[str, ToolBinding], RecordingSummarizer
]


def _plain() -> Turn:
    return _history(2, 3), whole_thread(), ScriptedProvider([reply("hello")]), {}, _summarizer()


def _one_tool() -> Turn:
    call = ToolCall(id="c1", name="find", arguments={"q": "x"})
    model = ScriptedProvider([reply(tool_calls=[call]), reply("found it")])
    tools: dict[str, ToolBinding] = {"find": FunctionTool("find", _echo, "find a thing")}
    return _history(1, 3), whole_thread(), model, tools, _summarizer()


def _folding() -> Turn:
    summarizer = _summarizer()
    policy = window_history(max_messages=4, summarize=summarizer, fold_messages=2)
    return _history(6, 5), policy, ScriptedProvider([reply("folded")]), {}, summarizer


def _refolding() -> Turn:
    summarizer = _summarizer()
    policy = summarizing_runs_window(
        summarize=summarizer, token_threshold=600, keep_recent_runs=1, fold_max_tokens=300
    )
    calls = [ToolCall(id=f"c{n}", name="look", arguments={}) for n in (1, 2, 3)]
    model = ScriptedProvider([reply(tool_calls=[c]) for c in calls] + [reply("refolded")])
    return _history(8, 30), policy, model, {"look": Look()}, summarizer


def _summarizer() -> RecordingSummarizer:
    return RecordingSummarizer()


TURNS: dict[str, Callable[[], Turn]] = {
    "plain": _plain,
    "one_tool": _one_tool,
    "folding": _folding,
    "refolding": _refolding,
}


async def _record(env: LoopEnv, build: Callable[[], Turn]) -> dict[str, Any]:
    history, policy, model, tools, summarizer = build()
    tid = await env.thread(history)
    loop = env.loop(model, policy, tools=tools)
    run_id = "golden-run"
    await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="and now?", run_id=run_id
    )
    assert isinstance(model, ScriptedProvider)
    model.assert_consumed()
    return {
        "steps": [
            {"name": name, "payload": payload.replace(tid, "<thread>")}
            for name, payload in await env.journal.steps(run_id)
        ],
        "prompts": [r.model_dump(mode="json") for r in model.calls],
        "summarizer": summarizer.asked,
    }


def _compare(name: str, got: dict[str, Any], writes: bool) -> None:
    path = GOLDEN / f"{name}.json"
    if RECORD and writes:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"no golden journal {path.name}: record it (see the docstring)"
    want = json.loads(path.read_text())
    assert [s["name"] for s in got["steps"]] == [s["name"] for s in want["steps"]]
    for mine, recorded in zip(got["steps"], want["steps"], strict=True):
        assert mine["payload"] == recorded["payload"], f"step {mine['name']} changed its bytes"
    assert got["prompts"] == want["prompts"], "the model is sent another prompt"
    assert got["summarizer"] == want["summarizer"], "the summarizer is handed something else"


@SQL_JOURNAL_ONLY
@pytest.mark.parametrize("name", list(TURNS))
async def test_each_golden_turn_journals_and_prompts_the_recorded_bytes(
    env: LoopEnv, db_url: str, name: str
) -> None:
    got = await _record(env, TURNS[name])
    _compare(name, got, writes=db_url.startswith("sqlite"))


def test_the_golden_turns_cover_a_tool_a_fold_and_a_mid_run_refold() -> None:
    steps = {
        name: [s["name"] for s in json.loads((GOLDEN / f"{name}.json").read_text())["steps"]]
        for name in TURNS
    }
    assert any(s.startswith("tool:1:") for s in steps["one_tool"])
    assert "history:summarize" in steps["folding"]
    assert any(s.startswith("history:summarize") for s in steps["refolding"])
    model_before_fold = steps["refolding"].index("model:1") < max(
        i for i, s in enumerate(steps["refolding"]) if s.startswith("history:summarize")
    )
    assert model_before_fold, "the refolding turn folds between its model calls"
