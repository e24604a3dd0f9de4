"""What one thread's search costs as OTHER threads fill the database
(`python -m bench.search_scale [--backends sqlite,postgres] [--others 0,20000,60000]`).

A thread of `THREAD_MESSAGES` messages, one in ten holding the query's word, is searched
(`store.search_history`, k=5) while other threads' messages holding the same word are added
in steps. A thread's search should cost what its own matches cost, whatever the rest of the
database holds: the ratio column is each step's median over the first step's, measured in the
same run on the same database (the machine is shared and noisy: read the ratios).

Every message is written through `store.append_messages`, so the index is kept by the same
triggers a turn fires, and the thread is searchable as an agent with `search` leaves it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

from bench.run import BACKENDS, Config, _database
from bounded_agents.core.messages import Message
from bounded_agents.store.sql import SqlAgentStore

THREAD_MESSAGES = 1_000
MATCH_EVERY = 10
"""One message in ten of the searched thread holds the query's word: 100 matches."""
OTHER_THREAD_MESSAGES = 100
"""Each other thread's length: every one of its messages holds the word."""
REPS = 30
QUERY = "invoice"


def _text(n: int, match: bool) -> str:
    body = f"line {n}: the shipment left the dock and the customer was told about it"
    return f"{body}; the invoice was sent" if match else body


async def _fill(store: SqlAgentStore, threads: int) -> None:
    """`threads` more threads of OTHER_THREAD_MESSAGES matching messages each."""
    for _ in range(threads):
        tid = (await store.create_thread(actor_id="others", agent="bench")).id
        messages = [
            Message(role="user", content=_text(n, True)) for n in range(OTHER_THREAD_MESSAGES)
        ]
        await store.append_messages(tid, messages)


async def _median_ms(store: SqlAgentStore, thread_id: str) -> tuple[float, int]:
    times: list[float] = []
    found = 0
    for _ in range(REPS):
        started = time.perf_counter()
        hits = await store.search_history(thread_id, QUERY, limit=5)
        times.append((time.perf_counter() - started) * 1000)
        found = len(hits)
    return statistics.median(times), found


async def measure(url: str, steps: tuple[int, ...]) -> list[dict[str, Any]]:
    """One row per step: other threads' matching messages, the median search, the ratio."""
    store = SqlAgentStore.from_url(url)
    rows: list[dict[str, Any]] = []
    try:
        await store.create_schema()
        tid = (await store.create_thread(actor_id="me", agent="bench")).id
        mine = [
            Message(role="user", content=_text(n, n % MATCH_EVERY == 0))
            for n in range(THREAD_MESSAGES)
        ]
        await store.append_messages(tid, mine)
        others = 0
        for step in steps:
            await _fill(store, (step - others) // OTHER_THREAD_MESSAGES)
            others = step
            median, found = await _median_ms(store, tid)
            base = rows[0]["median_ms"] if rows else median
            rows.append(
                {"others": step, "median_ms": median, "ratio": median / base, "hits": found}
            )
    finally:
        await store.dispose()
    return rows


def _render(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| backend | other threads' matching messages | search, median ms | / first row | hits |",
        "|---|---:|---:|---:|---:|",
    ]
    for backend, rows in results.items():
        for r in rows:
            lines.append(
                f"| {backend} | {r['others']:,} | {r['median_ms']:.2f} | {r['ratio']:.2f}x "
                f"| {r['hits']} |"
            )
    return "\n".join(lines)


async def _run(backends: tuple[str, ...], steps: tuple[int, ...]) -> dict[str, Any]:
    pg_admin = Config().postgres_url
    results: dict[str, list[dict[str, Any]]] = {}
    for backend in backends:
        database: AbstractAsyncContextManager[str] = _database(backend, pg_admin)
        async with database as url:
            results[backend] = await measure(url, steps)
            print(f"[{backend}] done", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search_scale", description=__doc__)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--others", default="0,20000,60000")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; choose from {BACKENDS}")
    steps = tuple(sorted(int(s.replace("_", "")) for s in args.others.split(",") if s))
    print(_render(asyncio.run(_run(backends, steps))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
