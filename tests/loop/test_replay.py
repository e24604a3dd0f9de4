"""Replays: a resumed run sends the same prompt, and reads, selects and summarizes nothing again."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import ModelRequest, ModelResponse, Usage
from bounded_agents.errors import ProviderError, RunCompleted, RunFailed
from bounded_agents.store.schema import run_steps, runs
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import (
    SQL_JOURNAL_ONLY,
    CountingPolicy,
    CountingStore,
    CountingSummarizer,
    LoopEnv,
)


def rid() -> str:
    return str(uuid.uuid4())


def history(n: int) -> list[Message]:
    return [m for i in range(n) for m in (user(f"q{i}"), assistant(f"a{i}"))]


async def test_resume_after_summary_replays_the_same_prompt_without_a_second_summary(
    env: LoopEnv,
) -> None:
    tid = await env.thread(history(5))
    first = CountingSummarizer(text="first summary")
    store = CountingStore(env.store)
    policy = CountingPolicy(window_history(max_messages=3, summarize=first))
    model = ScriptedProvider([ProviderError("provider down")])
    run_id = rid()
    with pytest.raises(RunFailed) as info:
        await env.loop(model, policy, store=store).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
        )
    assert info.value.run_id == run_id
    assert await env.step_names(run_id) == [
        "persist:user",
        "patch:agent:rolling-summary",
        "load:thread",
        "history:summarize",
        "persist:usage:history",
        "persist:summary",
    ]
    first_prompt = model.calls[0].model_dump_json()

    # The process comes back with a summarizer that would now answer differently.
    second = CountingSummarizer(text="a DIFFERENT summary")
    store2 = CountingStore(env.store)
    policy2 = CountingPolicy(window_history(max_messages=3, summarize=second))
    model2 = ScriptedProvider([reply("answer")])
    result = await env.loop(model2, policy2, store=store2).resume(run_id)

    assert model2.calls[0].model_dump_json() == first_prompt
    assert "first summary" in model2.calls[0].messages[1].content
    assert second.calls == [] and len(first.calls) == 1
    assert store2.bounded_reads == [] and store2.full_reads == 0
    assert policy2.selects == 0
    assert result.message.content == "answer"
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert [m.content for m in thread.messages][-2:] == ["now?", "answer"]
    assert [m.role for m in thread.messages].count("user") == 6  # the user message stored once
    summary_rows = [
        e for e in await env.ledger.entries_for_run(run_id) if e.purpose == "history_summary"
    ]
    assert len(summary_rows) == 1


async def test_a_failed_turn_keeps_the_user_message_stores_no_answer_and_the_thread_goes_on(
    env: LoopEnv,
) -> None:
    tid = await env.thread()
    run_id = rid()
    loop = env.loop(
        ScriptedProvider([ProviderError("boom"), reply("fine")]), window_history(max_messages=5)
    )
    with pytest.raises(RunFailed):
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="one", run_id=run_id
        )
    thread = await env.store.get_thread(tid)
    assert thread is not None and [m.role for m in thread.messages] == ["user"]
    record = await env.journal.get_run(run_id)
    assert (
        record is not None and record.status == "failed" and record.error_code == "provider_error"
    )
    # The thread is usable: the next turn runs and answers.
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="two", run_id=rid()
    )
    assert result.message.content == "fine"
    thread = await env.store.get_thread(tid)
    assert thread is not None and [m.content for m in thread.messages] == ["one", "two", "fine"]


async def test_the_summary_is_a_system_message_after_the_prompt_made_once_and_never_stored(
    env: LoopEnv,
) -> None:
    from bounded_agents.core.messages import ToolCall
    from bounded_agents.testing import FunctionTool

    async def echo(x: str) -> str:
        return x

    tid = await env.thread(history(4))
    summarizer = CountingSummarizer(text="KEY FACT")
    model = ScriptedProvider(
        [
            reply("", tool_calls=[ToolCall(id="t1", name="echo", arguments={"x": "1"})]),
            reply("", tool_calls=[ToolCall(id="t2", name="echo", arguments={"x": "2"})]),
            reply("done"),
        ]
    )
    loop = env.loop(
        model,
        window_history(max_messages=2, summarize=summarizer),
        tools={"echo": FunctionTool("echo", echo)},
    )
    await loop.run_turn(agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=rid())
    assert len(summarizer.calls) == 1 and len(model.calls) == 3
    for call in model.calls:
        assert call.messages[0].content == "You help."
        assert call.messages[1].role == "system"
        assert call.messages[1].content.startswith("<conversation_summary>\nKEY FACT\n")
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert all("KEY FACT" not in m.content for m in thread.messages)


async def test_a_legacy_whole_thread_journal_replays_on_the_old_path_byte_for_byte(
    env: LoopEnv,
) -> None:
    """A run journaled before `agent:selected-history` existed: no marker, whole thread."""
    tid = await env.thread(history(3))
    run_id = rid()
    stored = await env.store.append_messages(tid, [user("legacy question", run_id=run_id)])
    thread = await env.store.get_thread(tid)
    assert thread is not None
    legacy_load = json.dumps(
        {
            "messages": [m.model_dump(mode="json") for m in thread.messages],
            "title": thread.title,
            "has_assistant_message": True,
        },
        separators=(",", ":"),
    )
    await env.failed_run(
        run_id,
        tid,
        "legacy question",
        [("persist:user", json.dumps({"seq": stored[0].seq})), ("load:thread", legacy_load)],
    )
    # Add a message AFTER the legacy load: a fresh read would see it, the replay must not.
    await env.store.append_messages(tid, [user("arrived later")])

    store = CountingStore(env.store)
    model = ScriptedProvider([reply("old path answer")])
    result = await env.loop(model, window_history(max_messages=3), store=store).resume(run_id)

    steps = await env.journal.steps(run_id)
    assert [n for n, _ in steps] == ["persist:user", "load:thread", "model:1", "persist:assistant"]
    assert steps[1][1] == legacy_load
    assert store.bounded_reads == [] and store.full_reads == 0
    sent = [m.content for m in model.calls[0].messages]
    assert sent == ["You help.", "q2", "a2", "legacy question"]
    assert result.message.content == "old path answer"


async def test_a_run_whose_process_died_is_resumed_at_start_up_with_the_same_prompt(
    env: LoopEnv,
) -> None:
    from bounded_agents.module import AgentModule
    from bounded_agents.settings import Settings

    tid = await env.thread(history(2))
    entered = asyncio.Event()
    prompts: list[str] = []

    async def hang(request: ModelRequest) -> ModelResponse:
        prompts.append(request.model_dump_json())
        entered.set()
        await asyncio.Event().wait()  # never answers: the process "dies" here
        raise AssertionError("unreachable")

    run_id = rid()
    dying = env.loop(ScriptedProvider([hang]), window_history(max_messages=3))
    task = asyncio.create_task(
        dying.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="still there?", run_id=run_id
        )
    )
    await asyncio.wait_for(entered.wait(), 10)
    assert "load:thread" in await env.step_names(run_id)
    task.cancel()  # the process is gone: its run stays `running` until its lease expires
    with pytest.raises(asyncio.CancelledError):
        await task
    record = await env.journal.get_run(run_id)
    assert record is not None and record.status == "running"
    async with env.store.engine.begin() as conn:  # ... and its lease runs out
        await conn.execute(
            runs.update().where(runs.c.id == run_id).values(lease_expires_at=_past())
        )

    from bounded_agents.registry import agent as agent_decorator

    @agent_decorator(name="helper", system_prompt="You help.", history={"max_messages": 3})
    class Helper:
        pass

    model = ScriptedProvider([lambda r: _answer(r, prompts)])
    module = AgentModule.for_root(
        model=model,
        store=env.store,
        agents=[Helper],
        journal=type(env.journal)(env.store.engine),  # a new process's runtime, of one kind
        ledger=env.ledger,
        settings=Settings(migrate_on_start=False),
    )
    async with module.lifespan():
        pass  # start-up resumes, shutdown waits for the resumed run
    record = await env.journal.get_run(run_id)
    assert record is not None and record.status == "completed"
    assert prompts[0] == prompts[1], "the model saw the same prompt both times"
    steps = await env.step_names(run_id)
    assert steps.count("load:thread") == 1 and steps.count("persist:assistant") == 1, steps
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert [m.content for m in thread.messages][-2:] == ["still there?", "resumed answer"]
    assert [m.content for m in thread.messages].count("resumed answer") == 1


def _past() -> object:
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) - timedelta(minutes=5)


async def _answer(request: ModelRequest, prompts: list[str]) -> ModelResponse:
    prompts.append(request.model_dump_json())
    return ModelResponse(
        content="resumed answer", usage=Usage(prompt_tokens=1, completion_tokens=1)
    )


async def test_summaries_and_chat_calls_each_write_a_ledger_row(env: LoopEnv) -> None:
    tid = await env.thread(history(3))
    run_id = rid()
    summarizer = CountingSummarizer()
    result = await env.loop(
        ScriptedProvider([reply("x", prompt_tokens=30, completion_tokens=3)]),
        window_history(max_messages=2, summarize=summarizer),
    ).run_turn(agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=run_id)
    rows = await env.ledger.entries_for_run(run_id)
    assert [(r.purpose, r.prompt_tokens, r.completion_tokens) for r in rows] == [
        ("history_summary", 50, 7),
        ("chat", 30, 3),
    ]
    assert [(r.purpose, r.prompt_tokens) for r in result.report.ledger] == [
        ("history_summary", 50),
        ("chat", 30),
    ]
    assert [c.purpose for c in result.report.model_calls] == ["history_summary", "chat"]
    summary_call = result.report.model_calls[0]
    dropped = len(summarizer.calls[0])
    assert dropped == 5  # 3 exchanges (6 messages) + the new question, a window of 2
    assert (summary_call.messages_sent, summary_call.messages_original) == (dropped, dropped)


async def test_a_spent_quota_refuses_the_turn_and_summaries_count_against_it(env: LoopEnv) -> None:
    from bounded_agents.errors import QuotaExceeded

    tid = await env.thread(history(3))
    loop = env.loop(
        ScriptedProvider([reply("x", prompt_tokens=10, completion_tokens=10)]),
        window_history(max_messages=2, summarize=CountingSummarizer()),
        quota=60,
    )
    await loop.run_turn(agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=rid())
    assert await env.ledger.tokens_used("alice") == 57 + 20  # summary 57 + chat 20
    with pytest.raises(QuotaExceeded, match="77 of 60"):
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="again", run_id=rid()
        )
    thread = await env.store.get_thread(tid)
    assert thread is not None and thread.messages[-1].content == "x", (
        "nothing stored for a refused turn"
    )
    # Another actor is not affected by alice's spending.
    tid_b = await env.thread(actor="bob")
    loop_b = env.loop(ScriptedProvider([reply("y")]), window_history(max_messages=2), quota=60)
    result = await loop_b.run_turn(
        agent="helper", thread_id=tid_b, actor_id="bob", content="hi", run_id=rid()
    )
    assert result.message.content == "y"


async def test_the_report_carries_true_read_and_journal_figures(env: LoopEnv) -> None:
    from bounded_agents.core.messages import payload_bytes
    from tests.factories import tool_turns

    tid = await env.thread(tool_turns(10, 2000))
    run_id = rid()
    result = await env.loop(
        ScriptedProvider([reply("ok")]), window_history(max_messages=4)
    ).run_turn(agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=run_id)
    report = result.report
    thread = await env.store.get_thread(tid)
    assert thread is not None
    # The newest 4 when the read ran: before the answer was stored, so ending in "q".
    read = thread.messages[-5:-1]
    assert read[-1].content == "q"
    assert report.read_bound == 4 and report.rows_read == 4
    assert report.bytes_read == sum(payload_bytes(m) for m in read)
    assert report.bytes_read > 2 * 2000  # two of them carry a 2,000-character tool result
    steps = await env.journal.steps(run_id)
    assert report.journal_bytes == {n: len(p.encode()) for n, p in steps}
    record = await env.journal.get_run(run_id)
    assert record is not None and record.report == report.model_dump(mode="json")


async def test_a_summary_holding_a_lone_surrogate_is_journaled_with_u_fffd(env: LoopEnv) -> None:
    """The summary is journaled as UTF-8 text: a lone surrogate would fail that write."""
    tid = await env.thread(history(4))
    model = ScriptedProvider([reply("ok")])
    summarizer = CountingSummarizer(text="fact \ud800 and \x00")
    loop = env.loop(model, window_history(max_messages=2, summarize=summarizer))
    run_id = rid()
    await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=run_id
    )
    assert (
        model.calls[0]
        .messages[1]
        .content.startswith("<conversation_summary>\nfact \ufffd and \ufffd\n")
    )
    steps = dict(await env.journal.steps(run_id))
    assert json.loads(steps["history:summarize"])["text"] == "fact \ufffd and \ufffd"


async def test_a_resumed_run_reports_the_ledger_rows_of_every_attempt(env: LoopEnv) -> None:
    """The first attempt paid for a model call whose tool step it journaled before it died; the
    resumed run replays that call and its report still counts it (read back, not remembered)."""
    from bounded_agents.core.messages import ToolCall
    from bounded_agents.testing import FunctionTool

    async def echo(x: str) -> str:
        return x

    tid = await env.thread()
    run_id = rid()
    call = ToolCall(id="t1", name="echo", arguments={"x": "1"})
    first = env.loop(
        ScriptedProvider([reply(tool_calls=[call], prompt_tokens=11), ProviderError("boom")]),
        window_history(max_messages=5),
        tools={"echo": FunctionTool("echo", echo)},
    )
    with pytest.raises(RunFailed):
        await first.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=run_id
        )
    second = env.loop(
        ScriptedProvider([reply("done", prompt_tokens=22)]),
        window_history(max_messages=5),
        tools={"echo": FunctionTool("echo", echo)},
    )
    result = await second.resume(run_id)
    assert result.message.content == "done"
    assert [(r.purpose, r.prompt_tokens) for r in result.report.ledger] == [
        ("chat", 11),
        ("chat", 22),
    ]
    record = await env.journal.get_run(run_id)
    assert record is not None and record.report is not None
    assert [r["prompt_tokens"] for r in record.report["ledger"]] == [11, 22]


# SQL journal only: rewrites a run_steps payload as code from before cleaning wrote it.
@SQL_JOURNAL_ONLY
async def test_a_journal_from_before_cleaning_resumes_with_its_nul_stored_as_u_fffd(
    env: LoopEnv,
) -> None:
    """A run journaled before model output was cleaned at its step holds a raw NUL there; it
    failed at `persist:assistant` then. Resumed now, the step is cleaned as it is read back."""
    import sqlalchemy as sa

    from bounded_agents.errors import StoreError
    from tests.loop.conftest import FullReadStore

    class AnswerRefusingStore(FullReadStore):
        async def append_messages(self, thread_id: str, messages: Any) -> list[Message]:
            if any(m.role == "assistant" for m in messages):
                raise StoreError("append_messages: refused for the test")
            return await super().append_messages(thread_id, messages)

    tid = await env.thread()
    run_id = rid()
    first = env.loop(
        ScriptedProvider([reply("PLACEHOLDER")]),
        window_history(max_messages=5),
        store=AnswerRefusingStore(env.store),
    )
    with pytest.raises(RunFailed):
        await first.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=run_id
        )
    async with env.store.engine.begin() as conn:  # what the old code journaled
        await conn.execute(
            run_steps.update()
            .where(run_steps.c.run_id == run_id, run_steps.c.name == "model:1")
            .values(payload=sa.func.replace(run_steps.c.payload, "PLACEHOLDER", "bad\\u0000"))
        )
    assert "bad\\u0000" in await env.step_payload(run_id, "model:1")

    result = await env.loop(ScriptedProvider([]), window_history(max_messages=5)).resume(run_id)

    assert result.message.content == "bad\ufffd"
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert [(m.role, m.content) for m in thread.messages] == [
        ("user", "go"),
        ("assistant", "bad\ufffd"),
    ]


async def test_resuming_a_completed_run_says_it_is_completed(env: LoopEnv) -> None:
    """Found by attack: it said the run "was taken over by another process (its lease ran
    out)", which sends an operator looking for a second process that does not exist."""
    tid = await env.thread()
    model = ScriptedProvider([reply("the answer")])
    loop = env.loop(model, window_history(max_messages=3))
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="q?", run_id=rid()
    )
    with pytest.raises(RunCompleted, match="is already completed: nothing to resume") as info:
        await loop.resume(result.run_id)
    assert info.value.run_id == result.run_id
    assert not isinstance(info.value, RunFailed) and "taken over" not in str(info.value)
    record = await env.journal.get_run(result.run_id)
    assert record is not None and record.status == "completed"
    thread = await env.store.get_thread(tid)
    assert thread is not None and [m.content for m in thread.messages] == ["q?", "the answer"]
    assert len(model.calls) == 1  # no model call for the refused resume
