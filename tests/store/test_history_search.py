"""The history search tool over every store: it finds what the prompt lost, only in its own
thread, bounded in rows and bytes, whatever the model writes as a query. Memory takes the
fallback scan; SQLite (FTS5) and PostgreSQL (tsvector) their index."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bounded_agents.core import search
from bounded_agents.core.messages import ChatMessage, Message, to_chat_messages
from bounded_agents.core.ports import AgentStore, supports_history_search
from bounded_agents.core.search import (
    DEFAULT_SEARCH_RESULTS,
    MAX_RESULT_BYTES,
    MAX_SEARCH_RESULTS,
    MESSAGE_CLIP_CHARS,
    HistorySearchTool,
    scan_search,
)
from bounded_agents.core.turn.public import ToolContext
from bounded_agents.store import MemoryStore, SqlAgentStore
from tests.factories import assistant, user
from tests.store.conftest import ContractStore

FACT = "Please note: my order number is ORD-48213."
QUESTION = "What was my order number again?"


def chatter(n: int) -> list[Message]:
    return [
        m
        for i in range(n)
        for m in (user(f"By the way, chapter {i} was about the weather."), assistant("Nice."))
    ]


async def _thread(store: AgentStore, messages: list[Message], actor: str = "alice") -> str:
    thread = await store.create_thread(actor_id=actor, agent="helper")
    await store.append_messages(thread.id, messages)
    return thread.id


async def _search(
    store: AgentStore, thread_id: str, prompt: list[ChatMessage], **arguments: Any
) -> dict[str, Any]:
    result = await HistorySearchTool(store).invoke_in_turn(
        arguments, ToolContext(thread_id=thread_id, prompt=tuple(prompt))
    )
    assert not result.is_error, result.content
    found: dict[str, Any] = json.loads(result.content)
    return found


async def _window(store: AgentStore, thread_id: str, n: int) -> list[ChatMessage]:
    thread = await store.get_thread(thread_id)
    assert thread is not None
    return [
        ChatMessage(role="system", content="You help."),
        *to_chat_messages(thread.messages[-n:]),
    ]


async def test_a_search_finds_a_fact_outside_the_window_and_skips_what_the_prompt_holds(
    store: ContractStore,
) -> None:
    tid = await _thread(
        store, [*chatter(2), user(FACT), assistant("Noted."), *chatter(30), user(QUESTION)]
    )
    prompt = await _window(store, tid, 20)
    assert all("ORD-48213" not in m.content for m in prompt)

    found = await _search(store, tid, prompt, query=QUESTION)

    rows = found["results"]
    # `at` is new with 0012 (on purpose): the SQL stores date their rows, memory has no dates
    assert {k: v for k, v in rows[0].items() if k != "at"} == {
        "seq": 5,
        "role": "user",
        "content": FACT,
    }
    assert ("at" in rows[0]) == isinstance(store, SqlAgentStore)
    assert all(r["content"] != QUESTION for r in rows)  # the question is in the prompt already
    shown = {m.content for m in prompt}
    assert all(r["content"] not in shown for r in rows)


async def test_a_search_never_returns_another_threads_messages(store: ContractStore) -> None:
    mine = await _thread(store, [user("alpha: the project codename is Heron"), *chatter(3)])
    theirs = await _thread(
        store, [user("bravo: the project codename is Heron"), *chatter(3)], actor="bob"
    )

    found = await _search(store, mine, [], query="project codename Heron", k=20)

    assert [r["content"] for r in found["results"]] == ["alpha: the project codename is Heron"]
    other = await _search(store, theirs, [], query="alpha bravo codename", k=20)
    assert [r["content"] for r in other["results"]] == ["bravo: the project codename is Heron"]


async def test_results_are_bounded_in_rows_and_bytes(store: ContractStore) -> None:
    long = "invoice " + "ünïcødé text " * 300  # about 3,900 characters, non-ASCII
    tid = await _thread(store, [user(f"{i} {long}") for i in range(30)])

    default = await _search(store, tid, [], query="invoice")
    widest = await _search(store, tid, [], query="invoice", k=500)

    assert len(default["results"]) == DEFAULT_SEARCH_RESULTS
    assert 0 < len(widest["results"]) <= MAX_SEARCH_RESULTS
    assert all(len(r["content"]) <= MESSAGE_CLIP_CHARS for r in widest["results"])
    body = json.dumps(widest, ensure_ascii=False).encode()
    assert len(body) <= MAX_RESULT_BYTES
    assert widest["omitted"] == MAX_SEARCH_RESULTS - len(widest["results"]) > 0


HOSTILE = ['"', "*", "NEAR(", "-", 'order" OR *', "NEAR(order number, 2)", "-order", "a'b\\c"]
HOSTILE += ["((", "order:*", "'", "''", "\\", "\x00", "", "   ", "AND OR NOT", "^order", "{x}"]


@pytest.mark.parametrize("query", HOSTILE)
async def test_a_hostile_query_never_raises_and_matches_only_its_words(
    store: ContractStore, query: str
) -> None:
    tid = await _thread(store, [user(FACT), *chatter(2)])

    found = await _search(store, tid, [], query=query)

    words = search.search_terms(query)
    for row in found["results"]:
        assert any(w in row["content"].lower() for w in words), (query, row)
    if "order" in words:
        assert found["results"][0]["content"] == FACT


async def test_invalid_arguments_are_an_error_the_model_sees(store: ContractStore) -> None:
    tool = HistorySearchTool(store)
    context = ToolContext(thread_id="nope", prompt=())
    for arguments in ({}, {"query": 3}, {"query": "x", "k": 0}, {"query": "x", "extra": 1}):
        result = await tool.invoke_in_turn(arguments, context)
        assert result.is_error, arguments
    assert (await tool.invoke({"query": "x"})).is_error  # outside a turn it has no thread


def test_the_sql_store_has_a_search_index_and_the_memory_store_falls_back() -> None:
    assert supports_history_search(SqlAgentStore.from_url("sqlite+aiosqlite://"))
    assert not supports_history_search(MemoryStore())


async def test_the_fallback_scan_reads_only_its_newest_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "FALLBACK_SCAN_ROWS", 50)
    memory = MemoryStore()
    tid = await _thread(memory, [user("the meeting room is R-101"), *chatter(40)])
    later = [user("the meeting room is R-202 now")]
    await memory.append_messages(tid, later)

    found = await scan_search(memory, tid, "meeting room", 10)

    assert [m.content for m in found] == ["the meeting room is R-202 now"]  # seq 1 is too old


async def test_the_fallback_ranks_by_distinct_words_then_newest_without_a_transcript_reader() -> (
    None
):
    class BareStore:
        """Only the base port: the fallback reads the thread."""

        def __init__(self) -> None:
            self.inner = MemoryStore()

        async def create_thread(self, **kw: Any) -> Any:
            return await self.inner.create_thread(**kw)

        async def get_thread(self, thread_id: str) -> Any:
            return await self.inner.get_thread(thread_id)

        async def append_messages(self, thread_id: str, messages: Any) -> Any:
            return await self.inner.append_messages(thread_id, messages)

    bare = BareStore()
    tid = await _thread(
        bare, [user("Budget talk."), user("The budget is 40,500 EUR"), user("budget budget")]
    )

    found = await _search(bare, tid, [], query="What is the BUDGET in EUR?")

    assert [r["seq"] for r in found["results"]] == [2, 3, 1]


async def test_a_message_too_long_for_a_tsvector_is_stored_and_its_start_is_searchable(
    sql_store: SqlAgentStore,
) -> None:
    """PostgreSQL refuses a tsvector over 1 MB: the index holds a message's first 100,000
    characters, so an append of a long message of distinct words never fails on it."""
    words = " ".join(f"w{i:07d}x" for i in range(150_000))  # 1.5 M characters, all distinct
    tid = await _thread(sql_store, [user("first " + words)])

    found = await sql_store.search_history(tid, "first w0000001x", limit=5)

    assert [m.seq for m in found] == [1]
