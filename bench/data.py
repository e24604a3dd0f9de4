"""Seed threads fast: `insert(messages)` executemany in chunks (rows from `codec.to_rows`), then
`threads.last_seq` set to match. No turn-by-turn appends: 100,000 messages load in seconds.

The seed content differs from `tests.factories.tool_turns` on purpose, in two ways:
- tool output is incompressible (base64 of random bytes), not `"x" * n`: PostgreSQL compresses a
  TOASTed repeated character to almost nothing, which would flatter every PostgreSQL read;
- ids, URLs and texts are fixed-width, so a message's size does not depend on its position and
  the window's bytes are the same at every thread length.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.core.messages import Message, ToolCall, ToolResult, payload_bytes
from bounded_agents.store.codec import to_rows
from bounded_agents.store.schema import messages, threads
from bounded_agents.store.sql import SqlAgentStore

TOOL_BYTES = 8192
"""Characters of each assistant answer's tool result."""
CHUNK_ROWS = 1000
"""Rows per executemany (about 4 MB of payload)."""
ACTOR = "bench-actor"
AGENT = "bench"


def tool_output(rng: random.Random, size: int = TOOL_BYTES) -> str:
    """`size` characters of incompressible ASCII text."""
    return base64.b64encode(rng.randbytes(size * 3 // 4 + 3)).decode()[:size]


def seed_message(index: int, rng: random.Random, tool_bytes: int = TOOL_BYTES) -> Message:
    """Message `index` (0-based) of a seeded thread: even ones are user questions, odd ones
    assistant answers carrying one `tool_bytes` tool result."""
    n = index // 2
    run_id = f"seed-{n:09d}"
    if index % 2 == 0:
        return Message(role="user", content=f"question {n:09d}", run_id=run_id)
    call = ToolCall(id=f"call_{n:09d}", name="read_page", arguments={"url": f"https://e.x/{n:09d}"})
    return Message(
        role="assistant",
        content=f"answer {n:09d}",
        tool_calls=[call],
        tool_results=[ToolResult(call_id=call.id, content=tool_output(rng, tool_bytes))],
        run_id=run_id,
    )


def seed_messages(count: int, *, seed: int = 0, tool_bytes: int = TOOL_BYTES) -> Iterator[Message]:
    rng = random.Random(seed)
    for index in range(count):
        yield seed_message(index, rng, tool_bytes)


async def build_thread(
    store: SqlAgentStore, length: int, *, tool_bytes: int = TOOL_BYTES
) -> tuple[str, int]:
    """A thread of `length` seeded messages. Returns (thread id, total payload bytes)."""
    thread = await store.create_thread(actor_id=ACTOR, agent=AGENT, title="bench thread")
    engine: AsyncEngine = store.engine
    total = tokens = 0
    batch: list[Message] = []
    seq = 1
    for message in seed_messages(length, seed=length, tool_bytes=tool_bytes):
        total += payload_bytes(message)
        batch.append(message)
        if len(batch) == CHUNK_ROWS:
            rows, added = to_rows(thread.id, seq, tokens, batch)
            await _insert(engine, rows)
            seq, tokens, batch = seq + len(batch), tokens + added, []
    if batch:
        rows, added = to_rows(thread.id, seq, tokens, batch)
        await _insert(engine, rows)
        tokens += added
    async with engine.begin() as conn:
        await conn.execute(
            threads.update()
            .where(threads.c.id == thread.id)
            .values(last_seq=length, total_tokens=tokens, answered=length > 1)
        )
    return thread.id, total


async def _insert(engine: AsyncEngine, rows: list[dict[str, object]]) -> None:
    async with engine.begin() as conn:
        await conn.execute(messages.insert(), rows)


async def settle(engine: AsyncEngine) -> None:
    """Write out what was just written in bulk before the next figures are timed: PostgreSQL's
    `CHECKPOINT` (the no-window turns at 100,000 messages journal about 1.3 GB, whose
    write-back would otherwise land on the window turns timed next); SQLite's `wal_checkpoint`.

    It was once credited with the slow window turns at 100,000 messages on PostgreSQL (72 ms
    against 31 at 10,000); they had another cause, a plan that read the whole thread when it
    held most of the table (see `bounded_agents.store.statements._turn_read`), and outlived it."""
    statement = "CHECKPOINT" if engine.dialect.name == "postgresql" else "PRAGMA wal_checkpoint"
    async with engine.connect() as conn:
        await conn.execute(sa.text(statement))
        await conn.commit()


async def analyze(engine: AsyncEngine) -> None:
    """Fresh planner statistics, as autovacuum (PostgreSQL) or `PRAGMA optimize` would leave."""
    async with engine.begin() as conn:
        await conn.execute(sa.text("ANALYZE"))
