"""Many turns at once over real HTTP against ONE app on PostgreSQL: nothing lost, nothing
doubled, `seq` stays contiguous, a busy thread answers 409 (and stores nothing), and a small
connection pool queues instead of failing or hanging.

50 threads x 5 turns. The 5 turns of a thread are sent all at once too, so most of them find
the thread busy: each 409 is retried with a short, bounded backoff and counted. The pool is
configured explicitly (5 + 5 connections, 30 s checkout timeout), so exhaustion would show up
as 503 `store_error` rather than as a hang. The timeout is generous on purpose: 250 requests
queue on 10 connections, and on a loaded 2-core machine one waiter once took over 10 s.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import httpx
import pytest
import sqlalchemy as sa

from bounded_agents.module import AgentModule
from bounded_agents.providers import EchoModel
from bounded_agents.store.schema import messages, runs
from bounded_agents.store.sql import SqlAgentStore
from tests.conftest import empty_database
from tests.http.conftest import (
    ALICE,
    BOB,
    HelperAgent,
    assert_error,
    http_settings,
    live_client,
    make_app,
    new_thread,
    post,
    serve_live,
)

pytestmark = pytest.mark.postgres

THREADS = 50
TURNS = 5
MAX_TRIES = 50
"""Attempts per turn before the test gives up on it (a 409 is retried, nothing else is)."""
BACKOFF_BASE, BACKOFF_CAP = 0.005, 0.1
"""Seconds: retry n waits min(BASE * 2**n, CAP) plus up to 50% jitter."""
CLIENT_TIMEOUT = 30.0
"""Seconds per request: longer than the pool's checkout timeout, so a starved pool answers 503
before the client gives up."""
TEST_TIMEOUT = 90.0
"""The whole load phase must end within this (the test is meant to take well under 60 s)."""


@dataclass
class Tally:
    posts: int = 0
    busy: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    run_ids: dict[str, set[str]] = field(default_factory=dict)
    """thread id -> run ids of the turns answered 200."""
    failures: list[str] = field(default_factory=list)


async def _turn(
    client: httpx.AsyncClient,
    thread_id: str,
    headers: dict[str, str],
    content: str,
    tally: Tally,
    rng: random.Random,
) -> None:
    for attempt in range(MAX_TRIES):
        r = await post(client, thread_id, content, headers=headers)
        tally.posts += 1
        tally.statuses[r.status_code] += 1
        if r.status_code == 200:
            body = r.json()
            assert body["message"]["role"] == "assistant", body
            tally.run_ids.setdefault(thread_id, set()).add(body["run_id"])
            return
        if r.status_code != 409:
            tally.failures.append(f"{content}: {r.status_code} {r.text[:300]}")
            return
        assert_error(r, 409, "thread_busy")
        tally.busy += 1
        delay = min(BACKOFF_BASE * 2**attempt, BACKOFF_CAP)
        await asyncio.sleep(delay * (1 + rng.random() / 2))
    tally.failures.append(f"{content}: still busy after {MAX_TRIES} tries")


async def test_fifty_threads_of_five_concurrent_turns_lose_nothing(
    postgres_url: str, stack: AsyncExitStack
) -> None:
    settings = http_settings(
        database_url=postgres_url, db_pool_size=5, db_max_overflow=5, db_pool_timeout=30
    )
    module = AgentModule.for_root(
        model=EchoModel(delay=0.005),
        agents=[HelperAgent],
        history={"max_messages": 20},
        settings=settings,
    )
    store = module.store
    assert isinstance(store, SqlAgentStore)
    pool = store.engine.pool
    assert (pool.size(), getattr(pool, "_max_overflow", None)) == (5, 5)  # type: ignore[attr-defined]
    await empty_database(store.engine)
    url = await serve_live(stack, make_app(module))
    client = await live_client(stack, url)

    owners = [ALICE if i % 2 == 0 else BOB for i in range(THREADS)]
    thread_ids = [await new_thread(client, owners[i]) for i in range(THREADS)]
    expected = {
        tid: {f"thread {i} turn {j}" for j in range(TURNS)} for i, tid in enumerate(thread_ids)
    }

    # One client per thread, as 50 users would have: httpx's pool scans every queued request
    # against every connection, so one shared client with 250 requests in flight spends the
    # test's CPU in the client rather than in the app.
    clients = [
        await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=url,
                trust_env=False,
                timeout=CLIENT_TIMEOUT,
                limits=httpx.Limits(max_connections=TURNS),
            )
        )
        for _ in thread_ids
    ]
    tally = Tally()
    rng = random.Random(7)
    started = time.perf_counter()
    async with asyncio.timeout(TEST_TIMEOUT):
        await asyncio.gather(
            *(
                _turn(clients[i], tid, owners[i], content, tally, rng)
                for i, tid in enumerate(thread_ids)
                for content in sorted(expected[tid])
            )
        )
    wall = time.perf_counter() - started
    turns = THREADS * TURNS
    print(
        f"\nconcurrency: {turns} turns on {THREADS} threads, {tally.posts} POSTs, "
        f"{tally.busy} answered 409 thread_busy and retried, statuses {dict(tally.statuses)}, "
        f"wall {wall:.1f} s ({turns / wall:.1f} turns/s)"
    )

    assert tally.failures == []
    assert not [s for s in tally.statuses if s >= 500], tally.statuses
    assert set(tally.statuses) <= {200, 409}, tally.statuses
    assert tally.statuses[200] == turns
    assert tally.posts == turns + tally.busy  # every POST was either a turn or a counted 409
    assert tally.busy > 0, "the turns of a thread never overlapped: the test tested nothing"

    # What the database holds, read directly (not through the API under test).
    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(
                    messages.c.thread_id,
                    messages.c.seq,
                    messages.c.role,
                    messages.c.content,
                    messages.c.run_id,
                ).order_by(messages.c.thread_id, messages.c.seq)
            )
        ).all()
        run_rows = (await conn.execute(sa.select(runs.c.thread_id, runs.c.id, runs.c.status))).all()

    by_thread: dict[str, list[sa.Row[tuple[str, int, str, str, str | None]]]] = {}
    for row in rows:
        by_thread.setdefault(row.thread_id, []).append(row)
    assert set(by_thread) == set(thread_ids)
    for tid in thread_ids:
        stored = by_thread[tid]
        assert len(stored) == 2 * TURNS, (tid, len(stored))
        assert [r.seq for r in stored] == list(range(1, 2 * TURNS + 1)), tid
        # turns on one thread are serialized: user, assistant, user, assistant...
        assert [r.role for r in stored] == ["user", "assistant"] * TURNS, tid
        users = [r.content for r in stored if r.role == "user"]
        assert sorted(users) == sorted(expected[tid]), tid  # none lost, none doubled
        for user, answer in zip(stored[::2], stored[1::2], strict=True):
            assert user.run_id == answer.run_id, tid  # each answer follows its own question
            assert user.content in answer.content  # EchoModel quotes the question it answered
        # the runs that stored messages are exactly the runs answered 200: no 409 stored one
        assert {r.run_id for r in stored} == tally.run_ids[tid], tid

    assert len(rows) == 2 * turns
    # a refused turn never started a run: one completed run per answered turn, nothing else
    assert Counter(r.status for r in run_rows) == {"completed": turns}
    assert {r.id for r in run_rows} == {rid for ids in tally.run_ids.values() for rid in ids}
