"""Hostile `search_history` queries and `k` values through the tool, on both databases: FTS
syntax, tsquery operators, NUL, a lone surrogate, bidi controls, scripts and case folding, half
a megabyte, ten thousand terms. None raises or comes back as a tool error, each result is JSON
within `MAX_RESULT_BYTES` (attack round 4: all held; kept so they keep holding, the value-form
lookup of `core.search_forms` included)."""

from __future__ import annotations

import json
import logging

import pytest

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.search import MAX_RESULT_BYTES, HistorySearchTool
from bounded_agents.core.turn.public import ToolContext
from bounded_agents.store import SqlAgentStore
from tests.factories import assistant, user

ARABIC = "\u0627\u0644\u0639\u0631\u0628\u064a\u0629"
QUERIES = [
    "", " ", "\x00", "a\x00b", '"', "'", "''", "\\", "*", "NEAR(a b)", "a -b", "a:b", "^a",
    "(", ")", "AND", "OR NOT", "a | b & !c", "<->", "a <-> b", "\ud800", "\u202ealpha\u202c",
    ARABIC, "alpha" * 100_000, " ".join(f"w{i}" for i in range(10_000)),
    "\uff46\uff55\uff4c\uff4c", "\u0130stanbul", "\u00df", "caf\u00e9", "\u0301\u0301",
    "a" * 3000, "%_", "$1", "{}", "[]", "ORD-", "ORD-1 ORD-2 ORD-3 ORD-4", "ab-12 cd-34 ef-56",
    "alpha\x00", "\ud800 alpha",
]  # fmt: skip


@pytest.mark.parametrize("query", QUERIES, ids=range(len(QUERIES)))
async def test_a_hostile_query_never_raises(
    sql_store: SqlAgentStore, query: str, caplog: pytest.LogCaptureFixture
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(
        thread.id,
        [
            user("alpha beta caf\u00e9 \u0130stanbul stra\u00dfe, order ORD-12345"),
            assistant(f"gamma {ARABIC}"),
            user("Actually, use ORD-54321 instead."),
        ],
    )
    tool = HistorySearchTool(sql_store)
    ctx = ToolContext(thread_id=thread.id, prompt=(ChatMessage(role="user", content="x"),))
    for k in (1, 20, 10**9):
        result = await tool.invoke_in_turn({"query": query, "k": k}, ctx)
        assert not result.is_error, result.content
        assert len(result.content.encode()) <= MAX_RESULT_BYTES
        assert isinstance(json.loads(result.content)["results"], list)
        if query in ("alpha\x00", "\ud800 alpha"):  # a separator in every locale
            assert 1 in [r["seq"] for r in json.loads(result.content)["results"]], query
    # nothing failed quietly either (the replies and the form lookup log and go on)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("query", QUERIES, ids=range(len(QUERIES)))
async def test_the_stores_own_search_takes_a_hostile_query_as_words(
    sql_store: SqlAgentStore, query: str
) -> None:
    """The store called directly (an adapter, a user's own code), without the tool's cleaning:
    a NUL or a lone surrogate once reached asyncpg, which cannot send either, and came back
    as a 503-class `StoreError` ("database error"), read as an outage. Replaced by U+FFFD
    instead, it was a letter of "alpha" on a database in the C locale (Citus's test nodes)."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user("alpha beta gamma")])

    found = await sql_store.search_history(thread.id, query, limit=5)

    assert all(h.seq == 1 for h in found)
    if query in ("alpha\x00", "\ud800 alpha"):
        assert [h.seq for h in found] == [1]
