"""`python -m bench.integrations`: each framework adapter's turn beside the framework's own store.

One turn is what a framework does around its model calls: read the history the next run is
given, then store the run (4 items: the question, a tool call, its output, the answer). The
model is left out on both sides (it costs the same whichever store feeds it). Per backend and
thread length (100 / 1,000 / 10,000 stored items), median of `--reps` turns:

- **OpenAI Agents SDK**: `BoundedSession` (the bounded view, 5 runs) beside the SDK's own
  `SQLAlchemySession` (`get_items()` with no limit, as the runner calls it), same database.
- **Pydantic AI**: `BoundedMessageStore.load`/`save` beside the store users hand-roll (one row
  per message, the whole conversation loaded through `ModelMessagesTypeAdapter`), same database.
- **LangChain**: `BoundedChatMessageHistory` beside a LangGraph checkpointer holding the list in
  its state (`add_messages`; `AsyncSqliteSaver` / `AsyncPostgresSaver` on the same server).

`rows` is the message rows (or items) the read returned: the bound for this store, the whole
thread for the others. Results go to bench/results/integrations.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import asyncpg
import sqlalchemy as sa
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from sqlalchemy.engine import make_url

from bounded_agents.store import SqlAgentStore
from bounded_agents.store.migrate import upgrade_url

RESULTS = Path(__file__).resolve().parent / "results"
LENGTHS = (100, 1_000, 10_000)
KEEP_RUNS = 5
PG_ADMIN = os.environ.get(
    "AGENT_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)

Turn = Callable[[int], Awaitable[int]]
"""One turn (its number): returns the rows its read returned."""


@asynccontextmanager
async def database(backend: str) -> AsyncIterator[str]:
    """A fresh, migrated database for `backend`, removed afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="agent_bench_integrations_") as tmp:
            url = f"sqlite+aiosqlite:///{tmp}/bench.db"
            await upgrade_url(url)
            yield url
        return
    name = f"agent_bench_int_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    dsn = make_url(PG_ADMIN).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    try:
        await upgrade_url(url)
        yield url
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


async def timed(turn: Turn, reps: int) -> tuple[float, int]:
    """Median milliseconds per turn over `reps` turns (after one warm-up), and the rows the
    last turn's read returned."""
    await turn(-1)
    times: list[float] = []
    rows = 0
    for n in range(reps):
        start = time.perf_counter()
        rows = await turn(n)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), rows


# --- OpenAI Agents SDK -------------------------------------------------------------------------


def sdk_run(n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"question {n}"},
        {"type": "function_call", "call_id": f"c{n}", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"page {n} " * 40},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"answer {n}", "annotations": []}],
        },
    ]


