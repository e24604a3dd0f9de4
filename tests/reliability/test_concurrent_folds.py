"""Attack: many concurrent turns on one thread whose window folds often. The lease lets one
turn in at a time (409 for the others), and every fold extends the summary exactly once: one
summary row and one ledger row per fold, boundaries strictly increasing, every message either
in the summary or in what the next turn sends, `seq` contiguous, no 5xx."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import sqlalchemy as sa

from bounded_agents.store.schema import ledger, thread_summaries
from bounded_agents.store.sql import SqlAgentStore
from tests.http.conftest import (
    ALICE,
    ModuleFactory,
    make_app,
    new_thread,
    open_client,
    post,
    transcript,
)

ROUNDS = 6
AT_ONCE = 10


async def test_concurrent_turns_on_a_folding_thread_fold_each_boundary_once(
    stack: AsyncExitStack, make_module: ModuleFactory, sql_store: SqlAgentStore
) -> None:
    module = make_module(history={"max_messages": 2, "summarize": True, "fold_messages": 2})
    client = await open_client(stack, make_app(module))
    thread_id = await new_thread(client)
    statuses: list[int] = []
    for round_ in range(ROUNDS):
        responses = await asyncio.gather(
            *(post(client, thread_id, f"round {round_} post {i}") for i in range(AT_ONCE))
        )
        statuses += [r.status_code for r in responses]
    assert set(statuses) <= {200, 409}, statuses
    answered = statuses.count(200)
    assert answered >= ROUNDS  # at least one turn per round got in

    messages = await transcript(client, thread_id)
    assert [m["seq"] for m in messages] == list(range(1, 2 * answered + 1))
    assert [m["role"] for m in messages] == ["user", "assistant"] * answered

    async with sql_store.engine.connect() as conn:
        boundaries = [
            r[0]
            for r in await conn.execute(
                sa.select(thread_summaries.c.covers_through_seq)
                .where(thread_summaries.c.thread_id == thread_id)
                .order_by(thread_summaries.c.covers_through_seq)
            )
        ]
        summary_rows = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(ledger)
                .where(ledger.c.thread_id == thread_id, ledger.c.purpose == "history_summary")
            )
        ).scalar_one()
    assert boundaries, "the thread folded"
    assert boundaries == sorted(set(boundaries)), "each boundary folded once"
    assert summary_rows == len(boundaries), "one ledger row per fold, none twice"

    window = (await client.get(f"/threads/{thread_id}/window", headers=ALICE)).json()
    covered = window["summary"]["covers_through_seq"]
    sent = {m["seq"] for m in window["kept"]} | {m["seq"] for m in window["dropped"]}
    assert covered == boundaries[-1]
    assert all(m["seq"] <= covered or m["seq"] in sent for m in messages), "nothing lost"
