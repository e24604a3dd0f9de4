"""The prompt-cache conversation runs end to end on SQLite in a short configuration; the loop's
own prefix figures are checked against the prompts the model received inside the run."""

from __future__ import annotations

from bench.cache import render_cache, run_cache_bench


async def test_cache_bench_smoke() -> None:
    results = await run_cache_bench(
        turns=40,
        settings={
            "window 10": {"max_messages": 10},
            "hysteresis 12/4": {"max_messages": 12, "min_messages": 4},
        },
    )
    sliding, hysteresis = results["settings"]["window 10"], results["settings"]["hysteresis 12/4"]
    assert sliding["steady_pct"] == 0.0
    assert hysteresis["steady_pct"] >= 70.0  # a cut every 4 turns
    assert hysteresis["new_tokens"] < sliding["new_tokens"]
    assert sliding["vs_window10"] == 1.0
    assert "hysteresis 12/4" in results["goal"]
    assert "hysteresis 12/4" in render_cache(results)
