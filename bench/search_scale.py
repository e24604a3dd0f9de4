"""What one thread's search costs as OTHER threads fill the database
(`python -m bench.search_scale [--backends sqlite,postgres] [--others 0,200000,600000]`).

A thread of `THREAD_MESSAGES` messages, one in ten holding the query's word, is searched
(`store.search_history`, k=5) while other threads' messages are added in steps, one in ten of
them holding the same word too (so the word is as common everywhere: an index on the words
alone finds a tenth of the database). A thread's search should cost what its own matches cost,
whatever the rest of the database holds: the ratio column is each step's median over the first
step's, measured in the same run on the same database (the machine is shared and noisy: read
the ratios).

Every message is written through `store.append_messages`, so the index is kept by the same
triggers a turn fires, and the thread is searchable as an agent with `search` leaves it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import sqlalchemy as sa

from bench.run import BACKENDS, Config, _database
from bounded_agents.core.messages import Message
from bounded_agents.store.sql import SqlAgentStore

THREAD_MESSAGES = 1_000
MATCH_EVERY = 10
"""One message in ten of the searched thread holds the query's word: 100 matches."""
OTHER_THREAD_MESSAGES = 100
"""Each other thread's length: one in ten of its messages holds the word, as in the thread."""
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
            Message(role="user", content=_text(n, n % MATCH_EVERY == 0))
            for n in range(OTHER_THREAD_MESSAGES)
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


async def _largest_scan(store: SqlAgentStore, thread_id: str) -> str:
    """PostgreSQL: the messages statement the store sends, EXPLAINed: the scan that went
    through the most rows, and how many (its returned rows and those it threw away)."""
    sent: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, text: str, params: Any, *_args: Any) -> None:
        if "ts_rank" in text and not sent:
            sent.append((text, params))

    sa.event.listen(store.engine.sync_engine, "before_cursor_execute", keep)
    try:
        await store.search_history(thread_id, QUERY, limit=5)
    finally:
        sa.event.remove(store.engine.sync_engine, "before_cursor_execute", keep)
    statement, params = sent[0]
    async with store.engine.connect() as conn:
        found = await conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        plan = found.scalar_one()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    scans = [n for n in _nodes(plan[0]["Plan"]) if "Scan" in n["Node Type"]]
    read = max(
        scans,
        key=lambda n: n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0),
    )
    rows = int(read.get("Actual Rows", 0) + read.get("Rows Removed by Filter", 0))
    where = read.get("Index Name", read.get("Relation Name"))
    times = f"planned in {plan[0]['Planning Time']:.2f} ms, run in {plan[0]['Execution Time']:.2f}"
    return f"{read['Node Type']} on {where}: {rows:,} ({times})"


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


async def measure(url: str, steps: tuple[int, ...]) -> list[dict[str, Any]]:
    """One row per step: other threads' messages, the median search, the ratio (and on
    PostgreSQL the plan's largest scan, after VACUUM ANALYZE, as autovacuum leaves it)."""
    store = SqlAgentStore.from_url(url)
    postgres = store.engine.dialect.name == "postgresql"
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
            if postgres:
                # As autovacuum leaves the table: statistics, and the GIN indexes' pending
                # lists merged (a manual ANALYZE does not merge them; until merged, every
                # search reads up to gin_pending_list_limit, 4 MB, of them).
                async with store.engine.connect() as conn:
                    vacuum = await conn.execution_options(isolation_level="AUTOCOMMIT")
                    await vacuum.exec_driver_sql("VACUUM ANALYZE messages")
            median, found = await _median_ms(store, tid)
            base = rows[0]["median_ms"] if rows else median
            scan = await _largest_scan(store, tid) if postgres else ""
            rows.append(
                {
                    "others": step,
                    "median_ms": median,
                    "ratio": median / base,
                    "hits": found,
                    "largest_scan": scan,
                }
            )
    finally:
        await store.dispose()
    return rows


def _render(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| backend | other threads' messages (a tenth holding the word) | search, median ms "
        "| / first row | hits | PostgreSQL: the plan's largest scan, rows it went through |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for backend, rows in results.items():
        for r in rows:
            lines.append(
                f"| {backend} | {r['others']:,} | {r['median_ms']:.2f} | {r['ratio']:.2f}x "
                f"| {r['hits']} | {r['largest_scan'] or '-'} |"
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
    parser.add_argument("--others", default="0,200000,600000")
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
