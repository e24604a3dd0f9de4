"""Helpers of the erasure tests: a model that records what it was sent and never quotes it back,
and a scan of every column of every table of the database for a marker."""

from __future__ import annotations

from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.core.tokens import estimate_usage
from bounded_agents.providers import EchoModel
from bounded_agents.registry import agent
from bounded_agents.store.sql import SqlAgentStore

SUMMARIZING = {"max_messages": 4, "fold_messages": 4, "summarize": True}
"""A window of 4 messages, folded 4 at a time into the Echo model's extractive summary."""


class RecordingEcho(EchoModel):
    """EchoModel's summaries (they keep each line's text), but a chat answer that never quotes
    the user: so an erased user message is in no answer, and only erasure can remove it from
    the summary. A turn whose user message is a `/tool` command runs as EchoModel runs it (the
    tool call, then an answer). Every request's text is kept, in order, in `sent`."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []
        """(purpose, every message's content joined) of each call."""

    def _respond(self, request: ModelRequest) -> ModelResponse:
        text = "\n".join(m.content or "" for m in request.messages)
        self.sent.append((request.purpose, text))
        users = [m.content or "" for m in request.messages if m.role == "user"]
        if request.purpose == "history_summary" or (users and users[-1].startswith("/")):
            return super()._respond(request)
        content = f"noted ({len(request.messages)} messages)"
        usage = estimate_usage(request, content, [])
        return ModelResponse(content=content, usage=usage, model=self.model)


def _holds(value: Any, marker: str) -> bool:
    """Case-insensitive: a full-text index keeps its terms case-folded (SQLite's FTS5 segments
    hold `mark1f...` for `MARK1F...`), and a copy in another case is a copy all the same."""
    if value is None:
        return False
    if isinstance(value, (bytes, bytearray, memoryview)):
        return marker.lower().encode() in bytes(value).lower()
    return marker.lower() in str(value).lower()


def _scan(conn: Connection, marker: str) -> list[str]:
    found: list[str] = []
    for name in sa.inspect(conn).get_table_names():
        table = sa.Table(name, sa.MetaData(), autoload_with=conn)
        for row in conn.execute(sa.select(table)):
            found += [
                f"{name}.{column.name}"
                for column, value in zip(table.columns, row, strict=True)
                if _holds(value, marker)
            ]
    return found


async def marker_hits(store: SqlAgentStore, marker: str) -> list[str]:
    """`table.column` of every value, in every row of every table the schema reflects, whose
    text (bytes for a binary column) holds `marker`: one entry per hit."""
    async with store.engine.connect() as conn:
        return await conn.run_sync(_scan, marker)


async def count_rows(store: SqlAgentStore, table: str, thread_id: str) -> int:
    async with store.engine.connect() as conn:
        reflected = await conn.run_sync(lambda c: sa.Table(table, sa.MetaData(), autoload_with=c))
        stmt = sa.select(sa.func.count()).where(reflected.c.thread_id == thread_id)
        return int((await conn.execute(stmt)).scalar_one())


@agent(name="seeker", system_prompt="You look things up.", search=True)
class SeekerAgent:
    """An agent with the `search_history` tool: `/search_history <words>` makes RecordingEcho
    call it, and the stored answer then quotes the messages it found."""


async def fetch_views(client: httpx.AsyncClient, thread: str) -> dict[str, str]:
    """Every route that shows a thread's messages, by route: its body as text."""
    routes = {
        "messages": f"/threads/{thread}/messages?limit=200",
        "window": f"/threads/{thread}/window",
        "conversation_items": f"/v1/conversations/{thread}/items?limit=100",
        "inspector": f"/inspect/threads/{thread}",
        "timeline": f"/inspect/threads/{thread}/timeline",
    }
    out: dict[str, str] = {}
    for name, path in routes.items():
        r = await client.get(path, headers={"Authorization": "Bearer key-a"})
        assert r.status_code == 200, (name, r.status_code, r.text[:300])
        out[name] = r.text
    return out
