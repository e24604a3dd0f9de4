"""The benchmark runs end to end on SQLite in a tiny configuration and its results have the
promised shape. No timing assertions: only structure and the figures that are exact (rows,
bytes, summarizer tokens, folds), which is where a history policy that reads or summarizes
O(thread) would show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report import DOMINANT, render, targets, write_chart, write_json
from bench.run import Config, run_benchmark

WINDOW = 10
FOLD_BATCH = WINDOW // 2
"""The summarizing window's default fold batch (half the window)."""
TOKEN_BUDGET = 10_000
TURNS = 80
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
        policy_reps=6,
        token_budget=TOKEN_BUDGET,
        conversation_turns=TURNS,
        cold_turns=40,
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

    # With a window, what load:thread journals does not depend on the thread's length, but for
    # the digits of the kept seqs (it names them, issue 37's sixth round): one more digit each.
    loads = {n: sqlite["lengths"][n]["turn_window"]["load_thread_bytes"] for n in ("20", "200")}
    assert 0 < loads["200"] - loads["20"] <= WINDOW + 1 and loads["200"] < 1024
    whole = {n: sqlite["lengths"][n]["turn_nowindow"]["load_thread_bytes"] for n in ("20", "200")}
    assert whole["200"] > whole["20"]

    # The commit floor: one committed write, measured beside the read floor; a turn commits
    # 3 transactions (2 + its tool round: issue 37), so it can never cost less than 3 of them.
    floor = sqlite["commit_floor"]
    assert floor["commit_ms"] > 0 and floor["read_ms"] > 0
    assert {sqlite["lengths"][n]["turn_window"]["transactions"] for n in ("20", "200")} == {3}
    assert "total_cold_us" in sqlite["breakdown"]["20"]
    # The turn's own SQL, recorded and replayed raw: the same transactions as the turn, and
    # every statement of them (a turn sends more statements than it commits transactions).
    own = sqlite["turn_sql_floor"]
    assert own["commits"] == sqlite["lengths"]["20"]["turn_window"]["transactions"] == 3
    assert own["statements"] > own["commits"]
    assert own["turn_sql_ms"] > 0 and own["read_ms"] > 0

    calls = sqlite["breakdown"]["20"]["driver_calls"]
    assert set(calls) == {"store", "floor", "lean"}
    assert len(calls["floor"]) == 1

    _check_policies(sqlite)
    _check_conversation(sqlite["conversation"])

    results["targets"] = targets(results)
    by_name = {t["target"]: t for t in results["targets"]}
    assert {t["status"] for t in results["targets"]} <= {"PASS", "MISS", "INFO", "N/A"}
    bytes_target = next(t for name, t in by_name.items() if name.startswith("bytes read"))
    journal_target = next(t for name, t in by_name.items() if name.startswith("load:thread"))
    assert bytes_target["status"] == journal_target["status"] == "PASS"
    tx_target = next(t for name, t in by_name.items() if name.startswith("committed transactions"))
    assert tx_target["status"] == "PASS" and tx_target["value"] == 3
    cold = [t for name, t in by_name.items() if name.startswith("cache-cold fold")]
    assert len(cold) == 2 and all(t["status"] == "PASS" for t in cold), cold
    turn_target = next(t for name, t in by_name.items() if name.startswith("turn overhead"))
    assert "commits alone" in turn_target["detail"]

    text = render(results)
    for section in (
        "READS",
        "TURNS",
        "COMMIT FLOOR",
        "WHERE THE BOUNDED READ",
        "POLICIES",
        "FIRST TURN",
        "PLANS",
        "SCRIPTED CONVERSATION",
        "TARGETS",
    ):
        assert section in text
    write_json(results, tmp_path / "latest.json")
    write_chart(results, tmp_path / "chart.png")
    assert json.loads((tmp_path / "latest.json").read_text())["config"]["lengths"] == [20, 200]
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _check_policies(sqlite: dict[str, Any]) -> None:
    """Every agent reads the same bounded page at both lengths; the summarizing one reads at
    most the window plus a fold batch, folds during the measured turns, and hands the
    summarizer the same tokens per turn whatever the thread's length."""
    policies = sqlite["policies"]
    assert set(policies) == {"window", "summarize", "tokens"}
    for agent, by_length in policies.items():
        assert set(by_length) == {"20", "200"}
        short, long = by_length["20"], by_length["200"]
        for entry in (short, long):
            assert entry["n"] == len(entry["turns"]) == 6
            assert STAT_KEYS <= entry["time"].keys()
        # Exact, so exactly flat: the page a turn reads does not depend on the thread.
        assert long["rows_mean"] == short["rows_mean"], agent
        assert long["bytes_mean"] == short["bytes_mean"], agent
        assert long["backlog_rows_max"] == short["backlog_rows_max"], agent

    window = policies["window"]["200"]
    assert window["rows_max"] == WINDOW and window["folds"] == 0

    tokens = policies["tokens"]["200"]
    assert tokens["read_bound"] is None and tokens["read_token_bound"] == TOKEN_BUDGET
    assert 1 < tokens["rows_max"] <= WINDOW  # ~2,100 tokens an answer: 9 messages fit
    assert tokens["folds"] == tokens["backlog_rows_max"] == 0

    summarize = policies["summarize"]
    for length in ("20", "200"):
        entry = summarize[length]
        assert entry["read_bound"] == WINDOW + FOLD_BATCH
        assert max(t["rows"] for t in entry["turns"]) <= WINDOW + FOLD_BATCH
        # A 2-message turn pushes one message past the read bound; the fold pages it in from
        # the boundary: never more than the unsummarized part (window + batch + 1).
        assert entry["backlog_rows_max"] <= WINDOW + FOLD_BATCH + 1
        assert 1 <= entry["folds"] < entry["n"]  # hysteresis: not every turn
        assert entry["prompt_tokens_max_call"] < 8000
        first = entry["first_turn"]
        assert first["folds"] >= 1
        # The first turn folds the whole seeded backlog: all but the newest window.
        assert first["covers_through_seq"] >= int(length) + 1 - WINDOW
        assert first["backlog_rows"] >= first["covers_through_seq"] - (WINDOW + FOLD_BATCH)
    assert summarize["200"]["input_tokens_per_turn"] == summarize["20"]["input_tokens_per_turn"]
    assert summarize["200"]["input_tokens_per_turn"] > 0
    assert summarize["200"]["first_turn"]["folds"] > summarize["20"]["first_turn"]["folds"]

    # SQLite: every part of every turn read is an index search, never a scan of messages; on
    # both layouts: two long threads (POLICIES) and one filling the table (TURNS).
    assert {a for a in sqlite["plans"] if a.endswith(DOMINANT)} == {
        f"{a}{DOMINANT}" for a in ("window", "summarize", "tokens")
    }
    for agent, by_length in sqlite["plans"].items():
        for length, plan in by_length.items():
            details = plan["plan"]
            assert details and not [d for d in details if d.startswith("SCAN messages")], (
                agent,
                length,
                details,
            )


def _check_conversation(c: dict[str, Any]) -> None:
    """Summarizer input per fold is bounded and does not creep up; the total is linear in the
    turns (re-summarizing every dropped message each turn would make it quadratic: ~4x)."""
    assert c["turns"] == TURNS
    assert c["folds"] >= TURNS // 4  # a fold every few turns
    assert c["fold_turns"] < TURNS
    assert 0 < c["input_tokens_max"] <= c["fold_max_tokens"]
    assert c["input_tokens_mean_second_half"] <= 1.3 * c["input_tokens_mean_first_half"]
    assert c["rows_max"] <= WINDOW + FOLD_BATCH
    assert c["growth_full_half"] is not None and c["growth_full_half"] < 2.5
    assert set(c["totals"]) == {"20", "40", "60", "80"}
    assert len(c["per_fold"]) == c["folds"]
