"""The read figures: raw-driver floor, bounded read (`load_thread_for_turn`), full read
(`get_thread`), and, for the bounded read, where its time goes."""

from __future__ import annotations

import contextlib
import gc
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bench.floor import AsyncpgFloor, Floor, open_floor
from bench.stats import reps_within, summarize, time_async
from bench.trips import calls_of, count_asyncpg, count_engine_asyncpg
from bounded_agents.core.messages import (
    Message,
    decode_attachments,
    decode_tool_calls,
    decode_tool_results,
    payload_bytes,
)
from bounded_agents.core.ports import ThreadTurnPage, ThreadTurnQuery
from bounded_agents.store.codec import from_row
from bounded_agents.store.engine import make_engine
from bounded_agents.store.sql import PAGE_AT, TURN_READ_LIMITED, SqlAgentStore

WARMUP = 3


async def window_bytes(
    store: SqlAgentStore, thread_id: str, window: int, before: int | None
) -> int:
    """Payload bytes of the newest `window` messages (seq < `before`), read independently of the
    bounded read (the HTTP transcript page): what a window of that size holds."""
    page = await store.list_messages(thread_id, limit=window, before=before)
    return sum(payload_bytes(m) for m in page)


async def bounded_reads(
    store: SqlAgentStore, floor: Floor, threads: dict[int, str], *, window: int, reps: int
) -> dict[int, dict[str, Any]]:
    """The raw floor and the store's bounded read, interleaved: each round reads every thread
    length, both ways, the starting length and the order of the pair rotating, so drift on a
    noisy machine hits every length and both readers alike."""
    queries = {
        n: ThreadTurnQuery(thread_id=tid, message_limit=window) for n, tid in threads.items()
    }
    samples: dict[int, dict[str, list[float]]] = {n: {"floor": [], "bounded": []} for n in threads}

    def readers(n: int) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
        tid, query = threads[n], queries[n]
        return [
            ("floor", lambda: floor.read(tid, window)),
            ("bounded", lambda: store.load_thread_for_turn(query)),
        ]

    for n in threads:
        for _ in range(WARMUP):
            for _name, fn in readers(n):
                await fn()
    gc.collect()
    order = list(threads)
    for i in range(reps):
        k = i % len(order)
        for n in order[k:] + order[:k]:
            pair = readers(n)
            for name, fn in pair if i % 2 == 0 else reversed(pair):
                seconds, _ = await time_async(fn)
                samples[n][name].append(seconds)

    out: dict[int, dict[str, Any]] = {}
    for n, tid in threads.items():
        page = await store.load_thread_for_turn(queries[n])
        assert page is not None
        out[n] = {
            "floor": summarize(samples[n]["floor"]),
            "bounded": summarize(samples[n]["bounded"]),
            "bounded_rows": len(page.messages),
            "floor_rows": sum(1 for r in await floor.read(tid, window) if r[PAGE_AT] is not None),
            "bounded_bytes": sum(payload_bytes(m) for m in page.messages),
            "window_bytes": await window_bytes(store, tid, window, None),
        }
    return out


async def commit_floor(floor: Floor, thread_id: str, *, window: int, reps: int) -> dict[str, float]:
    """The commit floor (one committed one-UPDATE transaction, `bench.floor`) and the read
    floor, interleaved on the floor's connection: medians in ms."""
    timed = await interleaved(
        {"read": lambda: floor.read(thread_id, window), "commit": floor.commit_one}, reps
    )
    return {"read_ms": timed["read"] / 1e3, "commit_ms": timed["commit"] / 1e3}


async def full_read(
    store: SqlAgentStore, thread_id: str, *, reps: int, budget_s: float, cap: int | None
) -> dict[str, Any]:
    """`get_thread`: one warm-up read (which also tells how long one takes), then as many reps
    as `budget_s` allows: at least 3, at most `reps`, at most `cap`."""
    one_s, thread = await time_async(lambda: store.get_thread(thread_id))
    assert thread is not None
    rows = len(thread.messages)
    total = sum(payload_bytes(m) for m in thread.messages)
    del thread
    n = reps_within(one_s, reps, budget_s, minimum=3)
    if cap is not None:
        n = min(n, cap)
    samples: list[float] = []
    for _ in range(n):
        gc.collect()
        seconds, _ = await time_async(lambda: store.get_thread(thread_id))
        samples.append(seconds)
    return {
        "full": summarize(samples),
        "full_capped": n < reps,
        "full_rows": rows,
        "full_bytes": total,
    }


