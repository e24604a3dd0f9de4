"""The tool budget in a turn, on SQLite and PostgreSQL: a model step that calls `search_history`
1,000 times gets 4 searches and short refusals, its prompt's tool output stays within the
step's cap, the stored answer within the turn's, and the next turn's prompt is bounded by its
window (issue 40, break 4). A user's own tool is held to the same byte caps."""

from __future__ import annotations

from typing import Any

from bounded_agents import AgentModule, agent, tool
from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.tool_budget import REFUSED
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user

CALLS = 1_000


@agent(name="seeker", history={"max_messages": 2}, search=True)
class Seeker:
    pass


@agent(name="reader", history={"max_messages": 2})
class Reader:
    @tool
    async def read(self, page: int) -> str:
        """A 30 KB page."""
        return f"page {page} " + "x" * 30_000


def _calls(name: str, arguments: dict[str, Any], n: int) -> ModelResponse:
    return reply(
        "", tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=arguments) for i in range(n)]
    )


def _tool_bytes(messages: list[ChatMessage]) -> int:
    return sum(len(m.content.encode()) for m in messages if m.role == "tool")


def _last_step_tool_bytes(request: ModelRequest) -> int:
    """The tool output of the step the request answers: the tool messages after the last
    assistant message."""
    last = max(i for i, m in enumerate(request.messages) if m.role == "assistant")
    return _tool_bytes(list(request.messages[last + 1 :]))


def _module(store: SqlAgentStore, model: ScriptedProvider, **settings: Any) -> AgentModule:
    return AgentModule.for_root(
        model=model,
        store=store,
        agents=[Seeker, Reader],
        settings=Settings(migrate_on_start=False, **settings),
    )


async def test_a_step_calling_search_1000_times_stays_within_the_caps(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="seeker")
    # 60 messages that each match, 1,000 characters each: every search fills its 8 KB.
    await sql_store.append_messages(
        thread.id,
        [
            m
            for i in range(30)
            for m in (user(f"needle {i} " + "word " * 200), assistant(f"noted {i}"))
        ],
    )
    model = ScriptedProvider(
        [_calls(SEARCH_TOOL_NAME, {"query": "needle", "k": 20}, CALLS), reply("done"), reply("ok")]
    )
    module = _module(sql_store, model)

    result = await module.run_turn(
        agent="seeker", thread_id=thread.id, actor_id="alice", content="find the needles"
    )

    step_cap = module.settings.tool_result_bytes_per_step
    answered = [r for r in result.message.tool_results if not r.content.startswith(REFUSED)]
    assert len(result.message.tool_results) == CALLS  # every call has its answer
    assert len([r for r in answered if r.content]) == module.settings.search_calls_per_step
    assert all(len(r.content.encode()) > 7_000 for r in answered if r.content), [
        len(r.content) for r in answered
    ]
    refusals = [r for r in result.message.tool_results if r.content.startswith(REFUSED)]
    assert refusals and all(r.is_error for r in refusals)
    assert "at most 4 search_history calls a step" in refusals[0].content
    second = model.calls[1]
    assert _last_step_tool_bytes(second) <= step_cap
    assert _tool_bytes(list(second.messages)) <= step_cap
    stored = sum(len(r.content.encode()) for r in result.message.tool_results)
    assert stored <= module.settings.tool_result_bytes_per_turn

    await module.run_turn(agent="seeker", thread_id=thread.id, actor_id="alice", content="next")

    following = model.calls[2]
    # the window (2 messages) holds the stored answer: its tool output is within the caps
    assert _tool_bytes(list(following.messages)) <= step_cap
    size = sum(len(m.content) for m in following.messages)
    calls = sum(
        len(str(c.arguments)) + len(c.id) + len(c.name)
        for m in following.messages
        for c in m.tool_calls
    )
    assert size + calls < 200_000, (size, calls)  # it was 7,364,126 characters


async def test_a_user_tool_s_output_is_held_to_the_step_and_turn_caps(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="reader")
    model = ScriptedProvider(
        [_calls("read", {"page": 1}, 5), _calls("read", {"page": 2}, 5), reply("done")]
    )
    module = _module(
        sql_store, model, tool_result_bytes_per_step=64_000, tool_result_bytes_per_turn=100_000
    )

    result = await module.run_turn(
        agent="reader", thread_id=thread.id, actor_id="alice", content="read"
    )

    sizes = [len(r.content.encode()) for r in result.message.tool_results]
    full = [s for s in sizes if s > 30_000]
    assert len(full) == 3  # two in the first step (64 KB), one more in the turn (100 KB)
    assert sum(sizes[:5]) <= 64_000 and sum(sizes) <= 100_000
    assert _last_step_tool_bytes(model.calls[1]) <= 64_000
    refusal = next(r for r in result.message.tool_results if r.content.startswith(REFUSED))
    assert "over the tool output left for this step" in refusal.content
    later = [r.content for r in result.message.tool_results[5:] if r.content.startswith(REFUSED)]
    assert any("left for this turn" in text for text in later), later
