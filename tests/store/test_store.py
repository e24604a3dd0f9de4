"""The store contract over every backend (fixture `store`: memory, SQLite, PostgreSQL), and the
SQL store's own behaviour on SQLite and PostgreSQL (fixture `sql_store`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from bounded_agents.core.messages import Attachment, Message, ToolCall, ToolResult, payload_bytes
from bounded_agents.core.ports import ThreadTurnQuery, ThreadTurnReader, supports_bounded_read
from bounded_agents.errors import InvalidContent, StoreError, ThreadNotFound
from bounded_agents.store import MemoryStore, SqlAgentStore
from bounded_agents.store.schema import messages as messages_table
from tests.factories import assistant, tool_turns, user
from tests.store.conftest import ContractStore


@contextmanager
def captured_sql(store: SqlAgentStore) -> Iterator[list[str]]:
    """Every statement the store sends to the database while the block runs."""
    statements: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", before)
    try:
        yield statements
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", before)


async def _thread_with(store: ContractStore | SqlAgentStore, msgs: list[Message]) -> str:
    thread = await store.create_thread(actor_id="alice", agent="assistant", title="t")
    await store.append_messages(thread.id, msgs)
    return thread.id


async def test_create_and_get_thread_round_trips(store: ContractStore) -> None:
    thread = await store.create_thread(actor_id="alice", agent="assistant", title="Hello")
    loaded = await store.get_thread(thread.id)
    assert loaded is not None
    assert (loaded.id, loaded.actor_id, loaded.agent, loaded.title) == (
        thread.id,
        "alice",
        "assistant",
        "Hello",
    )
    assert loaded.messages == []
    assert await store.get_thread("no-such-thread") is None


async def test_append_sets_contiguous_seq_and_reads_back_in_order(store: ContractStore) -> None:
    thread = await store.create_thread(actor_id="alice", agent="assistant")
    first = await store.append_messages(thread.id, [user("a"), assistant("b")])
    second = await store.append_messages(thread.id, [user("c")])
    assert [m.seq for m in first + second] == [1, 2, 3]
    loaded = await store.get_thread(thread.id)
    assert loaded is not None
    assert [(m.seq, m.content) for m in loaded.messages] == [(1, "a"), (2, "b"), (3, "c")]


async def test_append_to_unknown_thread_raises_thread_not_found(store: ContractStore) -> None:
    with pytest.raises(ThreadNotFound):
        await store.append_messages("00000000-0000-0000-0000-000000000000", [user("x")])


async def test_bounded_read_returns_newest_n_in_order_with_the_bound_in_sql(
    sql_store: SqlAgentStore,
) -> None:
    tid = await _thread_with(sql_store, [user(f"m{i}") for i in range(1, 21)])
    with captured_sql(sql_store) as statements:
        page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, message_limit=5))
    assert page is not None
    assert [m.content for m in page.messages] == ["m16", "m17", "m18", "m19", "m20"]
    assert [m.seq for m in page.messages] == [16, 17, 18, 19, 20]
    assert len(statements) == 1, "page, title and answered flag come back in one round trip"
    # The newest n are the seq range from last_seq - n + 1 to last_seq, both ends read from the
    # thread row in the statement: the database never walks older rows.
    sql = re.sub(r"\$\d+(::\w+)?", "?", statements[0].upper())  # PostgreSQL's $1::VARCHAR
    sql = " ".join(sql.replace("(", " ( ").replace(")", " ) ").split())
    last_seq = "( SELECT THREADS.LAST_SEQ FROM THREADS WHERE THREADS.ID = ? )"
    assert f"PAGE.SEQ >= ( {last_seq} - ? ) + ?" in sql
    assert f"PAGE.SEQ <= {last_seq}" in sql


async def test_bounded_read_without_limit_reads_whole_thread(sql_store: SqlAgentStore) -> None:
    tid = await _thread_with(sql_store, [user(f"m{i}") for i in range(7)])
    with captured_sql(sql_store) as statements:
        page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid))
    assert page is not None and page.title == "t"
    assert [m.content for m in page.messages] == [f"m{i}" for i in range(7)]
    assert "LAST_SEQ -" not in statements[0].upper()


async def test_bounded_read_of_unknown_thread_is_none(sql_store: SqlAgentStore) -> None:
    query = ThreadTurnQuery(thread_id="00000000-0000-0000-0000-000000000000", message_limit=3)
    assert await sql_store.load_thread_for_turn(query) is None


async def test_limit_zero_gives_no_messages_but_the_true_answered_flag(
    sql_store: SqlAgentStore,
) -> None:
    tid = await _thread_with(sql_store, [user("q"), assistant("a"), user("q2")])
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, message_limit=0))
    assert page is not None
    assert page.messages == []
    assert page.has_assistant_message is True
    assert page.title == "t"


async def test_answered_flag_covers_the_whole_thread_not_the_page(
    sql_store: SqlAgentStore,
) -> None:
    # One old answer, then five user messages: a 3-message page holds only user messages.
    tid = await _thread_with(
        sql_store, [user("hi"), assistant("hello"), *[user(f"u{i}") for i in range(5)]]
    )
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, message_limit=3))
    assert page is not None
    assert {m.role for m in page.messages} == {"user"}
    assert page.has_assistant_message is True


async def test_answered_flag_is_false_on_a_thread_never_answered(sql_store: SqlAgentStore) -> None:
    tid = await _thread_with(sql_store, [user("a"), user("b")])
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, message_limit=10))
    assert page is not None
    assert page.has_assistant_message is False
    empty = await sql_store.create_thread(actor_id="alice", agent="assistant")
    page = await sql_store.load_thread_for_turn(
        ThreadTurnQuery(thread_id=empty.id, message_limit=10)
    )
    assert page is not None and page.messages == [] and page.has_assistant_message is False


async def test_seed_figure_window_reads_under_five_percent_of_the_whole_thread(
    sql_store: SqlAgentStore,
) -> None:
    """A 50-turn thread whose turns each ran a 50 KB tool: the seed's 2.6 MB vs 103 KB."""
    tid = await _thread_with(sql_store, tool_turns(50, 50 * 1024))
    whole = await sql_store.get_thread(tid)
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, message_limit=4))
    assert whole is not None and page is not None
    whole_bytes = sum(payload_bytes(m) for m in whole.messages)
    window_bytes = sum(payload_bytes(m) for m in page.messages)
    print(
        f"\nwhole-thread read: {whole_bytes:,} bytes; "
        f"4-message window read: {window_bytes:,} bytes "
        f"({window_bytes / whole_bytes:.1%})"
    )
    assert len(whole.messages) == 100 and len(page.messages) == 4
    assert whole_bytes > 2_500_000
    assert window_bytes < 0.05 * whole_bytes


