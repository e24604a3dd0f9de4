"""The benchmark runs end to end on SQLite in a tiny configuration and its results have the
promised shape. No timing assertions: only structure and the byte figures, which are exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report import render, targets, write_chart, write_json
from bench.run import Config, run_benchmark

WINDOW = 10
STAT_KEYS = {"median_ms", "p95_ms", "min_ms", "n"}


def _tiny() -> Config:
    return Config(
        mode="smoke",
        backends=("sqlite",),
        lengths=(20, 200),
        reps=2,
        read_factor=1,
        window=WINDOW,
        full_budget_s=0.05,
        nowindow_budget_s=0.05,
        breakdown_reps=2,
    )


async def test_bench_smoke(tmp_path: Path) -> None:
    lines: list[str] = []
    results: dict[str, Any] = await run_benchmark(_tiny(), log=lines.append)

    assert {"machine", "config", "backends", "elapsed_s"} <= results.keys()
    assert {"python", "cpu_count", "date", "mode"} <= results["machine"].keys()
    sqlite = results["backends"]["sqlite"]
    assert set(sqlite["lengths"]) == {"20", "200"}
    assert set(sqlite["breakdown"]) == {"20", "200"}
    assert lines, "progress is logged"

    for length in ("20", "200"):
        entry = sqlite["lengths"][length]
        reads, win, nowin = entry["reads"], entry["turn_window"], entry["turn_nowindow"]
        for stat in (reads["floor"], reads["bounded"], reads["full"]):
            assert STAT_KEYS <= stat.keys()
        assert reads["floor"]["n"] == reads["bounded"]["n"] == 2
        # The bounded read returns exactly the window: its rows and its bytes.
        assert reads["bounded_rows"] == reads["floor_rows"] == WINDOW
        assert reads["bounded_bytes"] == reads["window_bytes"] > 0
        assert reads["full_rows"] == int(length)
        assert reads["full_bytes"] > reads["bounded_bytes"]

        for turn in (win, nowin):
            for key in ("time", "model", "overhead", "driver", "python"):
                assert STAT_KEYS <= turn[key].keys()
            assert turn["model_calls"] == 2  # the tool call, then the answer
            assert turn["driver_calls"] > 0
        assert win["time"]["n"] == 2
        assert win["read_bound"] == WINDOW
        assert win["rows_read"] == WINDOW
        assert win["bytes_read"] == win["window_bytes"]
        assert nowin["read_bound"] is None
        assert STAT_KEYS <= nowin["paired_window"]["time"].keys()
        assert nowin["rows_read"] > int(length)
        assert nowin["bytes_read"] > win["bytes_read"]

    # With a window, what load:thread journals does not depend on the thread's length.
    loads = {n: sqlite["lengths"][n]["turn_window"]["load_thread_bytes"] for n in ("20", "200")}
    assert loads["20"] == loads["200"] > 0
    whole = {n: sqlite["lengths"][n]["turn_nowindow"]["load_thread_bytes"] for n in ("20", "200")}
    assert whole["200"] > whole["20"]

    calls = sqlite["breakdown"]["20"]["driver_calls"]
    assert set(calls) == {"store", "floor", "lean"}
    assert len(calls["floor"]) == 1

    results["targets"] = targets(results)
    by_name = {t["target"]: t for t in results["targets"]}
    assert {t["status"] for t in results["targets"]} <= {"PASS", "MISS", "INFO", "N/A"}
    bytes_target = next(t for name, t in by_name.items() if name.startswith("bytes read"))
    journal_target = next(t for name, t in by_name.items() if name.startswith("load:thread"))
    assert bytes_target["status"] == journal_target["status"] == "PASS"

    text = render(results)
    for section in ("READS", "TURNS", "WHERE THE BOUNDED READ", "TARGETS"):
        assert section in text
    write_json(results, tmp_path / "latest.json")
    write_chart(results, tmp_path / "chart.png")
    assert json.loads((tmp_path / "latest.json").read_text())["config"]["lengths"] == [20, 200]
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
