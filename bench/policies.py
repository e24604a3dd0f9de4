"""Every history policy against thread length: the window-only agent, the summarizing agent
(rolling summary) and the token-only agent, turn by turn, side by side.

The turns are the ones `bench.turns` measures (`/read_page`, one 8 KB tool result per answer),
so the thread keeps its shape. A summarizing turn folds only every few turns (hysteresis), so a
single turn says little: each figure here is a per-turn AVERAGE over a run of turns spanning
several folds. The summarizing agent's first turn on a seeded thread folds the whole backlog
(the thread has no summary yet): a one-off, O(thread), reported on its own, never mixed into the
steady-state figures.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.data import ACTOR, AGENT
from bench.stats import summarize
from bench.turns import TURN_CONTENT, History, TimedModel, bench_module
from bounded_agents.core.messages import Message, payload_bytes
from bounded_agents.core.report import RunResult
from bounded_agents.module import AgentModule
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store.sql import SqlAgentStore


class CountingStore(SqlAgentStore):
    """The store, counting what a fold's backlog reads (`messages_after`) return.

    `RunReport.rows_read`/`bytes_read` count the turn read only. A fold that needs messages the
    turn read did not return (a long backlog, or the one message a 2-message turn pushes past
    the read bound) pages them in with `messages_after`; those rows cost too, so they are counted
    here and reported beside the report's figures.
    """

    backlog_calls = 0
    backlog_rows = 0
    backlog_bytes = 0

    def reset(self) -> None:
        self.backlog_calls = self.backlog_rows = self.backlog_bytes = 0

    async def messages_after(self, thread_id: str, after_seq: int, limit: int) -> list[Message]:
        page = await super().messages_after(thread_id, after_seq, limit)
        self.backlog_calls += 1
        self.backlog_rows += len(page)
        self.backlog_bytes += sum(payload_bytes(m) for m in page)
        return page


BACKLOG_CALLS = 1_000_000
"""Summarizer calls the first turn may make: enough to fold any seeded backlog in that turn, as
a user who switches summaries on for old threads could run a sweep (docs/history.md); the
steady-state turns measured after it have the default `fold_calls_per_turn`."""

AgentSpec = Callable[[int, int], History]
"""(window, token budget) -> the agent's `history=` setting."""

AGENTS: dict[str, AgentSpec] = {
    "window": lambda window, _budget: {"max_messages": window},
    "summarize": lambda window, _budget: {"max_messages": window, "summarize": True},
    "tokens": lambda _window, budget: {"max_tokens": budget},
}
"""The agents compared, by name: the window-only one (the baseline), the summarizing one and
the token-only one."""


def turn_figures(result: RunResult, store: CountingStore, seconds: float) -> dict[str, Any]:
    """One turn's figures: wall time, the report's read figures, the fold's backlog reads and
    what the summarizer was handed (the loop's estimate, `summary.input_tokens`, and the
    prompt tokens each `history_summary` call booked, instruction included)."""
    report = result.report
    summary = report.summary
    made = summary is not None and summary.made
    calls = [c.prompt_tokens for c in report.model_calls if c.purpose == "history_summary"]
    return {
        "ms": seconds * 1e3,
        "rows": report.rows_read,
        "bytes": report.bytes_read,
        "backlog_rows": store.backlog_rows,
        "backlog_bytes": store.backlog_bytes,
        "backlog_calls": store.backlog_calls,
        "folds": summary.folds if made and summary is not None else 0,
        "input_tokens": summary.input_tokens if made and summary is not None else 0,
        "input_messages": summary.input_messages if made and summary is not None else 0,
        "prompt_tokens": calls,
        "covers_through_seq": summary.covers_through_seq if summary is not None else None,
        "read_bound": report.read_bound,
        "read_token_bound": report.read_token_bound,
    }


