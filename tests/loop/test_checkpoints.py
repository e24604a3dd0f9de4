"""The journal's shape: checkpoint names as whole lists, and what load:thread records."""

from __future__ import annotations

import json
import uuid

import pytest

from bounded_agents.core.history import whole_thread, window_history
from bounded_agents.core.messages import ToolCall
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.factories import assistant, tool_turns, user
from tests.loop.conftest import CountingStore, CountingSummarizer, FullReadStore, LoopEnv

BASE = [
    "persist:user",
    "patch:agent:rolling-summary",
    "load:thread",
    "model:1",
    "persist:assistant",
]


def rid() -> str:
    return str(uuid.uuid4())


async def _run(
    env: LoopEnv, policy: object, history: int = 6, **kw: object
) -> tuple[str, list[str]]:
    tid = await env.thread(
        [m for i in range(history // 2) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    )
    model = ScriptedProvider([reply("answer")])
    run_id = rid()
    await env.loop(model, policy, **kw).run_turn(  # type: ignore[arg-type]
        agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
    )
    return run_id, await env.step_names(run_id)


async def test_no_policy_and_a_plain_window_journal_the_same_checkpoints(env: LoopEnv) -> None:
    _, none = await _run(env, whole_thread())
    _, window = await _run(env, window_history(max_messages=2))
    assert none == BASE
    assert window == BASE, "a window without a summarizer adds no checkpoint of its own"


async def test_a_summarizing_window_that_dropped_adds_summary_checkpoints(env: LoopEnv) -> None:
    summarizer = CountingSummarizer()
    _, names = await _run(env, window_history(max_messages=2, summarize=summarizer))
    assert names == [
        "persist:user",
        "patch:agent:rolling-summary",
        "load:thread",
        "history:summarize",
        "persist:usage:history",
        "persist:summary",
        "model:1",
        "persist:assistant",
    ]
    assert len(summarizer.calls) == 1


async def test_a_summarizing_window_that_dropped_nothing_adds_none(env: LoopEnv) -> None:
    summarizer = CountingSummarizer()
    _, names = await _run(env, window_history(max_messages=50, summarize=summarizer))
    assert names == BASE
    assert summarizer.calls == []


async def test_tool_steps_are_journaled_per_call_and_the_answer_is_one_message(
    env: LoopEnv,
) -> None:
    async def lookup(q: str) -> str:
        return f"found {q}"

    calls = [
        ToolCall(id="c1", name="lookup", arguments={"q": "a"}),
        ToolCall(id="c2", name="lookup", arguments={"q": "b"}),
    ]
    model = ScriptedProvider([reply("", tool_calls=calls), reply("done")])
    tid = await env.thread()
    run_id = rid()
    result = await env.loop(
        model, whole_thread(), tools={"lookup": FunctionTool("lookup", lookup)}
    ).run_turn(agent="helper", thread_id=tid, actor_id="alice", content="look", run_id=run_id)
    assert await env.step_names(run_id) == [
        "persist:user",
        "patch:agent:rolling-summary",
        "load:thread",
        "model:1",
        "tool:1:c1",
        "tool:1:c2",
        "model:2",
        "persist:assistant",
    ]
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert [m.role for m in thread.messages] == ["user", "assistant"]
    answer = thread.messages[1]
    assert answer.content == "done" == result.message.content
    assert [c.id for c in answer.tool_calls] == ["c1", "c2"]
    assert [(r.call_id, r.content) for r in answer.tool_results] == [
        ("c1", "found a"),
        ("c2", "found b"),
    ]
    # The second model call saw the assistant(tool_calls) message and one tool message per result.
    roles = [m.role for m in model.calls[1].messages]
    assert roles[-3:] == ["assistant", "tool", "tool"]
    assert model.calls[0].tools[0].name == "lookup"


async def test_load_thread_records_the_selection_by_seq_without_dropped_messages(
    env: LoopEnv,
) -> None:
    run_id, _ = await _run(env, window_history(max_messages=3), history=10)
    recorded = json.loads(await env.step_payload(run_id, "load:thread"))
    assert set(recorded) == {"keep_refs", "title", "has_assistant_message"}
    assert recorded["keep_refs"] == [9, 10, 11]  # q4, a4 and the user's "now?": no text
    assert recorded["has_assistant_message"] is True


async def test_with_a_summarizer_the_fold_is_recorded_with_seq_and_run_id(env: LoopEnv) -> None:
    """A summarizer may group what it folds by run, so the fold keeps seq and run id."""
    summarizer = CountingSummarizer()
    run_id, _ = await _run(env, window_history(max_messages=2, summarize=summarizer))
    recorded = json.loads(await env.step_payload(run_id, "load:thread"))
    fold = recorded["fold"]
    # The read took the window plus a fold batch (6 rows); what it held of the fold is journaled,
    # the older message it skipped is read back by the fold itself.
    assert fold["through"] == 5
    assert [(m["content"], m["seq"]) for m in fold["messages"]] == [
        ("a0", 2),
        ("q1", 3),
        ("a1", 4),
        ("q2", 5),
    ]
    assert "summary" not in recorded  # the thread had none yet
    (folded,) = summarizer.calls
    assert [(m.content, m.seq) for m in folded] == [
        ("q0", 1),
        ("a0", 2),
        ("q1", 3),
        ("a1", 4),
        ("q2", 5),
    ]


@pytest.mark.parametrize("policy_kind", ["window", "zero", "whole", "summarizing"])
async def test_bounded_and_full_reads_journal_byte_identical_load_thread(
    env: LoopEnv,
    policy_kind: str,
) -> None:
    policies = {
        "window": lambda: window_history(max_messages=4),
        "zero": lambda: window_history(max_messages=0),  # still keeps (and reads) the newest
        "whole": whole_thread,
        "summarizing": lambda: window_history(max_messages=4, summarize=CountingSummarizer()),
    }
    history = tool_turns(6, 300)
    payloads = []
    for store in (CountingStore(env.store), FullReadStore(env.store)):
        tid = await env.thread(history)
        run_id = rid()
        await env.loop(
            ScriptedProvider([reply("ok")]), policies[policy_kind](), store=store
        ).run_turn(agent="helper", thread_id=tid, actor_id="alice", content="next", run_id=run_id)
        payloads.append(await env.step_payload(run_id, "load:thread"))
        if isinstance(store, CountingStore):
            expected_bound = {"window": 4, "zero": 1, "summarizing": 8}.get(policy_kind)
            assert store.bounded_reads == [expected_bound] and store.full_reads == 0
        else:
            assert store.full_reads == 1
    assert payloads[0] == payloads[1]


async def test_load_thread_journals_the_same_bytes_however_much_the_kept_messages_weigh(
    env: LoopEnv,
) -> None:
    """20 turns each running a tool; the seed measured load:thread at 175,829 bytes unwindowed
    and 42,925 with a window of 10 for 8 KB results (and until issue 37's sixth round this
    project journaled those 42,925 every turn). The kept messages are journaled by seq now:
    the payload is the same for 8 KB results as for 16-byte ones, and the report counts it."""
    sizes: dict[tuple[str, int], int] = {}
    for label, policy in (
        ("unwindowed", whole_thread()),
        ("window 10", window_history(max_messages=10)),
    ):
        for weight in (16, 8 * 1024):
            tid = await env.thread(tool_turns(20, weight))
            run_id = rid()
            result = await env.loop(ScriptedProvider([reply("ok")]), policy).run_turn(
                agent="helper", thread_id=tid, actor_id="alice", content="next", run_id=run_id
            )
            stored = len((await env.step_payload(run_id, "load:thread")).encode())
            assert result.report.journal_bytes["load:thread"] == stored
            sizes[(label, weight)] = stored
    print(f"\nload:thread journal bytes: {sizes}")
    assert sizes[("unwindowed", 16)] == sizes[("unwindowed", 8 * 1024)]
    assert sizes[("window 10", 16)] == sizes[("window 10", 8 * 1024)] < 120
    assert sizes[("window 10", 16)] < sizes[("unwindowed", 16)]
