"""Review attacks on f752ee4 (a waiting ledger row rides as CTEs in front of the unit's next
write) and 9b4dfa7 (a process-wide LRU of prompt messages' JSON). Each test fails on the code
under review; its docstring says what breaks."""

from __future__ import annotations

import tracemalloc

import pytest

from bounded_agents.core import prefix
from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import LedgerEntry
from bounded_agents.errors import InvalidContent
from bounded_agents.settings import Settings
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.message_cache import MAX_BYTES
from tests.factories import assistant, ledger_entry, open_unit
from tests.store.test_merged_writes import _RUN, _thread_with_run, pg_store

__all__ = ["pg_store"]  # the fixture, used by name


@pytest.mark.postgres
async def test_a_ledger_row_the_database_refuses_is_named_ledger_record_not_the_answers_append(
    pg_store: SqlAgentStore,
) -> None:
    """f752ee4: a refusal of the waiting ledger row's DATA (a DataError: too long a value, a
    NUL, an out-of-range number) carries no table name, so `send_after_waiting` names it by the
    next write's operation: the turn fails with `InvalidContent("append_messages: the database
    refused the data ...")`, i.e. blames the answer's text, which was fine. Before the commit
    the ledger row went alone and the error was `ledger_record`'s."""
    tid = await _thread_with_run(pg_store)
    entry = ledger_entry(tid, _RUN)
    bad = LedgerEntry(**{**entry.model_dump(), "purpose": "p" * 40})  # ledger.purpose is 32
    tx = await open_unit(pg_store, tid)
    try:
        await SqlLedger(pg_store.engine).record(bad, tx=tx)
        with pytest.raises(InvalidContent) as caught:
            await pg_store.append_messages(tid, [assistant("done", run_id=_RUN)], tx=tx)
    finally:
        await tx.close(commit=False)
    assert str(caught.value).startswith("ledger_record"), str(caught.value)


def test_the_kept_prompt_json_is_bounded_in_bytes_like_the_message_cache() -> None:
    """9b4dfa7: `prefix._plain_json` keeps 64 entries whatever their size, and keeps both the
    content (its lru key) and its JSON. A message may hold `max_content_bytes` (256 KB) of
    control characters, each JSON-escaped to 6 bytes (\\u0001): 64 such messages pin about
    115 MB in every worker process until an erasure clears the cache, twice the byte budget of
    a store's whole message cache (`MessageCache`, 64 MB, which also never keeps a message
    over a quarter of it)."""
    prefix.forget_kept_json()
    size = Settings().max_content_bytes
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(prefix.KEPT_JSON):
            content = f"{i:04d}" + "\x01" * (size - 4)
            prefix.prompt_digest([ChatMessage(role="user", content=content)])
            del content
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        prefix.forget_kept_json()
    assert kept <= MAX_BYTES, f"{kept / 2**20:.0f} MiB kept by the prompt JSON cache"