async def sdk_turns(url: str, store: SqlAgentStore, length: int) -> dict[str, Turn]:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    from bounded_agents.integrations.openai_agents import BoundedSession

    ours = BoundedSession(f"sdk-{length}", store, keep_runs=KEEP_RUNS)
    theirs = SQLAlchemySession(f"sdk-{length}", engine=store.engine, create_tables=True)
    seed = [i for n in range(length // 4) for i in sdk_run(n)]
    for start in range(0, len(seed), 2000):
        await ours.add_items(seed[start : start + 2000])
        await theirs.add_items(seed[start : start + 2000])

    async def bounded(n: int) -> int:
        await ours.get_items()
        await ours.add_items(sdk_run(length + n))
        return ours.last_rows_read

    async def own(n: int) -> int:
        found = await theirs.get_items()
        await theirs.add_items(sdk_run(length + n))
        return len(found)

    return {"bounded-agents BoundedSession": bounded, "SDK SQLAlchemySession": own}


# --- Pydantic AI -------------------------------------------------------------------------------


async def pydantic_turns(url: str, store: SqlAgentStore, length: int) -> dict[str, Turn]:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    from bounded_agents.integrations.pydantic_ai import BoundedMessageStore

    def run(n: int) -> list[ModelMessage]:
        return [
            ModelRequest(parts=[UserPromptPart(f"question {n}")], run_id=f"run-{length}-{n}"),
            ModelResponse(parts=[ToolCallPart("read", {}, tool_call_id=f"c{n}")]),
            ModelRequest(parts=[ToolReturnPart("read", f"page {n} " * 40, tool_call_id=f"c{n}")]),
            ModelResponse(parts=[TextPart(f"answer {n}")]),
        ]

    ours = BoundedMessageStore(store, keep_runs=KEEP_RUNS)
    cid = f"pai-{length}"
    table = sa.Table(
        "pai_messages",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("conversation_id", sa.String(64), index=True, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    async with store.engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)

    async def hand_rolled_save(messages: list[ModelMessage]) -> None:
        rows = [
            {"conversation_id": cid, "body": json.dumps(d)}
            for d in ModelMessagesTypeAdapter.dump_python(messages, mode="json")
        ]
        async with store.engine.begin() as conn:
            await conn.execute(table.insert(), rows)

    for start in range(0, length // 4, 500):
        batch = [m for n in range(start, min(length // 4, start + 500)) for m in run(n)]
        await ours.save(batch, conversation_id=cid)
        await hand_rolled_save(batch)

    async def bounded(n: int) -> int:
        await ours.load(cid)
        await ours.save(run(length + n + 1), conversation_id=cid)
        return ours.last_rows_read

    async def own(n: int) -> int:
        stmt = sa.select(table.c.body).where(table.c.conversation_id == cid).order_by(table.c.id)
        async with store.engine.connect() as conn:
            bodies = (await conn.execute(stmt)).scalars().all()
        ModelMessagesTypeAdapter.validate_python([json.loads(b) for b in bodies])
        await hand_rolled_save(run(length + n + 1))
        return len(bodies)

    return {"bounded-agents BoundedMessageStore": bounded, "hand-rolled row-per-message": own}


# --- LangChain ---------------------------------------------------------------------------------


class State(TypedDict):
    """The list-in-state a LangGraph chat keeps: every message, checkpointed each step."""

    messages: Annotated[list[AnyMessage], add_messages]


async def langchain_turns(url: str, store: SqlAgentStore, length: int) -> dict[str, Turn]:
    from bounded_agents.integrations.langchain import BoundedChatMessageHistory

    def run(n: int) -> list[BaseMessage]:
        call = {"name": "read", "args": {}, "id": f"c{n}", "type": "tool_call"}
        return [
            HumanMessage(f"question {n}"),
            AIMessage("", tool_calls=[call]),
            ToolMessage(f"page {n} " * 40, tool_call_id=f"c{n}"),
            AIMessage(f"answer {n}"),
        ]

    ours = BoundedChatMessageHistory(f"lc-{length}", store, keep_runs=KEEP_RUNS)
    seed = [m for n in range(length // 4) for m in run(n)]
    for start in range(0, len(seed), 2000):
        await ours.aadd_messages(seed[start : start + 2000])

    seen: list[int] = []

    def respond(state: State) -> dict[str, Any]:
        seen.append(len(state["messages"]))
        n = len(state["messages"])
        return {"messages": run(n)[1:]}

    saver_cm = await _checkpointer(url)
    saver = await saver_cm.__aenter__()
    graph = StateGraph(State).add_node("respond", respond).add_edge(START, "respond")
    app = graph.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": f"lc-{length}"}}
    await app.aupdate_state(config, {"messages": seed})

    async def bounded(n: int) -> int:
        await ours.aget_messages()
        await ours.aadd_messages(run(length + n + 1))
        return ours.last_rows_read

    async def own(n: int) -> int:
        await app.ainvoke({"messages": [HumanMessage(f"question {n}")]}, config=config)
        return seen[-1]

    turns: dict[str, Turn] = {
        "bounded-agents BoundedChatMessageHistory": bounded,
        "LangGraph add_messages checkpointer": own,
    }
    _closers.append(lambda: saver_cm.__aexit__(None, None, None))
    return turns


_closers: list[Callable[[], Awaitable[Any]]] = []


async def _checkpointer(url: str) -> Any:
    if url.startswith("sqlite"):
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = make_url(url).database
        return AsyncSqliteSaver.from_conn_string(f"{path}.langgraph")
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    @asynccontextmanager
    async def setup() -> AsyncIterator[Any]:
        async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()
            yield saver

    return setup()


FRAMEWORKS: dict[str, Callable[[str, SqlAgentStore, int], Awaitable[dict[str, Turn]]]] = {
    "openai-agents": sdk_turns,
    "pydantic-ai": pydantic_turns,
    "langchain": langchain_turns,
}


async def measure(
    backends: list[str], lengths: list[int], reps: int, frameworks: list[str]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for backend in backends:
        for length in lengths:
            for framework in frameworks:
                async with database(backend) as url:
                    store = SqlAgentStore.from_url(url)
                    try:
                        turns = await FRAMEWORKS[framework](url, store, length)
                        for system, turn in turns.items():
                            ms, read = await timed(turn, reps)
                            rows.append(
                                {
                                    "backend": backend,
                                    "framework": framework,
                                    "items": length,
                                    "system": system,
                                    "ms_per_turn": round(ms, 3),
                                    "rows_read": read,
                                }
                            )
                            print(json.dumps(rows[-1]), flush=True)
                    finally:
                        while _closers:
                            await _closers.pop()()
                        await store.dispose()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    header = (
        "| backend | framework | system | items | ms/turn | rows read |\n|---|---|---|--:|--:|--:|"
    )
    lines = [
        f"| {r['backend']} | {r['framework']} | {r['system']} | {r['items']:,} | "
        f"{r['ms_per_turn']:.2f} | {r['rows_read']:,} |"
        for r in rows
    ]
    return "\n".join([header, *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.integrations", description=__doc__)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--json", type=Path, default=RESULTS / "integrations.json")
    args = parser.parse_args(argv)
    rows = asyncio.run(
        measure(
            args.backends.split(","),
            [int(x) for x in args.lengths.split(",")],
            args.reps,
            args.frameworks.split(","),
        )
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
