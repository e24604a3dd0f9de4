"""`IntactSummarySaver` (a fold outside a run, the adapters'): a summary is saved only while
every message it was made from is stored, decided under the lock an erasure takes. The race
that matters: an erasure that has taken the thread and deleted the message, not yet committed,
when the save begins. The save must wait for it and then refuse, never store the summary."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from bounded_agents.core.ports import ThreadSummary, supports_intact_summaries
from bounded_agents.store import MemoryStore, SqlAgentStore
from bounded_agents.store.schema import messages, threads
from tests.factories import summary_rows, user
from tests.store.conftest import ContractStore


def _summary(through: int) -> ThreadSummary:
    return ThreadSummary(text="notes", covers_through_seq=through, model="m")


async def _thread(store: ContractStore, n: int) -> str:
    thread = await store.create_thread(actor_id="alice", agent="helper")
    await store.append_messages(thread.id, [user(f"message {i}") for i in range(n)])
    return thread.id


async def test_a_summary_is_saved_while_its_messages_are_stored_and_refused_after_one_is_erased(
    store: ContractStore,
) -> None:
    assert supports_intact_summaries(store)
    tid = await _thread(store, 6)
    assert await store.delete_message(tid, 2)  # an older gap: not among what was folded

    assert await store.save_summary_if_intact(tid, _summary(4), [1, 3, 4])
    assert await store.delete_message(tid, 5)
    assert not await store.save_summary_if_intact(tid, _summary(6), [5, 6])

    latest = await store.latest_summary(tid)
    assert latest is not None and latest.covers_through_seq == 4


async def test_a_save_waits_for_an_uncommitted_erasure_and_then_refuses(
    sql_store: SqlAgentStore,
) -> None:
    tid = await _thread(sql_store, 4)
    postgres = sql_store.engine.dialect.name == "postgresql"
    async with sql_store.engine.connect() as erasure:
        await erasure.begin()
        if postgres:  # the erasure's first statement (`store.erase._LOCK`)
            await erasure.execute(
                sa.select(threads.c.id).where(threads.c.id == tid).with_for_update()
            )
        await erasure.execute(
            messages.delete().where(messages.c.thread_id == tid, messages.c.seq == 2)
        )
        save = asyncio.create_task(sql_store.save_summary_if_intact(tid, _summary(3), [1, 2, 3]))
        await asyncio.sleep(0.3)
        assert not save.done()  # held by the erasure's lock
        await erasure.commit()

    assert await asyncio.wait_for(save, 10) is False
    assert await summary_rows(sql_store, tid) == []


def test_the_memory_store_has_the_power() -> None:
    assert supports_intact_summaries(MemoryStore())


async def test_a_summary_written_on_an_erased_summary_is_refused(store: ContractStore) -> None:
    """The new summary carries the notes of the one it was written on (`base`); an erasure of
    a message that one covers deletes it, so the new one is refused too."""
    tid = await _thread(store, 8)
    assert await store.save_summary_if_intact(tid, _summary(4), [1, 2, 3, 4])
    assert await store.save_summary_if_intact(tid, _summary(6), [5, 6], base=4)
    assert await store.delete_message(tid, 2)  # deletes the summaries ending at 4 and 6

    assert not await store.save_summary_if_intact(tid, _summary(8), [7, 8], base=6)
    assert await store.latest_summary(tid) is None
