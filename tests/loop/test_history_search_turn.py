"""The history search tool in a turn: an agent declared with `search=True` advertises it, the
model's call searches the turn's own thread past the window, and the result is journaled like
any tool result, so a resumed run returns it without searching again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from typing import Any

import pytest

from bounded_agents import AgentModule, agent, tool
from bounded_agents.core.history import window_history
from bounded_agents.core.messages import Message, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse, SearchHit, Thread
from bounded_agents.core.search import SEARCH_TOOL_NAME, HistorySearchTool
from bounded_agents.errors import ConfigError, ProviderError, RunFailed
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv

FACT = "Please note: the discount code is SPRING-7731."
FILLER = [m for i in range(10) for m in (user(f"Chat {i} about films."), assistant("Sure."))]


def _search_call(query: str, call_id: str = "c1") -> ModelResponse:
    call = ToolCall(id=call_id, name=SEARCH_TOOL_NAME, arguments={"query": query})
    return reply("", tool_calls=[call])


async def _answer_from_the_tool(request: ModelRequest) -> ModelResponse:
    found = json.loads(request.messages[-1].content)["results"]
    return reply(f"Found: {found[0]['content']}" if found else "Nothing found.")


@agent(name="seeker", history={"max_messages": 4}, search=True)
class Seeker:
    pass


@agent(name="plain", history={"max_messages": 4})
class Plain:
    pass


async def test_a_search_agent_finds_a_fact_past_its_window_through_the_module(
    sql_store: SqlAgentStore,
) -> None:
    model = ScriptedProvider([_search_call("discount code"), _answer_from_the_tool])
    module = AgentModule.for_root(
        model=model,
        store=sql_store,
        agents=[Seeker, Plain],
        settings=Settings(migrate_on_start=False),
    )
    thread = await sql_store.create_thread(actor_id="alice", agent="seeker")
    await sql_store.append_messages(thread.id, [user(FACT), assistant("Noted."), *FILLER])

    result = await module.run_turn(
        agent="seeker", thread_id=thread.id, actor_id="alice", content="Which discount code?"
    )

    first = model.calls[0]
    assert [t.name for t in first.tools] == [SEARCH_TOOL_NAME]
    assert all("SPRING-7731" not in m.content for m in first.messages)  # outside the window
    assert result.message.content == f"Found: {FACT}"
    stored = json.loads(result.message.tool_results[0].content)
    row = stored["results"][0]
    assert row.pop("at")  # when it was stored (new with 0012, on purpose)
    assert row == {"seq": 1, "role": "user", "content": FACT}


async def test_an_agent_without_search_is_not_offered_the_tool(sql_store: SqlAgentStore) -> None:
    model = ScriptedProvider([reply("ok")])
    module = AgentModule.for_root(
        model=model, store=sql_store, agents=[Plain], settings=Settings(migrate_on_start=False)
    )
    thread = await sql_store.create_thread(actor_id="alice", agent="plain")
    await module.run_turn(agent="plain", thread_id=thread.id, actor_id="alice", content="hi")
    assert model.calls[0].tools == []


def test_an_agent_tool_may_not_take_the_search_tools_name() -> None:
    @agent(name="clash", search=True)
    class Clash:
        @tool(name=SEARCH_TOOL_NAME)
        async def mine(self) -> str:
            """Mine."""
            return ""

    with pytest.raises(ConfigError, match="built-in search tool"):
        AgentModule.for_root(
            model=ScriptedProvider(), agents=[Clash], settings=Settings(migrate_on_start=False)
        )


class CountingSearches:
    """The store, counting the searches made through it."""

    def __init__(self, inner: SqlAgentStore) -> None:
        self.inner = inner
        self.searches = 0

    async def search_history(self, thread_id: str, query: str, *, limit: int) -> list[SearchHit]:
        self.searches += 1
        return await self.inner.search_history(thread_id, query, limit=limit)

    async def messages_at(self, thread_id: str, seqs: Collection[int]) -> list[Message]:
        return await self.inner.messages_at(thread_id, seqs)

    async def create_thread(self, **kw: Any) -> Thread:
        return await self.inner.create_thread(**kw)

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self.inner.get_thread(thread_id)

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        return await self.inner.append_messages(thread_id, messages)


@SQL_JOURNAL_ONLY
async def test_a_resumed_run_returns_the_journaled_result_and_never_searches_again(
    env: LoopEnv,
) -> None:
    """A tool round commits before the model call it feeds (issue 37: a tool's effects are
    durable before the next call), with the model step that asked for it: both searches are
    journaled before the third call fails, and the resume makes neither again."""
    tid = await env.thread([user(FACT), assistant("Noted."), *FILLER])
    policy = window_history(max_messages=4)
    counting = CountingSearches(env.store)
    tools = {SEARCH_TOOL_NAME: HistorySearchTool(counting)}
    run_id = str(uuid.uuid4())
    script = [_search_call("discount code"), _search_call("films", "c2"), ProviderError("down")]
    failing = ScriptedProvider(script)
    with pytest.raises(RunFailed):
        await env.loop(failing, policy, tools=tools).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="code?", run_id=run_id
        )
    # c1's query, then its hit's value's form (SPRING-9999, core.search_forms); c2's query
    assert counting.searches == 3
    assert "tool:1:c1" in await env.step_names(run_id)
    first_result = failing.calls[1].messages[-1].content
    # The thread changes before the resume: a search made again would see the newer message.
    await env.store.append_messages(tid, [user("Please note: the discount code is now X-1.")])

    model = ScriptedProvider([reply("done")])
    await env.loop(model, policy, tools=tools).resume(run_id)

    assert counting.searches == 3  # c1's and c2's rounds committed: neither searches again
    replayed = [m for m in model.calls[0].messages if m.tool_call_id == "c1"]
    assert [m.content for m in replayed] == [first_result]
    assert json.loads(first_result)["results"][0]["content"] == FACT


class Notetaker:
    """A summarizer whose notes restate every message it is handed, word for word, and never
    get shorter when asked to compress: its summary outgrows the cap, so the fold archives the
    oldest notes (issue 36) instead of cutting them."""

    async def __call__(self, messages: list[Message], ctx: Any) -> Any:
        from bounded_agents.core.ports import HistorySummary, Usage

        previous = ctx.summary.text if ctx.summary is not None else ""
        if ctx.fold_task == "compress":
            return HistorySummary(text=previous, usage=Usage(prompt_tokens=1, completion_tokens=1))
        notes = "\n".join(f"- {m.role} said: {m.content}" for m in messages)
        return HistorySummary(
            text=f"{previous}\n{notes}".strip(), usage=Usage(prompt_tokens=1, completion_tokens=1)
        )


async def test_an_archived_summary_part_is_found_by_search_and_gone_after_erasure(
    sql_store: SqlAgentStore,
) -> None:
    """Summary + search: the fact's note leaves the capped summary for the archive, the model
    finds it there with `search_history`, and the thread's erasure takes the archive too."""
    notes = Notetaker()

    @agent(
        name="keeper",
        history={"max_messages": 4, "summarize": notes, "fold_max_tokens": 300},
        search=True,
    )
    class Keeper:
        pass

    found: list[str] = []

    async def read_result(request: ModelRequest) -> ModelResponse:
        rows = json.loads(request.messages[-1].content)["results"]
        found.extend(json.dumps(r) for r in rows)
        return reply("ok")

    filler = [f"Chat {i} about films and the weather in the mountains." for i in range(24)]
    script: list[Any] = [reply(f"noted {i}") for i in range(len(filler) + 1)]
    script += [_search_call("discount code"), read_result]
    module = AgentModule.for_root(
        model=ScriptedProvider(script),
        store=sql_store,
        agents=[Keeper],
        settings=Settings(migrate_on_start=False),
    )
    thread = await sql_store.create_thread(actor_id="alice", agent="keeper")
    archived = 0
    for content in [FACT, *filler]:
        result = await module.run_turn(
            agent="keeper", thread_id=thread.id, actor_id="alice", content=content
        )
        summary = result.report.summary
        archived += summary.archived if summary is not None else 0
    summary_now = await sql_store.latest_summary(thread.id)
    assert archived >= 1 and summary_now is not None
    assert "SPRING-7731" not in summary_now.text, "the fact's note left the summary..."
    parts = await sql_store.archived_parts(thread.id)
    assert any("SPRING-7731" in p.content for p in parts), "...for the archive"

    await module.run_turn(
        agent="keeper", thread_id=thread.id, actor_id="alice", content="what was the code?"
    )
    assert any("SPRING" in row and "from_seq" in row for row in found), found  # the archive

    await module.erase_thread(thread.id, actor_id="alice")
    assert await sql_store.archived_parts(thread.id) == []