async def test_rows_fetched_by_the_bounded_read_are_exactly_the_window(
    sql_store: SqlAgentStore,
) -> None:
    tid = await _thread_with(sql_store, tool_turns(30, 1000))
    page = await sql_store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, message_limit=6))
    assert page is not None and len(page.messages) == 6
    # The database itself holds 60 rows for the thread; the read returned 6.
    async with sql_store.engine.connect() as conn:
        total = (
            await conn.execute(sa.select(sa.func.count()).select_from(messages_table))
        ).scalar()
    assert total == 60


async def test_unicode_attachments_tools_and_a_megabyte_round_trip(
    store: ContractStore,
) -> None:
    big = "é漢🙂" * (1024 * 1024 // 3)
    msg = Message(
        role="assistant",
        content="Ünïcödé ✓ 漢字 🙂",
        tool_calls=[ToolCall(id="c1", name="t", arguments={"q": "ß", "n": [1, {"d": None}]})],
        tool_results=[ToolResult(call_id="c1", content=big, is_error=True)],
        attachments=[Attachment(name="a.png", media_type="image/png", data="AAAA")],
        run_id="r1",
    )
    tid = await _thread_with(store, [user(big), msg])
    loaded = await store.get_thread(tid)
    assert loaded is not None
    assert loaded.messages[0].content == big
    assert loaded.messages[1] == msg.model_copy(update={"seq": 2})


async def test_twenty_five_concurrent_appends_keep_seq_unique_and_contiguous(
    sql_store: SqlAgentStore,
    db_url: str,
) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="assistant")
    # Separate stores = separate engines = separate connections, as separate processes would.
    stores = [SqlAgentStore.from_url(db_url) for _ in range(5)]
    try:
        results = await asyncio.gather(
            *[
                stores[i % 5].append_messages(thread.id, [user(f"{i}-a"), assistant(f"{i}-b")])
                for i in range(25)
            ]
        )
    finally:
        await asyncio.gather(*[s.dispose() for s in stores])
    for batch in results:
        assert batch[1].seq == batch[0].seq + 1  # a batch stays together
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None
    assert [m.seq for m in loaded.messages] == list(range(1, 51))
    assert sorted(m.content for m in loaded.messages) == sorted(
        f"{i}-{s}" for i in range(25) for s in "ab"
    )


