"""AGENT_DURABLE=inline answers as the SQL journal does (attack round 5): a run of a thread
erased whole is a 404, a turn queued behind a thread's erasure is refused, a keyed retry of an
erased answer is 410. Each case runs under both runtimes, the journal as the reference."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    http_settings,
    make_app,
    new_thread,
    open_client,
    post,
)


@pytest.mark.parametrize("durable", ["sql", "inline"])
async def test_a_run_of_an_erased_thread_is_gone(
    stack: AsyncExitStack, make_module: ModuleFactory, durable: str
) -> None:
    module = make_module(settings=http_settings(durable=durable))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    r = await post(client, thread_id, "hello there")
    assert r.status_code == 200, r.text
    run_id = r.json()["run_id"]
    assert (await client.get(f"/runs/{run_id}", headers=ALICE)).status_code == 200
    d = await client.delete(f"/threads/{thread_id}", headers=ALICE)
    assert d.status_code == 204, d.text
    after = await client.get(f"/runs/{run_id}", headers=ALICE)
    v1 = await client.get(f"/v1/responses/{run_id}", headers=ALICE)
    assert after.status_code == 404, after.text
    assert v1.status_code == 404, v1.text


@pytest.mark.parametrize("durable", ["sql", "inline"])
async def test_a_turn_queued_behind_a_thread_erasure(
    stack: AsyncExitStack, make_module: ModuleFactory, durable: str
) -> None:
    """A turn whose ownership check passed just before a DELETE of the thread took it: under
    inline the turn waits for the erasure (`_erasures_done`), then runs on a thread that is
    gone, and is refused like any turn on an unknown thread (404). No row of it is left."""
    module = make_module(settings=http_settings(durable=durable))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    store = module.store
    entered, release = asyncio.Event(), asyncio.Event()
    real = store.delete_thread

    async def slow_delete(tid: str) -> bool:  # the erasure takes a while (FTS merge, a lock)
        entered.set()
        await release.wait()
        return await real(tid)

    store.delete_thread = slow_delete  # type: ignore[method-assign]
    erasure = asyncio.create_task(client.delete(f"/threads/{thread_id}", headers=ALICE))
    await asyncio.wait_for(entered.wait(), 5)
    turn = asyncio.create_task(post(client, thread_id, "a secret the erasure should not keep"))
    await asyncio.sleep(0.3)
    release.set()
    erased, answered = await erasure, await turn
    rows = await _rows_of(module, thread_id)
    assert erased.status_code == 204
    # inline: it waited for the erasure, then found no thread; the journal: it ran before the
    # erasure's transaction began, and the erasure took its answer with the thread
    assert answered.status_code == (404 if durable == "inline" else 200), answered.text
    assert rows == {}, rows


async def _rows_of(module, thread_id: str) -> dict[str, int]:
    import sqlalchemy as sa

    from bounded_agents.store.schema import metadata

    out = {}
    async with module.store.engine.connect() as conn:
        for table in metadata.sorted_tables:
            if "thread_id" in table.c and table.name != "ledger":  # ledger rows stay
                n = (
                    await conn.execute(
                        sa.select(sa.func.count()).where(table.c.thread_id == thread_id)
                    )
                ).scalar_one()
                if n:
                    out[table.name] = n
    return out


@pytest.mark.parametrize("durable", ["sql", "inline"])
async def test_a_keyed_retry_after_its_answer_was_erased_is_410(
    stack: AsyncExitStack, make_module: ModuleFactory, durable: str
) -> None:
    module = make_module(settings=http_settings(durable=durable))
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    url = f"/agents/helper/threads/{thread_id}/messages"
    key = {**ALICE, "Idempotency-Key": "k-1"}
    first = await client.post(url, headers=key, json={"content": "hello"})
    assert first.status_code == 200, first.text
    d = await client.delete(f"/threads/{thread_id}/messages/2", headers=ALICE)
    assert d.status_code == 204
    again = await client.post(url, headers=key, json={"content": "hello"})
    assert again.status_code == 410, again.text
    assert again.json()["error"]["code"] == "answer_erased"