def _sync_us(fn: Callable[[], Any], reps: int) -> float:
    """Median microseconds of a synchronous `fn()`."""
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return summarize(samples)["median_ms"] * 1e3


async def interleaved(
    series: dict[str, Callable[[], Awaitable[Any]]], reps: int
) -> dict[str, float]:
    """Median microseconds of each async `fn`, taken round-robin (the starting one rotating) so
    drift hits every series alike."""
    names = list(series)
    for name in names:
        for _ in range(WARMUP):
            await series[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    for i in range(reps):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            seconds, _ = await time_async(series[name])
            samples[name].append(seconds)
    return {name: summarize(v)["median_ms"] * 1e3 for name, v in samples.items()}


async def bounded_read_breakdown(
    store: SqlAgentStore, floor: Floor, url: str, thread_id: str, *, window: int, reps: int
) -> dict[str, Any]:
    """Where the bounded read's time goes, each part timed on its own (medians, microseconds;
    the async parts interleaved round-robin):

    - total_cold: the same with the store's message cache emptied first, so every row of the
      page is rebuilt (`total` repeats one read: every row is kept from the read before);
    - pool: check a connection out of the store's pool and return it, no statement (on
      PostgreSQL this includes `pool_pre_ping`'s round trip);
    - sa_read: pool + SQLAlchemy Core execute + fetch, as the store does it (autobegin and the
      rollback on return included);
    - sa_execute_held: Core execute + fetch on a connection already checked out and in a
      transaction (no pool, no BEGIN);
    - from_row: rebuilding the page's messages from fetched rows, split into json_decode (the
      pydantic JSON validation of tool calls/results/attachments) and message_init (the
      `Message(...)` validation with those already decoded);
    - page_model: `ThreadTurnPage(...)` around the messages;
    - autocommit_no_ping: the whole `load_thread_for_turn` on `lean_store` (a what-if, not the
      app's engine);
    - pooled_driver_fetch: pool checkout, then the statement as ONE driver call on the pooled
      connection's driver connection, then from_row (a what-if: no Core execute);
    - sqlite3_same_thread (SQLite only, for information): the statement through the stdlib
      sqlite3 in the calling thread, no worker-thread hop at all;
    - driver_calls: the round trips (PostgreSQL) or worker-thread hops (SQLite) of one read.
    """
    params = {"tid": thread_id, "n": window}
    engine = store.engine

    async def pool_only() -> None:
        async with engine.connect():
            pass

    async def sa_read() -> list[Any]:
        async with engine.connect() as conn:
            return list((await conn.execute(TURN_READ_LIMITED, params)).all())

    query = ThreadTurnQuery(thread_id=thread_id, message_limit=window)
    args = floor.args(thread_id, window)
    sqlite = make_url(url).get_backend_name() == "sqlite"

    async def pooled_driver_fetch() -> list[Message]:
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            if sqlite:
                got = await driver.execute_fetchall(floor.sql, args)
            else:
                got = await driver.fetch(floor.sql, *args)
        return [from_row(r, PAGE_AT) for r in got if r[PAGE_AT] is not None]

    async def cold_read() -> Any:
        store.message_cache.clear()  # every row rebuilt, as on a thread's first turn
        return await store.load_thread_for_turn(query)

    variant = lean_store(url)
    try:
        async with engine.connect() as held:

            async def sa_held() -> Any:
                return (await held.execute(TURN_READ_LIMITED, params)).all()

            timed = await interleaved(
                {
                    "total": lambda: store.load_thread_for_turn(query),
                    "total_cold": cold_read,
                    "floor": lambda: floor.read(thread_id, window),
                    "pool": pool_only,
                    "sa_read": sa_read,
                    "sa_execute_held": sa_held,
                    "autocommit_no_ping": lambda: variant.load_thread_for_turn(query),
                    "pooled_driver_fetch": pooled_driver_fetch,
                },
                reps,
            )
    finally:
        await variant.dispose()
    trips = await driver_calls(url, thread_id, window)

    rows = await sa_read()
    msg_rows = [r for r in rows if r[PAGE_AT] is not None]
    sync_reps = max(50, reps)

    def rebuild() -> list[Message]:
        return [from_row(r, PAGE_AT) for r in msg_rows]

    def json_decode() -> list[tuple[Any, ...]]:
        return [
            (
                decode_tool_calls(r[PAGE_AT + 3]),
                decode_tool_results(r[PAGE_AT + 4]),
                decode_attachments(r[PAGE_AT + 5]),
            )
            for r in msg_rows
        ]

    decoded = json_decode()

    def message_init() -> list[Message]:
        return [
            Message(
                role=r[PAGE_AT + 1],
                content=r[PAGE_AT + 2],
                tool_calls=c,
                tool_results=t,
                attachments=a,
                run_id=r[PAGE_AT + 6],
                seq=r[PAGE_AT],
            )
            for r, (c, t, a) in zip(msg_rows, decoded, strict=True)
        ]

    page = rebuild()

    def page_model() -> ThreadTurnPage:
        return ThreadTurnPage(
            messages=page, title=rows[0][0], has_assistant_message=bool(rows[0][1])
        )

    same_thread_us: float | None = None
    if sqlite:
        path = make_url(url).database
        assert path is not None
        with contextlib.closing(sqlite3.connect(path)) as sync_conn:
            same_thread_us = _sync_us(
                lambda: sync_conn.execute(floor.sql, args).fetchall(), sync_reps
            )

    return {
        "rows": len(msg_rows),
        **{f"{name}_us": us for name, us in timed.items()},
        "from_row_us": _sync_us(rebuild, sync_reps),
        "json_decode_us": _sync_us(json_decode, sync_reps),
        "message_init_us": _sync_us(message_init, sync_reps),
        "page_model_us": _sync_us(page_model, sync_reps),
        "sqlite3_same_thread_us": same_thread_us,
        "driver_calls": trips,
    }


def lean_store(url: str) -> SqlAgentStore:
    """The what-if engine: reads in AUTOCOMMIT (a single SELECT needs no transaction, so no
    BEGIN and no ROLLBACK), no pre-ping (its BEGIN; ';'; ROLLBACK on every checkout), and no
    reset-on-return rollback for autocommit connections."""
    return SqlAgentStore(
        create_async_engine(
            url,
            isolation_level="AUTOCOMMIT",
            pool_pre_ping=False,
            skip_autocommit_rollback=True,
        )
    )


async def driver_calls(url: str, thread_id: str, window: int) -> dict[str, list[str]]:
    """Driver calls (round trips / thread hops) of one bounded read: the store as the app builds
    it, the raw floor, and the lean what-if engine. Fresh instrumented connections, so the
    timed ones stay untouched."""
    query = ThreadTurnQuery(thread_id=thread_id, message_limit=window)
    sqlite = make_url(url).get_backend_name() == "sqlite"
    out: dict[str, list[str]] = {}
    for name, store in (("store", SqlAgentStore(make_engine(url))), ("lean", lean_store(url))):
        calls: list[str] = []
        if not sqlite:
            count_engine_asyncpg(store.engine, calls)
        try:
            out[name] = await calls_of(
                url, store.engine, lambda s=store: s.load_thread_for_turn(query), calls
            )
        finally:
            await store.dispose()
    engine = make_engine(url)
    floor = await open_floor(url, engine)
    try:
        calls = []
        if isinstance(floor, AsyncpgFloor):
            count_asyncpg(floor.connection, calls)
        out["floor"] = await calls_of(url, engine, lambda: floor.read(thread_id, window), calls)
    finally:
        await floor.close()
        await engine.dispose()
    return out
