"""The throughput bench runs end to end (one process, a second of load) and its retention
figures are exact: every completed turn journaled, nothing left after a prune at retention 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.citus import run_citus
from bench.run import Config
from bench.throughput import _round, render_throughput, run_throughput
from tests.conftest import PG_ADMIN_URL

pytestmark = pytest.mark.postgres


async def test_the_throughput_bench_runs_and_retention_empties_the_journal(
    postgres_url: str, tmp_path: Path
) -> None:
    config = Config(mode="smoke", postgres_url=PG_ADMIN_URL)
    results = await run_throughput(
        config, tmp_path, processes=(1,), warmup_s=0.5, measure_s=1.0, citus=False
    )
    [one] = results["rounds"]
    assert one["turns_per_s"] > 0 and set(one["answers"]) == {"200"}
    kept = results["retention"]
    assert kept["turns"] > 0 and kept["pruned_runs"] == kept["turns"]
    assert kept["rows_per_turn_before"] > 0 and kept["bytes_per_turn_before"] > 0
    assert kept["rows_per_turn_after"] == 0 and kept["bytes_per_turn_after"] == 0
    assert "JOURNAL RETENTION" in render_throughput(results)


@pytest.mark.citus
async def test_on_a_citus_cluster_the_bench_counts_no_turn_statement_off_one_shard(
    citus_cluster: object, tmp_path: Path
) -> None:
    """The Citus rounds run, and Citus's statistics route every statement of every turn to one
    shard: what is left is the process's start-up, once each (the sweep's read of lapsed runs,
    and marking which agents' threads the search index keeps: `index_agents`; the learned token
    ratios, read from their reference table), never per turn.
    `citus_cluster` only makes the test skip (or fail) where Citus is absent; the bench starts
    a cluster of its own."""
    del citus_cluster

    async def round_(url: str, n: int) -> dict[str, Any]:
        return await _round(url, n, tmp_path, 0.5, 1.5, label="citus-")

    results = await run_citus((1,), round_)
    [one] = results["rounds"]
    assert one["turns_per_s"] > 0 and set(one["answers"]) == {"200"}
    stats = one["statements"]
    assert stats["routed_per_turn"] > 5
    start_up = (
        "FROM runs WHERE runs.status",
        "UPDATE threads SET searchable",
        "FROM token_ratios",  # a reference table: a copy on every node, read once
    )
    assert all(calls == 1 for calls in stats["not_routed"].values()), stats["not_routed"]
    assert all(any(s in sql for s in start_up) for sql in stats["not_routed"]), stats["not_routed"]
