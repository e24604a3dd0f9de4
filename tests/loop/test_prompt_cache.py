"""Prompt caching through the loop, on SQLite and PostgreSQL: with a hysteresis window the
prompts between cuts extend each other byte for byte; each chat call reports how much of the
previous call's prompt it repeats (across runs too, through the digest stored with the answer);
the provider's cached tokens reach the report and the ledger."""

from __future__ import annotations

import uuid

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse, ThreadTurnQuery, Usage
from bounded_agents.core.prefix import prefix_reuse, prompt_digest
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.durable import InlineRuntime
from bounded_agents.store import MemoryStore
from bounded_agents.store.ledger import MemoryLedger
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.loop.conftest import FullReadStore, LoopEnv


def rid() -> str:
    return str(uuid.uuid4())


def common_prefix(a: list[ChatMessage], b: list[ChatMessage]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class Recorder:
    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return reply(f"answer {len(self.requests)}")


async def test_between_cuts_each_prompt_extends_the_previous_one_and_the_report_says_so(
    env: LoopEnv,
) -> None:
    recorder = Recorder()
    loop = env.loop(
        ScriptedProvider([recorder] * 40), window_history(max_messages=12, min_messages=4)
    )
    tid = await env.thread()
    reports = []
    for i in range(40):
        result = await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=f"turn {i}", run_id=rid()
        )
        reports.append(result.report)
    prompts = [r.messages for r in recorder.requests]
    extended = 0
    for n in range(1, 40):
        previous, current = prompts[n - 1], prompts[n]
        call = reports[n].model_calls[0]
        same = common_prefix(previous, current)
        assert call.previous_prompt_messages == len(previous)
        assert call.prefix_reused_messages == same
        assert call.prefix_reused_tokens == sum(estimate_message_tokens(m) for m in current[:same])
        assert call.extends_previous == (current[: len(previous)] == previous)
        extended += call.extends_previous
        if not call.extends_previous:
            assert same == 1, "a cut keeps only the system prompt in common"
    # 4..11 messages kept: a cut every 4 turns once past the high mark.
    assert extended >= 29
    first = reports[0].model_calls[0]
    assert first.previous_prompt_messages is None and not first.extends_previous
    cache = reports[5].prompt_cache
    assert cache is not None and cache.calls == cache.compared == 1
    assert cache.prompt_tokens == sum(estimate_message_tokens(m) for m in prompts[5])


async def test_a_sliding_window_never_extends_the_previous_prompt(env: LoopEnv) -> None:
    recorder = Recorder()
    loop = env.loop(ScriptedProvider([recorder] * 12), window_history(max_messages=6))
    tid = await env.thread()
    reports = [
        (
            await loop.run_turn(
                agent="helper", thread_id=tid, actor_id="alice", content=f"t{i}", run_id=rid()
            )
        ).report
        for i in range(12)
    ]
    assert not any(r.model_calls[0].extends_previous for r in reports[4:])


async def test_steps_of_one_run_extend_each_other_and_cached_tokens_are_booked_apart(
    env: LoopEnv,
) -> None:
    async def echo(text: str) -> str:
        return text

    call = ToolCall(id="c1", name="echo", arguments={"text": "hi"})
    cached = ModelResponse(
        content="done",
        model="scripted",
        usage=Usage(prompt_tokens=120, completion_tokens=5, cached_tokens=96),
    )
    model = ScriptedProvider([reply("", tool_calls=[call]), cached])
    loop = env.loop(
        model, window_history(max_messages=10), tools={"echo": FunctionTool("echo", echo)}
    )
    tid = await env.thread()
    run_id = rid()
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=run_id
    )
    first, second = result.report.model_calls
    assert first.cached_tokens is None and second.cached_tokens == 96
    assert second.extends_previous and second.prefix_reused_messages == first.messages_sent
    assert result.report.prompt_cache is not None
    assert result.report.prompt_cache.cached_tokens == 96
    assert result.report.prompt_cache.extended == 1
    rows = await env.ledger.entries_for_run(run_id)
    assert [r.cached_tokens for r in rows] == [0, 96]
    assert [r.cached_tokens for r in result.report.ledger] == [0, 96]
    stored = await env.journal.get_run(run_id)
    assert stored is not None and stored.report is not None
    assert stored.report["prompt_cache"]["cached_tokens"] == 96, "GET /runs/{id} shows it"


async def test_the_next_run_compares_with_the_digest_stored_with_the_answer(env: LoopEnv) -> None:
    recorder = Recorder()
    loop = env.loop(
        ScriptedProvider([recorder] * 2), window_history(max_messages=40, min_messages=20)
    )
    tid = await env.thread()
    for i in range(2):
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=f"t{i}", run_id=rid()
        )
    page = await env.store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, message_limit=1))
    assert page is not None
    assert page.last_prompt == prompt_digest(recorder.requests[-1].messages)
    sent = recorder.requests[-1].messages
    costs = [estimate_message_tokens(m) for m in sent]
    reuse = prefix_reuse(page.last_prompt, prompt_digest(sent), costs)
    assert reuse.extends and reuse.messages == len(recorder.requests[-1].messages)


async def test_a_store_without_digests_reports_the_first_call_as_uncompared(env: LoopEnv) -> None:
    recorder = Recorder()
    store = FullReadStore(env.store)
    loop = env.loop(ScriptedProvider([recorder] * 3), window_history(max_messages=10), store=store)
    tid = await env.thread()
    for i in range(3):
        result = await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=f"t{i}", run_id=rid()
        )
        assert result.report.model_calls[0].previous_prompt_messages is None


async def test_the_memory_store_remembers_the_last_prompt_too() -> None:
    recorder = Recorder()
    definition = AgentDefinition(
        name="helper",
        system_prompt="You help.",
        policy=window_history(max_messages=40, min_messages=20),
    )
    store = MemoryStore()
    loop = AgentLoop(
        store=store,
        runtime=InlineRuntime(),
        ledger=MemoryLedger(),
        model=ScriptedProvider([recorder] * 3),
        agents={"helper": definition},
    )
    thread = await store.create_thread(actor_id="alice", agent="helper")
    reports = [
        (
            await loop.run_turn(
                agent="helper", thread_id=thread.id, actor_id="alice", content=f"t{i}", run_id=rid()
            )
        ).report
        for i in range(3)
    ]
    assert [r.model_calls[0].extends_previous for r in reports] == [False, True, True]


async def test_after_a_tool_run_the_next_prompt_repeats_the_previous_only_to_its_question(
    env: LoopEnv,
) -> None:
    """The gap docs/history.md names: a tool run's answer is stored as one message, which the
    next prompt expands differently from what the run sent. The figures show it, not hide it."""

    async def echo(text: str) -> str:
        return text

    call = ToolCall(id="c1", name="echo", arguments={"text": "hi"})
    recorder = Recorder()
    model = ScriptedProvider([reply("", tool_calls=[call]), reply("done"), recorder])
    loop = env.loop(
        model,
        window_history(max_messages=40, min_messages=20),
        tools={"echo": FunctionTool("echo", echo)},
    )
    tid = await env.thread()
    await loop.run_turn(agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=rid())
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="next", run_id=rid()
    )
    first = result.report.model_calls[0]
    assert first.previous_prompt_messages == 4  # system, user, assistant(call), tool
    assert first.prefix_reused_messages == 2 and not first.extends_previous
