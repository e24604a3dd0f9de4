"""The throughput bench runs end to end (one process, a second of load) and its retention
figures are exact: every completed turn journaled, nothing left after a prune at retention 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run import Config
from bench.throughput import render_throughput, run_throughput
from tests.conftest import PG_ADMIN_URL

pytestmark = pytest.mark.postgres


async def test_the_throughput_bench_runs_and_retention_empties_the_journal(
    postgres_url: str, tmp_path: Path
) -> None:
    config = Config(mode="smoke", postgres_url=PG_ADMIN_URL)
    results = await run_throughput(config, tmp_path, processes=(1,), warmup_s=0.5, measure_s=1.0)
    [one] = results["rounds"]
    assert one["turns_per_s"] > 0 and set(one["answers"]) == {"200"}
    kept = results["retention"]
    assert kept["turns"] > 0 and kept["pruned_runs"] == kept["turns"]
    assert kept["rows_per_turn_before"] > 0 and kept["bytes_per_turn_before"] > 0
    assert kept["rows_per_turn_after"] == 0 and kept["bytes_per_turn_after"] == 0
    assert "JOURNAL RETENTION" in render_throughput(results)
