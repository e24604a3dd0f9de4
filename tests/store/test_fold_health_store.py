"""`FoldHealthStore` (issue 36): a thread's fold health is kept with the thread, on every
backend; the bounded turn read returns it on its page at no extra statement; it goes with the
thread when the thread is erased."""

from __future__ import annotations

from bounded_agents.core.ports import (
    FoldHealth,
    ThreadTurnQuery,
    supports_fold_health,
)
from bounded_agents.core.turn.store import TurnStore
from bounded_agents.store import SqlAgentStore
from tests.factories import assistant, user
from tests.store.conftest import ContractStore

FAILING = FoldHealth(outcome="unrelated", failures=3, retry_after_seq=40, owed=17)


async def test_fold_health_is_kept_replaced_and_cleared(store: ContractStore) -> None:
    assert supports_fold_health(store)
    thread = await store.create_thread(actor_id="a", agent="helper")
    other = await store.create_thread(actor_id="a", agent="helper")
    assert await store.fold_health(thread.id) is None, "a new thread never failed"
    await store.save_fold_health(thread.id, FAILING)
    assert await store.fold_health(thread.id) == FAILING
    assert await store.fold_health(other.id) is None, "one thread's health only"
    healed = FoldHealth(outcome="ok")
    await store.save_fold_health(thread.id, healed)
    assert await store.fold_health(thread.id) == healed
    await store.save_fold_health(thread.id, None)
    assert await store.fold_health(thread.id) is None


async def test_the_turn_read_returns_the_health_and_it_goes_with_the_thread(
    store: ContractStore,
) -> None:
    thread = await store.create_thread(actor_id="a", agent="helper")
    await store.append_messages(thread.id, [user("q1"), assistant("a1"), user("q2")])
    turn_store = TurnStore(store)
    query = ThreadTurnQuery(thread_id=thread.id, message_limit=2, after_summary=True)
    assert (await turn_store.read(query)).page.fold_health is None
    await store.save_fold_health(thread.id, FAILING)
    page = (await turn_store.read(query)).page
    assert page.fold_health == FAILING and len(page.messages) == 2
    empty = ThreadTurnQuery(thread_id=thread.id, message_limit=0)
    assert (await turn_store.read(empty)).page.fold_health == FAILING, "an empty page too"
    assert await store.delete_thread(thread.id)  # type: ignore[attr-defined]
    assert await store.fold_health(thread.id) is None


async def test_the_bounded_read_carries_it_in_its_one_statement(sql_store: SqlAgentStore) -> None:
    thread = await sql_store.create_thread(actor_id="a", agent="helper")
    await sql_store.append_messages(thread.id, [user("q1"), assistant("a1")])
    await sql_store.save_fold_health(thread.id, FAILING)
    statements: list[str] = []

    from sqlalchemy import event

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(sql_store.engine.sync_engine, "before_cursor_execute", count)
    try:
        page = await sql_store.load_thread_for_turn(
            ThreadTurnQuery(thread_id=thread.id, message_limit=5)
        )
    finally:
        event.remove(sql_store.engine.sync_engine, "before_cursor_execute", count)
    assert page is not None and page.fold_health == FAILING
    assert len(statements) == 1


async def test_an_unreadable_stored_health_is_taken_as_healthy(sql_store: SqlAgentStore) -> None:
    """The backoff is an economy: a row a newer version wrote in a shape this one cannot read
    never fails a turn."""
    import sqlalchemy as sa

    from bounded_agents.store.schema import threads

    thread = await sql_store.create_thread(actor_id="a", agent="helper")
    async with sql_store.engine.begin() as conn:
        await conn.execute(
            sa.update(threads).where(threads.c.id == thread.id).values(fold_health="{not json")
        )
    assert await sql_store.fold_health(thread.id) is None
