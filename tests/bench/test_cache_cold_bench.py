"""The conversation with idle gaps runs end to end on SQLite in a short configuration: with the
early fold on, a summarizing window leaves a cache fewer tokens it cannot serve, every hot
turn extends the previous prompt, and the bench's check says so."""

from __future__ import annotations

from bench.cache_cold import gaps, render_cold, run_cold_bench
from bench.report import cold_targets


def test_every_kth_gap_and_only_it_outlasts_the_ttl() -> None:
    idle = gaps(13, 6, ttl=300.0)
    assert [n for n, g in enumerate(idle) if g > 300.0] == [6, 12]
    assert all(g == 0.0 for n, g in enumerate(idle) if n not in (6, 12))


async def test_folding_when_cold_leaves_fewer_uncached_tokens() -> None:
    results = await run_cold_bench(
        turns=60,
        every=6,
        settings={"summaries 16/4": {"max_messages": 16, "min_messages": 4, "summarize": True}},
    )
    pair = results["settings"]["summaries 16/4"]
    before, after = pair["before"], pair["after"]
    assert before["cold_turns"] == after["cold_turns"] == 9
    assert after["uncached_tokens"] < before["uncached_tokens"]
    assert after["hot_extends_pct"] == 100.0 > before["hot_extends_pct"]
    [check] = cold_targets({"cache_cold": results})
    assert check["status"] == "PASS" and check["value"] < 1.0
    assert "summaries 16/4" in render_cold(results)
