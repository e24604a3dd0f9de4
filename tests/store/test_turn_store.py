"""`TurnStore`: one read path and one write path over any store, bounded or not."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import Thread, ThreadSummary, ThreadTurnQuery
from bounded_agents.core.turn.store import TurnStore
from bounded_agents.errors import ConfigError, ThreadNotFound
from bounded_agents.store import MemoryStore
from tests.factories import assistant, user
from tests.store.conftest import ContractStore


class PlainStore:
    """Only the three methods of the base `AgentStore` port: no power at all."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    async def create_thread(self, *, actor_id: str, agent: str, title: str | None = None) -> Thread:
        return await self.inner.create_thread(actor_id=actor_id, agent=agent, title=title)

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self.inner.get_thread(thread_id)

    async def append_messages(self, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        return await self.inner.append_messages(thread_id, messages)


async def _thread(store: ContractStore | PlainStore, n: int) -> str:
    thread = await store.create_thread(actor_id="alice", agent="assistant")
    await store.append_messages(thread.id, [user(f"m{i}") for i in range(1, n + 1)])
    return thread.id


async def test_a_read_returns_the_newest_messages_the_query_selects_on_every_backend(
    store: ContractStore,
) -> None:
    tid = await _thread(store, 6)
    read = await TurnStore(store).read(ThreadTurnQuery(thread_id=tid, message_limit=2))
    assert [(m.seq, m.content) for m in read.page.messages] == [(5, "m5"), (6, "m6")]
    assert read.page.skipped == 4
    assert len(read.read) == (2 if read.bounded else 6)


async def test_a_read_of_an_unknown_thread_raises_thread_not_found(store: ContractStore) -> None:
    with pytest.raises(ThreadNotFound):
        await TurnStore(store).read(ThreadTurnQuery(thread_id="no-such-thread"))


async def test_an_answer_appended_with_its_prompt_digest_comes_back_with_the_next_read(
    store: ContractStore,
) -> None:
    tid = await _thread(store, 1)
    turns = TurnStore(store)
    stored = await turns.append(tid, [assistant("a")], last_prompt="digest", reported_tokens=42)
    assert [m.seq for m in stored] == [2]
    page = (await turns.read(ThreadTurnQuery(thread_id=tid))).page
    assert (page.last_prompt, page.reported_tokens) == ("digest", 42)
    assert page.has_assistant_message


async def test_a_saved_summary_bounds_a_read_after_it(store: ContractStore) -> None:
    tid = await _thread(store, 5)
    turns = TurnStore(store)
    await turns.save_summary(tid, ThreadSummary(text="s", covers_through_seq=3))
    page = (await turns.read(ThreadTurnQuery(thread_id=tid, after_summary=True))).page
    assert [m.seq for m in page.messages] == [4, 5]
    assert page.summary is not None and page.summary.covers_through_seq == 3


async def test_a_plain_store_is_read_whole_and_cut_in_memory_like_a_bounded_one() -> None:
    plain = PlainStore()
    tid = await _thread(plain, 6)
    turns = TurnStore(plain)
    read = await turns.read(ThreadTurnQuery(thread_id=tid, message_limit=2))
    assert not read.bounded and len(read.read) == 6
    assert [m.seq for m in read.page.messages] == [5, 6]
    stored = await turns.append(tid, [assistant("a")], last_prompt="dropped")
    assert [m.seq for m in stored] == [7]
    assert not turns.keeps_summaries
    with pytest.raises(ConfigError):
        await turns.save_summary(tid, ThreadSummary(text="s", covers_through_seq=1))
