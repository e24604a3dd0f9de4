"""A store with only the base `AgentStore` port (no optional power at all) runs a turn: the
loop's one `TurnStore` reads it whole and cuts the read in memory, and writes without a
transaction or a prompt digest. A summarizing agent on it is refused when the loop is built."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import Message, ToolCall
from bounded_agents.core.ports import (
    POWERS,
    AgentStore,
    HistoryPolicyContext,
    HistorySummary,
    Thread,
)
from bounded_agents.durable import InlineRuntime
from bounded_agents.errors import ConfigError
from bounded_agents.store import MemoryStore
from bounded_agents.store.ledger import MemoryLedger
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv


class PlainStore:
    """Only the three methods of the base port, over a real store: every power is hidden."""

    def __init__(self, inner: AgentStore) -> None:
        self.inner = inner
        self.reads = 0

    async def create_thread(self, *, actor_id: str, agent: str, title: str | None = None) -> Thread:
        return await self.inner.create_thread(actor_id=actor_id, agent=agent, title=title)

    async def get_thread(self, thread_id: str) -> Thread | None:
        self.reads += 1
        return await self.inner.get_thread(thread_id)

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        return await self.inner.append_messages(thread_id, messages)


async def _lookup(city: str) -> str:
    return f"sunny in {city}"


def _definition(**policy: object) -> AgentDefinition:
    return AgentDefinition(
        name="helper",
        system_prompt="You help.",
        policy=window_history(**policy),  # type: ignore[arg-type]
        tools={"weather": FunctionTool("weather", _lookup)},
    )


def test_the_plain_store_has_none_of_the_optional_store_powers() -> None:
    plain = PlainStore(MemoryStore())
    assert [p.protocol.__name__ for p in POWERS if p.on == "store" and p.probe(plain)] == []


@SQL_JOURNAL_ONLY
async def test_a_plain_store_runs_a_turn_with_a_tool_call_under_a_window_policy(
    env: LoopEnv,
) -> None:
    """On SQLite and PostgreSQL, with the SQL journal and ledger: the writers then share no
    transaction, since the store joins none."""
    plain = PlainStore(env.store)
    thread = await plain.create_thread(actor_id="alice", agent="helper", title="t")
    history = [m for i in range(1, 4) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    await plain.append_messages(thread.id, history)
    call = ToolCall(id="c1", name="weather", arguments={"city": "Oslo"})
    model = ScriptedProvider([reply(tool_calls=[call]), reply("it is sunny")])
    loop = AgentLoop(
        store=plain,
        runtime=env.journal,
        ledger=env.ledger,
        model=model,
        agents={"helper": _definition(max_messages=3)},
    )
    result = await loop.run_turn(
        agent="helper",
        thread_id=thread.id,
        actor_id="alice",
        content="q4",
        run_id=str(uuid.uuid4()),
    )

    assert result.message.content == "it is sunny"
    first = [(m.role, m.content) for m in model.calls[0].messages if m.role != "system"]
    assert first == [("user", "q3"), ("assistant", "a3"), ("user", "q4")]
    assert [m.content for m in model.calls[1].messages][-1] == "sunny in Oslo"
    stored = await plain.get_thread(thread.id)
    assert stored is not None
    assert [(m.seq, m.role) for m in stored.messages[-2:]] == [(7, "user"), (8, "assistant")]
    assert stored.messages[-1].tool_results[0].content == "sunny in Oslo"
    assert result.report.read_bound is None, "no bound reached a store that cannot take one"
    assert result.report.rows_read == 7, "the whole thread was read, the user's message too"
    assert [row.purpose for row in result.report.ledger] == ["chat", "chat"]


async def test_a_summarizing_policy_on_a_plain_store_is_refused_with_the_config_error() -> None:
    async def summarize(dropped: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(text="never called")

    with pytest.raises(ConfigError, match="keeps no summaries"):
        AgentLoop(
            store=PlainStore(MemoryStore()),
            runtime=InlineRuntime(),
            ledger=MemoryLedger(),
            model=ScriptedProvider(),
            agents={"helper": _definition(max_messages=3, summarize=summarize)},
        )
