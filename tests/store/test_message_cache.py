"""The turn read keeps the messages it rebuilt (`bounded_agents.store.message_cache`): the next
turn of a thread rebuilds only its new rows, a row that changed is rebuilt, never served stale, and
the cache stays within its bounds."""

from __future__ import annotations

import sqlalchemy as sa

from bounded_agents.core.messages import Message, ToolCall, ToolResult, payload_bytes
from bounded_agents.core.ports import ThreadTurnQuery
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.codec import MESSAGE_COLUMNS, from_row, to_row
from bounded_agents.store.message_cache import MessageCache
from bounded_agents.store.schema import messages
from tests.factories import tool_answer, user
from tests.store.test_hot_read import _sqlalchemy_only


async def test_the_next_turn_read_rebuilds_only_the_rows_it_did_not_read_before(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    history = [m for i in range(10) for m in (user(f"q{i}"), tool_answer(i, 2000))]
    await sql_store.append_messages(thread.id, history)
    query = ThreadTurnQuery(thread_id=thread.id, message_limit=10)
    cache = sql_store.message_cache

    await sql_store.load_thread_for_turn(query)
    assert (cache.hits, cache.misses) == (0, 10)

    await sql_store.append_messages(thread.id, [user("q10"), tool_answer(10, 2000)])
    page = await sql_store.load_thread_for_turn(query)
    assert (cache.hits, cache.misses) == (8, 12), "8 rows were read last turn, 2 are new"
    assert page == await _sqlalchemy_only(sql_store).load_thread_for_turn(query)


async def test_a_row_changed_under_the_cache_is_rebuilt_not_served_stale(
    sql_store: SqlAgentStore,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    await sql_store.append_messages(thread.id, [user("before"), tool_answer(1, 500)])
    query = ThreadTurnQuery(thread_id=thread.id, message_limit=10)
    first = await sql_store.load_thread_for_turn(query)
    assert first is not None and first.messages[0].content == "before"

    async with sql_store.engine.begin() as conn:
        await conn.execute(
            messages.update()
            .where(messages.c.thread_id == thread.id, messages.c.seq == 1)
            .values(content="after")
        )
        await conn.execute(
            messages.update()
            .where(messages.c.thread_id == thread.id, messages.c.seq == 2)
            .values(tool_results=sa.null(), tool_calls=sa.null())
        )
    again = await sql_store.load_thread_for_turn(query)
    assert again is not None
    assert again.messages[0].content == "after"
    assert again.messages[1].tool_results == [] and again.messages[1].tool_calls == []
    assert again == await _sqlalchemy_only(sql_store).load_thread_for_turn(query)


async def test_the_page_counts_its_payload_bytes_from_the_rows_as_the_messages_encode(
    sql_store: SqlAgentStore,
) -> None:
    """`payload_bytes` on the page (what a turn reports as read) is counted from the rows' text,
    not by encoding the messages again; it must equal what encoding them gives, ASCII or not,
    first read (rebuilt) or second (kept)."""
    thread = await sql_store.create_thread(actor_id="alice", agent="helper")
    call = ToolCall(id="c1", name="lire", arguments={"page": "été ☃", "n": 1})
    result = ToolResult(call_id="c1", content="résumé 🙂 " * 300)
    history = [
        user("café?"),
        Message(role="assistant", content="voilà", tool_calls=[call], tool_results=[result]),
        user("plain ascii"),
        tool_answer(2, 2000),
    ]
    await sql_store.append_messages(thread.id, history)
    query = ThreadTurnQuery(thread_id=thread.id, message_limit=10)
    for _ in range(2):
        page = await sql_store.load_thread_for_turn(query)
        assert page is not None and len(page.messages) == 4
        assert page.payload_bytes == sum(payload_bytes(m) for m in history)
    assert sql_store.message_cache.hits == 4, "the second read served the kept messages"


def _row(seq: int, content: str, thread_id: str = "t") -> tuple[object, ...]:
    row = to_row(thread_id, seq, Message(role="user", content=content, run_id="r"))
    return tuple(row[c] for c in MESSAGE_COLUMNS)


def test_an_equal_row_gets_the_same_message_and_equals_a_fresh_rebuild() -> None:
    cache = MessageCache()
    call = ToolCall(id="c1", name="read", arguments={"page": 1})
    message = Message(
        role="assistant",
        content="done",
        tool_calls=[call],
        tool_results=[ToolResult(call_id="c1", content="x" * 100)],
        run_id="r1",
    )
    stored = to_row("t", 7, message)
    row = tuple(stored[c] for c in MESSAGE_COLUMNS)
    first = cache.message("t", row)
    assert first == from_row(row) == message.model_copy(update={"seq": 7})
    assert cache.message("t", tuple(row)) is first
    assert cache.message("other thread", row) is not first, "threads do not share entries"


def test_the_cache_keeps_at_most_its_message_count_dropping_the_least_recently_used() -> None:
    cache = MessageCache(max_messages=3)
    for seq in (1, 2, 3):
        cache.message("t", _row(seq, f"m{seq}"))
    cache.message("t", _row(1, "m1"))  # used again: now the most recent
    cache.message("t", _row(4, "m4"))  # evicts seq 2, the least recently used
    assert len(cache) == 3
    hits = cache.hits
    cache.message("t", _row(1, "m1"))
    assert cache.hits == hits + 1
    cache.message("t", _row(2, "m2"))
    assert cache.hits == hits + 1, "seq 2 was evicted and had to be rebuilt"


def test_the_cache_keeps_at_most_its_byte_budget_and_never_a_huge_message() -> None:
    cache = MessageCache(max_bytes=4000)
    cache.message("t", _row(1, "a" * 1001))  # over a quarter of the budget: not kept
    cache.message("t", _row(1, "\u00e9" * 300))  # 300 characters, but up to 1,200 bytes
    assert len(cache) == 0 and cache.bytes == 0
    for seq in range(2, 7):
        cache.message("t", _row(seq, "b" * 900))
    assert cache.bytes <= 4000 and len(cache) == 4
    cache.message("t", _row(6, "changed"))  # a changed row replaces its entry
    assert cache.bytes == 3 * 900 + len("changed")
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0


def test_json_text_counts_twice_kept_and_decoded() -> None:
    cache = MessageCache()
    message = Message(
        role="assistant",
        content="ok",
        tool_calls=[ToolCall(id="c", name="n", arguments={})],
        tool_results=[ToolResult(call_id="c", content="r" * 50)],
    )
    stored = to_row("t", 1, message)
    cache.message("t", tuple(stored[c] for c in MESSAGE_COLUMNS))
    json_text = len(stored["tool_calls"]) + len(stored["tool_results"])
    assert cache.bytes == len("ok") + 2 * json_text
