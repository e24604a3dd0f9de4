"""The throughput rounds again on a Citus cluster on this machine (a coordinator and two
workers, `tests/citus_cluster.py`), distributed as an operator would (`python -m app migrate`,
then `python -m app distribute`, Citus's default 32 shards per colocation group); the app
processes connect to the coordinator.

Each round's statements are counted from Citus's own statistics (`citus_stat_statements`,
reset before the round): those it routed to one shard, and those it did not (sent to every
shard, or run through the coordinator), listed by statement. The cluster's three servers, the
app processes and the load generator share this machine's cores: the ratio to one PostgreSQL
says what distribution costs here, not what more machines would give (docs/scale-out.md).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from bounded_agents.store import distribute, migrate
from bounded_agents.store.engine import make_engine
from tests.citus_cluster import CitusCluster, citus_missing

Round = Callable[[str, int], Awaitable[dict[str, Any]]]
"""A throughput round: (database URL, app processes) -> its figures."""


async def _distributed_database(cluster: CitusCluster) -> tuple[str, int]:
    """A migrated, distributed database on `cluster`: its URL and shards per group."""
    url = await cluster.create_database("agent_bench")
    await migrate.upgrade_url(url)
    engine = make_engine(url)
    try:
        outcomes = await distribute.distribute(engine)
    finally:
        await engine.dispose()
    return url, outcomes[0].shards


async def _statements(url: str, *, reset: bool = False) -> dict[str, Any]:
    """Citus's statistics of the database's statements since the last reset (then reset)."""
    conn = await asyncpg.connect(url.replace("+asyncpg", ""))
    try:
        if reset:
            await conn.execute("SELECT citus_stat_statements_reset()")
            return {}
        rows = await conn.fetch(
            "SELECT executor::text, partition_key IS NOT NULL AS routed, calls, query "
            "FROM citus_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    finally:
        await conn.close()
    fanned: dict[str, int] = {}
    for r in rows:
        if not r["routed"]:
            key = f"{r['executor']}: {' '.join(r['query'].split())[:120]}"
            fanned[key] = fanned.get(key, 0) + r["calls"]
    return {
        "routed_calls": sum(r["calls"] for r in rows if r["routed"]),
        "not_routed_calls": sum(fanned.values()),
        "not_routed": fanned,
    }


async def _two_phase_commits(url: str, *, reset: bool = False) -> int:
    """Transactions the coordinator committed with two-phase commit since the last reset
    (then reset): those that wrote on two workers (a model step's journal row on the thread's
    worker, its ledger row on the actor's). Citus records each worker's part of one in
    `pg_dist_transaction`; the cluster keeps them (`citus.recover_2pc_interval = -1`)."""
    conn = await asyncpg.connect(url.replace("+asyncpg", ""))
    try:
        if reset:
            await conn.execute("DELETE FROM pg_dist_transaction")
            return 0
        # gid: citus_<initiator node>_<pid>_<distributed transaction number>_<connection>
        found = await conn.fetchval(
            "SELECT count(DISTINCT split_part(gid, '_', 3) || '_' || split_part(gid, '_', 4)) "
            "FROM pg_dist_transaction"
        )
    finally:
        await conn.close()
    return int(found)


async def run_citus(processes: tuple[int, ...], round_: Round) -> dict[str, Any]:
    """Each round of `processes` on a fresh cluster; `{"skipped": why}` without Citus."""
    missing = citus_missing()
    if missing is not None:
        return {"skipped": missing}
    cluster = CitusCluster(coordinator_settings={"citus.recover_2pc_interval": "-1"})
    cluster.start()
    try:
        url, shards = await _distributed_database(cluster)
        rounds = []
        for n in processes:
            print(f"throughput on Citus: {n} process(es)...", file=sys.stderr, flush=True)
            await _statements(url, reset=True)
            await _two_phase_commits(url, reset=True)
            figures = await round_(url, n)
            stats = await _statements(url)
            turns = max(figures["turns_total"], 1)
            stats["routed_per_turn"] = stats["routed_calls"] / turns
            stats["not_routed_per_turn"] = stats["not_routed_calls"] / turns
            stats["two_phase_commits_per_turn"] = await _two_phase_commits(url) / turns
            figures["statements"] = stats
            rounds.append(figures)
    finally:
        cluster.stop()
    return {"workers_nodes": len(cluster.workers), "shards_per_group": shards, "rounds": rounds}
