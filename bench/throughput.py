"""Turns per second with 1, 2 and 4 app processes on one PostgreSQL, then on a Citus cluster
(`bench/citus.py`), and the journal's size per turn before and after retention.

Each round starts `n` real `python -m app serve` processes (the offline EchoModel, a 10-message
window) on one fresh database, then drives them from this process over loopback: `workers`
clients, each with a thread of its own, post turns round-robin across the processes for a fixed
time after a warm-up. A turn counts when its 200 arrives; any other answer is counted apart.
The ratio column is against the 1-process round of the same run. Everything, PostgreSQL and the
load generator included, shares this machine's cores: on 2 cores the figure says how much the
processes contend, not what more machines would give.

After the rounds, the journal (`run_steps`) is measured per completed turn, then pruned with a
retention of 0 (what the sweep does once AGENT_JOURNAL_RETENTION_SECONDS has passed) and
measured again.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.citus import run_citus
from bench.run import Config, _database, machine_info
from bounded_agents.durable import SqlJournal
from bounded_agents.store import SqlAgentStore, migrate
from tests.reliability.processes import App, app_env

PROCESSES = (1, 2, 4)
WORKERS = 16
WARMUP_S = 3.0
MEASURE_S = 12.0
ROOT = Path(__file__).resolve().parents[1]


async def _round(
    url: str, processes: int, log_dir: Path, warmup_s: float, measure_s: float, label: str = ""
) -> dict[str, Any]:
    env = app_env(
        url,
        AGENT_MODEL="echo",
        AGENT_HISTORY_MAX_MESSAGES="10",
        AGENT_MIGRATE_ON_START="false",
        AGENT_METRICS="false",
        AGENT_TRACING="false",
        AGENT_LOG_LEVEL="warning",
        AGENT_DB_POOL_SIZE=str(max(2, WORKERS // processes)),
    )
    apps = [App(env, log_dir / f"{label}p{processes}-{i}.log") for i in range(processes)]
    outcomes: Counter[str] = Counter()
    latencies: list[float] = []
    answered = {"all": 0}
    try:
        await asyncio.gather(*(app.start() for app in apps))
        limits = httpx.Limits(max_connections=WORKERS * 2)
        async with httpx.AsyncClient(timeout=60, trust_env=False, limits=limits) as client:
            threads = []
            for i in range(WORKERS):
                base = apps[i % processes].url
                created = await client.post(f"{base}/agents/assistant/threads", json={})
                threads.append((base, created.json()["id"]))
            measuring = {"on": False}
            stop_at = time.monotonic() + warmup_s + measure_s

            async def worker(base: str, thread: str) -> None:
                n = 0
                while time.monotonic() < stop_at:
                    started = time.perf_counter()
                    answer = await client.post(
                        f"{base}/agents/assistant/threads/{thread}/messages",
                        json={"content": f"question {n} " + "x" * 200},
                    )
                    n += 1
                    answered["all"] += answer.status_code == 200
                    if measuring["on"]:
                        outcomes[str(answer.status_code)] += 1
                        latencies.append(time.perf_counter() - started)

            async def clock() -> None:
                await asyncio.sleep(warmup_s)
                measuring["on"] = True

            await asyncio.gather(clock(), *(worker(b, t) for b, t in threads))
    finally:
        await asyncio.gather(*(app.stop() for app in apps))
    latencies.sort()
    return {
        "processes": processes,
        "turns_per_s": outcomes["200"] / measure_s,
        "answers": dict(outcomes),
        "turns_total": answered["all"],
        "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))] if latencies else None,
    }


async def _journal_size(store: SqlAgentStore) -> tuple[int, int, int]:
    """(completed runs, run_steps rows, run_steps payload bytes)."""
    async with store.engine.connect() as conn:
        runs_done = (
            await conn.execute(sa.text("SELECT count(*) FROM runs WHERE status = 'completed'"))
        ).scalar_one()
        rows, size = (
            await conn.execute(
                sa.text("SELECT count(*), coalesce(sum(octet_length(payload)), 0) FROM run_steps")
            )
        ).one()
    return int(runs_done), int(rows), int(size)


async def _retention(url: str) -> dict[str, Any]:
    store = SqlAgentStore.from_url(url)
    try:
        turns, rows_before, bytes_before = await _journal_size(store)
        journal = SqlJournal(store.engine)
        pruned = 0
        while batch := await journal.prune_steps(0, 500):
            pruned += batch
        _, rows_after, bytes_after = await _journal_size(store)
    finally:
        await store.dispose()
    per = max(turns, 1)
    return {
        "turns": turns,
        "pruned_runs": pruned,
        "rows_per_turn_before": rows_before / per,
        "bytes_per_turn_before": bytes_before / per,
        "rows_per_turn_after": rows_after / per,
        "bytes_per_turn_after": bytes_after / per,
    }


async def run_throughput(
    config: Config,
    log_dir: Path,
    *,
    processes: tuple[int, ...] = PROCESSES,
    warmup_s: float = WARMUP_S,
    measure_s: float = MEASURE_S,
    citus: bool = True,
) -> dict[str, Any]:
    """`citus`: the rounds again on a Citus cluster (skipped, saying why, without Citus)."""
    rounds = []
    async with _database("postgres", config.postgres_url) as url:
        await migrate.upgrade_url(url)
        for n in processes:
            print(f"throughput: {n} process(es)...", file=sys.stderr, flush=True)
            rounds.append(await _round(url, n, log_dir, warmup_s, measure_s))
        retention = await _retention(url)
    base = rounds[0]["turns_per_s"] or 1.0
    for r in rounds:
        r["vs_1"] = r["turns_per_s"] / base
    on_citus: dict[str, Any] | None = None
    if citus:

        async def round_(url: str, n: int) -> dict[str, Any]:
            return await _round(url, n, log_dir, warmup_s, measure_s, label="citus-")

        on_citus = await run_citus(processes, round_)
        single = {r["processes"]: r["turns_per_s"] for r in rounds}
        for r in on_citus.get("rounds", []):
            r["vs_postgres"] = r["turns_per_s"] / (single.get(r["processes"]) or 1.0)
    return {
        "machine": machine_info(config),
        "workers": WORKERS,
        "measure_s": measure_s,
        "rounds": rounds,
        "retention": retention,
        "citus": on_citus,
    }


def render_throughput(results: dict[str, Any]) -> str:
    lines = [
        f"THROUGHPUT (one PostgreSQL, EchoModel, window 10, {results['workers']} clients, "
        f"{results['measure_s']:.0f} s per round, {results['machine']['cpu_count']} cores shared)",
        f"{'processes':>9} {'turns/s':>8} {'x 1 proc':>8} {'p50 ms':>7} {'p95 ms':>7}  answers",
    ]
    for r in results["rounds"]:
        lines.append(
            f"{r['processes']:>9} {r['turns_per_s']:>8.1f} {r['vs_1']:>8.2f} "
            f"{r['p50_ms']:>7.1f} {r['p95_ms']:>7.1f}  {r['answers']}"
        )
    lines += _render_citus(results.get("citus"))
    k = results["retention"]
    lines += [
        "",
        f"JOURNAL RETENTION ({k['turns']} completed turns, {k['pruned_runs']} pruned)",
        f"  before: {k['rows_per_turn_before']:.1f} rows, "
        f"{k['bytes_per_turn_before']:,.0f} payload bytes per turn",
        f"  after:  {k['rows_per_turn_after']:.1f} rows, "
        f"{k['bytes_per_turn_after']:,.0f} payload bytes per turn",
    ]
    return "\n".join(lines)


def _render_citus(citus: dict[str, Any] | None) -> list[str]:
    if citus is None:
        return []
    if "skipped" in citus:
        return ["", f"CITUS: skipped ({citus['skipped']})"]
    lines = [
        "",
        f"ON CITUS (a coordinator and {citus['workers_nodes']} workers on this machine, "
        f"{citus['shards_per_group']} shards per group; the app on the coordinator)",
        f"{'processes':>9} {'turns/s':>8} {'x 1 PG':>8} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'routed/turn':>11} {'2PC/turn':>8} {'not routed':>10}  answers",
    ]
    fanned: dict[str, int] = {}
    for r in citus["rounds"]:
        s = r["statements"]
        lines.append(
            f"{r['processes']:>9} {r['turns_per_s']:>8.1f} {r['vs_postgres']:>8.2f} "
            f"{r['p50_ms']:>7.1f} {r['p95_ms']:>7.1f} {s['routed_per_turn']:>11.1f} "
            f"{s['two_phase_commits_per_turn']:>8.2f} {s['not_routed_calls']:>10}  {r['answers']}"
        )
        for query, calls in s["not_routed"].items():
            fanned[query] = fanned.get(query, 0) + calls
    lines.append("  not routed to one shard, all rounds (calls: statement):")
    lines += [f"    {calls}: {query}" for query, calls in fanned.items()] or ["    none"]
    return lines


def throughput_main(json_path: Path, config: Config | None = None) -> int:
    """`python -m bench --throughput`: the table, and the figures as JSON."""
    log_dir = json_path.parent / "throughput-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    results = asyncio.run(run_throughput(config or Config(), log_dir))
    print(render_throughput(results))
    json_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {json_path}")
    return 0
