"""Builders for test data, shared by the store, loop and benchmark tests."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from bounded_agents.core.history import HistoryPolicy
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import LedgerEntry, ModelProvider
from bounded_agents.durable import SqlJournal
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.schema import thread_summaries, threads
from bounded_agents.store.tx import SqlTransaction, open_write

TOUCH_THREAD = (
    threads.update()
    .where(threads.c.id == sa.bindparam("tid"))
    .values(updated_at=sa.bindparam("at", type_=sa.DateTime(timezone=True)))
)
"""A one-row write a test can send in a unit (params `tid`, `at`): the thread's `updated_at`."""


def ledger_entry(thread_id: str, run_id: str = "run-1") -> LedgerEntry:
    """A model call's ledger entry for actor alice (10 prompt and 5 completion tokens)."""
    return LedgerEntry(
        run_id=run_id,
        thread_id=thread_id,
        actor_id="alice",
        agent="helper",
        purpose="chat",
        model="m",
        prompt_tokens=10,
        completion_tokens=5,
    )


def user(text: str, run_id: str | None = None) -> Message:
    return Message(role="user", content=text, run_id=run_id)


def assistant(text: str, run_id: str | None = None) -> Message:
    return Message(role="assistant", content=text, run_id=run_id)


def tool_answer(n: int, tool_bytes: int, run_id: str | None = None) -> Message:
    """An assistant answer that ran one tool returning `tool_bytes` characters."""
    call = ToolCall(id=f"call_{n}", name="read_page", arguments={"url": f"https://example.com/{n}"})
    result = ToolResult(call_id=call.id, content="x" * tool_bytes)
    return Message(
        role="assistant",
        content=f"answer {n}",
        tool_calls=[call],
        tool_results=[result],
        run_id=run_id,
    )


def tool_turns(turns: int, tool_bytes: int) -> list[Message]:
    """`turns` runs of (user question, assistant answer carrying a `tool_bytes` tool result)."""
    out: list[Message] = []
    for n in range(turns):
        run = f"run-{n}"
        out.append(user(f"question {n}", run_id=run))
        out.append(tool_answer(n, tool_bytes, run_id=run))
    return out


def sql_loop(
    store: SqlAgentStore,
    model: ModelProvider,
    policy: HistoryPolicy,
    *,
    agent: str = "helper",
    token_quota: int | None = None,
) -> AgentLoop:
    """A loop with one agent over the store, its SQL journal and ledger on the same engine."""
    definition = AgentDefinition(name=agent, system_prompt="You help.", policy=policy)
    return AgentLoop(
        store=store,
        runtime=SqlJournal(store.engine),
        ledger=SqlLedger(store.engine),
        model=model,
        agents={agent: definition},
        token_quota=token_quota,
    )


def nested(depth: int) -> dict[str, Any]:
    """A JSON object `depth` levels of {"a": ...} deep around {"leaf": true}."""
    doc: dict[str, Any] = {"leaf": True}
    for _ in range(depth):
        doc = {"a": doc}
    return doc


async def open_unit(store: SqlAgentStore, thread_id: str) -> SqlTransaction:
    """A unit of work whose first statement wrote through SQLAlchemy, as a lease check does (on
    asyncpg, the driver's way opens only once SQLAlchemy's BEGIN went out)."""
    return await open_write(
        store.engine,
        "test",
        lambda conn: conn.execute(
            threads.update().where(threads.c.id == thread_id).values(title="in a unit")
        ),
    )


async def summary_rows(store: SqlAgentStore, thread_id: str) -> list[tuple[int, str]]:
    """The thread's stored summaries as (covers_through_seq, text), oldest boundary first."""
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(thread_summaries.c.covers_through_seq, thread_summaries.c.text)
            .where(thread_summaries.c.thread_id == thread_id)
            .order_by(thread_summaries.c.covers_through_seq)
        )
        return [(int(r[0]), str(r[1])) for r in rows]


def toy_summary(prefix: str, messages: list[Message]) -> str:
    """`{prefix} {seq}` of the chunk's last message, then what it said (its first 40
    characters): a toy summary for tests of the fold's mechanics that still shares a term with
    what it folds, as the fold guard asks once notes exist (`core/fold_health.py`)."""
    last = messages[-1]
    said = " ".join(last.content.split())[:40] or " ".join(c.name for c in last.tool_calls)
    return f"{prefix} {last.seq}: {said}"