@dataclass
class PolicySeries:
    """Turns of one agent in one thread; `turn()` runs one and returns its figures."""

    store: CountingStore
    thread_id: str
    history: History

    def __post_init__(self) -> None:
        self.model = TimedModel(EchoModel())
        self.module = bench_module(self.store, self.history, self.model)
        # The first turn folds the whole seeded backlog at once (`BACKLOG_CALLS`), a one-off
        # reported on its own; every later turn has the default calls per turn.
        self.backlog = bench_module(self.store, self.history, self.model, BACKLOG_CALLS)
        self.measured: list[dict[str, Any]] = []

    async def turn(self, module: AgentModule | None = None) -> dict[str, Any]:
        self.store.reset()
        start = time.perf_counter()
        result = await (module or self.module).run_turn(
            agent=AGENT, thread_id=self.thread_id, actor_id=ACTOR, content=TURN_CONTENT
        )
        return turn_figures(result, self.store, time.perf_counter() - start)


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def steady_state(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-turn averages (and extremes) over measured turns: the mean is the figure, because a
    fold turn costs more than the turns between folds and both belong to the steady state."""
    fold_calls = [p for t in turns for p in t["prompt_tokens"]]
    folds = sum(t["folds"] for t in turns)
    return {
        "n": len(turns),
        "time": summarize([t["ms"] / 1e3 for t in turns]),
        "mean_ms": _mean([t["ms"] for t in turns]),
        "rows_mean": _mean([t["rows"] for t in turns]),
        "rows_max": max(t["rows"] for t in turns),
        "bytes_mean": _mean([t["bytes"] for t in turns]),
        "bytes_max": max(t["bytes"] for t in turns),
        "backlog_rows_mean": _mean([t["backlog_rows"] for t in turns]),
        "backlog_rows_max": max(t["backlog_rows"] for t in turns),
        "backlog_bytes_mean": _mean([t["backlog_bytes"] for t in turns]),
        "folds": folds,
        "fold_turns": sum(1 for t in turns if t["folds"]),
        "input_tokens_per_turn": _mean([t["input_tokens"] for t in turns]),
        "input_tokens_per_fold": (sum(t["input_tokens"] for t in turns) / folds) if folds else 0,
        "prompt_tokens_per_turn": _mean([sum(t["prompt_tokens"]) for t in turns]),
        "prompt_tokens_max_call": max(fold_calls, default=0),
        "read_bound": turns[-1]["read_bound"],
        "read_token_bound": turns[-1]["read_token_bound"],
    }


def _rss_mb() -> float:
    """Current resident set size of this process (Linux: /proc/self/statm; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return 0.0


async def _rss_growth(
    turn: Callable[[], Awaitable[dict[str, Any]]],
) -> tuple[dict[str, Any], float]:
    """Run `turn()` while sampling RSS every 20 ms: its result and how far RSS rose above where
    it started. The process's lifetime peak (`ru_maxrss`) would hide it: earlier phases read
    whole threads."""
    start = _rss_mb()
    peak = start
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_mb())
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    try:
        result = await turn()
    finally:
        done.set()
        await sampler
    return result, max(peak, _rss_mb()) - start


async def policy_turns(
    store: CountingStore,
    threads: dict[str, dict[int, str]],
    *,
    window: int,
    token_budget: int,
    reps: int,
    warmup: int,
    log: Callable[[str], None],
    label: str = "",
) -> dict[str, dict[int, dict[str, Any]]]:
    """Every agent of `AGENTS` at every length: `threads[agent][length]` is its thread.

    Per thread: one first turn (for the summarizing agent, the one-off backlog fold, timed and
    reported as `first_turn`), `warmup` more turns so the window holds turn-made messages, then
    `reps` measured turns, interleaved across agents and lengths (one turn each per round, the
    starting point rotating) so machine noise hits them alike.
    """
    series = {
        (name, n): PolicySeries(store, tid, AGENTS[name](window, token_budget))
        for name, by_length in threads.items()
        for n, tid in by_length.items()
    }
    first: dict[tuple[str, int], dict[str, Any]] = {}
    for key, s in series.items():
        gc.collect()
        one, growth = await _rss_growth(functools.partial(s.turn, s.backlog))
        calls = one.pop("prompt_tokens")
        first[key] = {
            **one,
            "prompt_tokens_total": sum(calls),
            "prompt_tokens_max_call": max(calls, default=0),
            "rss_growth_mb": growth,
        }
        if first[key]["folds"]:
            log(
                f"[{label}] {key[0]} at {key[1]:,}: first turn folded the backlog in "
                f"{first[key]['folds']:,} calls, {first[key]['ms'] / 1e3:.1f} s"
            )
        for _ in range(warmup):
            await s.turn()
    order = list(series)
    gc.collect()
    for i in range(reps):
        k = i % len(order)
        for key in order[k:] + order[:k]:
            s = series[key]
            s.measured.append(await s.turn())
    out: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in threads}
    for (name, n), s in series.items():
        out[name][n] = {
            **steady_state(s.measured),
            "first_turn": first[(name, n)],
            "turns": s.measured,
        }
    return out
