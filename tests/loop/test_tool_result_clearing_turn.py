"""Tool-result clearing in a turn, on SQLite and PostgreSQL: an agent configured through
`@agent(history=...)` sends its old tool results as placeholders (tool, size, seq) while the
stored rows keep them whole; the run report counts what it cleared; a resumed run sends the
prompt the first attempt sent; and `search_history` still finds a cleared result."""

from __future__ import annotations

import json
import uuid

import pytest

from bounded_agents import AgentModule, agent, tool
from bounded_agents.core.history import window_history
from bounded_agents.core.history.clearing import CLEARED_PREFIX, ToolResultClearing
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import LoopEnv

PAGE_CHARS = 8_000


def page(i: int) -> str:
    return f"page {i} code SECRET{i}X " + "x" * PAGE_CHARS


@agent(
    name="reader",
    history={
        "max_messages": 40,
        "clear_tool_results_keep": 1,
        "clear_tool_results_step_tokens": 1000,
    },
    search=True,
)
class Reader:
    @tool
    async def fetch(self, page: int) -> str:
        """A page of about 2,000 tokens."""
        return globals()["page"](page)


def _fetch(i: int) -> ModelResponse:
    return reply("", tool_calls=[ToolCall(id=f"f{i}", name="fetch", arguments={"page": i})])


def _tool_messages(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


async def test_old_results_ride_as_placeholders_and_search_still_finds_them(
    sql_store: SqlAgentStore,
) -> None:
    script: list[object] = [x for i in range(4) for x in (_fetch(i), reply(f"read {i}"))]
    search = ToolCall(id="s1", name=SEARCH_TOOL_NAME, arguments={"query": "SECRET0X"})

    async def answer_from_search(request: ModelRequest) -> ModelResponse:
        return reply(request.messages[-1].content)

    script += [reply("fine"), reply("", tool_calls=[search]), answer_from_search]
    model = ScriptedProvider(script)  # type: ignore[arg-type]
    module = AgentModule.for_root(
        model=model, store=sql_store, agents=[Reader], settings=Settings(migrate_on_start=False)
    )
    thread = await sql_store.create_thread(actor_id="alice", agent="reader")
    for i in range(4):
        await module.run_turn(
            agent="reader", thread_id=thread.id, actor_id="alice", content=f"read page {i}"
        )
    fifth = await module.run_turn(
        agent="reader", thread_id=thread.id, actor_id="alice", content="how are you?"
    )

    # Four results of ~2,006 tokens, the newest kept: 6,018 clearable, in steps of 1,000 the
    # line is at 6,000, and the three older results start below it (at 0, 2,006 and 4,012).
    sent = _tool_messages(model.calls[8])
    assert [s.startswith(CLEARED_PREFIX) for s in sent] == [True, True, True, False]
    assert "fetch returned 8,021 characters (~2,006 tokens) at message seq 2" in sent[0]
    assert "at message seq 4" in sent[1]  # each run: the question, then one answer
    assert sent[3] == page(3)
    assert fifth.report.cleared_results == 3 and fifth.report.cleared_tokens == 3 * 2006
    stored = await sql_store.get_thread(thread.id)
    assert stored is not None
    assert stored.messages[1].tool_results[0].content == page(0)  # the row is untouched

    found = await module.run_turn(
        agent="reader", thread_id=thread.id, actor_id="alice", content="what was page 0's code?"
    )
    assert "SECRET0X" in found.message.content
    assert json.loads(found.message.content)["results"][0]["seq"] == 2


@pytest.mark.parametrize("runtime_name", ["sql"], indirect=True)
async def test_a_resumed_run_sends_the_same_cleared_prompt(env: LoopEnv) -> None:
    history = [
        m
        for i in range(4)
        for m in (
            user(f"read page {i}"),
            Message(
                role="assistant",
                content="",
                tool_calls=[ToolCall(id=f"f{i}", name="fetch", arguments={"page": i})],
                tool_results=[ToolResult(call_id=f"f{i}", content=page(i))],
            ),
            assistant(f"read {i}"),
        )
    ]
    tid = await env.thread(history)
    policy = window_history(
        max_messages=40, clear_tool_results=ToolResultClearing(keep_results=1, step_tokens=1000)
    )
    run_id = str(uuid.uuid4())
    failing = ScriptedProvider([ProviderError("down")])
    with pytest.raises(RunFailed):
        await env.loop(failing, policy).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="next?", run_id=run_id
        )
    first = failing.calls[0]
    assert sum(m.content.startswith(CLEARED_PREFIX) for m in first.messages) == 3

    # The process comes back with clearing off: the journal, not the new policy, decides.
    again = ScriptedProvider([reply("done")])
    result = await env.loop(again, window_history(max_messages=40)).resume(run_id)
    assert again.calls[0].model_dump_json() == first.model_dump_json()
    assert result.message.content == "done"