async def test_nul_content_is_a_clear_error_and_writes_nothing(sql_store: SqlAgentStore) -> None:
    thread = await sql_store.create_thread(actor_id="alice", agent="assistant")
    with pytest.raises(InvalidContent, match="NUL"):
        await sql_store.append_messages(thread.id, [user("fine"), user("bad\x00byte")])
    nul_in_args = Message(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id="c", name="t", arguments={"x": "a\x00"})],
    )
    with pytest.raises(InvalidContent):
        await sql_store.append_messages(thread.id, [nul_in_args])
    loaded = await sql_store.get_thread(thread.id)
    assert loaded is not None and loaded.messages == []
    lone_surrogate = Message(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id="c", name="t", arguments={"x": "\ud800"})],
    )
    with pytest.raises(InvalidContent, match="surrogate"):
        await sql_store.append_messages(thread.id, [user("fine"), lone_surrogate])
    # The thread still takes appends, and seq was not consumed by the refused batch.
    stored = await sql_store.append_messages(thread.id, [user("after")])
    assert stored[0].seq == 1


async def test_driver_errors_become_store_errors() -> None:
    store = SqlAgentStore.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/none", pool_timeout=1)
    try:
        with pytest.raises(StoreError) as info:
            await store.get_thread("x")
        assert "get_thread" in str(info.value)
    finally:
        await store.dispose()


async def test_only_the_sql_store_offers_the_bounded_read(sql_store: SqlAgentStore) -> None:
    assert supports_bounded_read(sql_store)
    assert isinstance(sql_store, ThreadTurnReader)
    assert not supports_bounded_read(MemoryStore())


async def test_a_title_that_cannot_be_stored_is_a_clear_error(sql_store: SqlAgentStore) -> None:
    for title, reason in (("a\x00b", "NUL"), ("a\ud800b", "surrogate")):
        with pytest.raises(InvalidContent, match=reason):
            await sql_store.create_thread(actor_id="alice", agent="assistant", title=title)


async def test_run_messages_reads_one_runs_messages_only(store: ContractStore) -> None:
    thread = await store.create_thread(actor_id="alice", agent="assistant")
    runs = [f"00000000-0000-0000-0000-00000000000{n}" for n in range(3)]
    for run in runs:
        await store.append_messages(
            thread.id,
            [
                Message(role="user", content=f"q {run}", run_id=run),
                Message(role="assistant", content=f"a {run}", run_id=run),
            ],
        )
    found = await store.run_messages(thread.id, runs[1])
    assert [(m.role, m.content, m.seq) for m in found] == [
        ("user", f"q {runs[1]}", 3),
        ("assistant", f"a {runs[1]}", 4),
    ]
    assert await store.run_messages(thread.id, "11111111-0000-0000-0000-000000000000") == []
