"""Folding when the cache is cold: a conversation with idle gaps, each summarizing window run
with the early fold off (TTL 0: before) and on (TTL 300 s: after).

The same scripted user messages as `bench/cache.py`, through the real loop on SQLite with the
offline EchoModel; the loop's clock is scripted: every `COLD_EVERY`-th user message arrives
`TTL + 60` s after the thread's last message, every other one at once. A provider's prompt
cache does not survive the long gaps, so a cold turn's WHOLE prompt is counted as uncached;
a hot turn's uncached tokens are those past the prefix it repeats from the previous prompt
(the loop's own `prefix_reused_tokens`, checked against the prompts the model received, as
`bench/cache.py` does).

Per setting and TTL: `hot_extends_pct`, the hot turns whose prompt extends the previous one
(the turns a cache can serve); `uncached_tokens`, chat prompt tokens a cache cannot serve;
`folds` and `summary_tokens`, what the summarizer was asked for (an early fold is a smaller
batch, so there may be more of them); `with_summaries`, the uncached tokens plus the
summarizer's (its prompts are new text each time).
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.cache import RecordingModel, bench_loop, script
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store.sql import SqlAgentStore

TURNS = 200
TTL = 300.0
COLD_EVERY = (6, 15)
"""The scenarios: every sixth (then every fifteenth) user message comes after an idle gap
longer than the TTL (`TTL + 60` s)."""
COLD_SETTINGS: dict[str, dict[str, Any]] = {
    "summaries 40/20": {"max_messages": 40, "min_messages": 20, "summarize": True},
    "summaries 24/4": {"max_messages": 24, "min_messages": 4, "summarize": True},
}
"""Summarizing windows (high mark / the count a fold cuts back to)."""


@dataclass
class ScriptedClock:
    """The real time plus the idle gap scripted before the current turn: the store dates
    messages by the real clock, so `now - last message` is that gap."""

    gap: float = 0.0

    def __call__(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.gap)


def gaps(turns: int, every: int, ttl: float = TTL) -> list[float]:
    """The idle gap before each turn (the first turn has none: the thread is new)."""
    return [ttl + 60.0 if n and n % every == 0 else 0.0 for n in range(turns)]


async def cold_conversation(
    history: dict[str, Any], ttl: float, messages: list[str], idle: list[float], url: str
) -> dict[str, Any]:
    """One thread, one user message per turn after its scripted gap, the loop's TTL `ttl`."""
    store = SqlAgentStore.from_url(url)
    await store.create_schema()
    recorder = RecordingModel(EchoModel())
    clock = ScriptedClock()
    loop = bench_loop(store, recorder, history, cache_ttl_seconds=ttl, clock=clock)
    thread = await store.create_thread(actor_id="bench", agent="bench")
    reports = []
    try:
        for content, gap in zip(messages, idle, strict=True):
            clock.gap = gap
            result = await loop.run_turn(
                agent="bench",
                thread_id=thread.id,
                actor_id="bench",
                content=content,
                run_id=str(uuid.uuid4()),
            )
            reports.append(result.report)
    finally:
        await store.dispose()
    return _cold_figures(reports, recorder, [g >= TTL for g in idle])


def _cold_figures(reports: list[Any], recorder: RecordingModel, cold: list[bool]) -> dict[str, Any]:
    calls = [next(m for m in r.model_calls if m.purpose == "chat") for r in reports]
    prompts = recorder.chat
    for n in range(1, len(calls)):  # the loop's prefix figures are what the prompts show
        previous, current = prompts[n - 1], prompts[n]
        same = 0
        while same < min(len(previous), len(current)) and previous[same] == current[same]:
            same += 1
        if same != calls[n].prefix_reused_messages:
            raise AssertionError(f"turn {n}: the report says {calls[n]}, the prompts {same}")
    uncached = calls[0].prompt_estimated_tokens
    hot = extends = 0
    for n in range(1, len(calls)):
        if cold[n]:
            uncached += calls[n].prompt_estimated_tokens
            continue
        hot += 1
        extends += calls[n].extends_previous
        uncached += calls[n].prompt_estimated_tokens - calls[n].prefix_reused_tokens
    summaries = [m for r in reports for m in r.model_calls if m.purpose == "history_summary"]
    figures: dict[str, Any] = {
        "turns": len(reports),
        "cold_turns": sum(cold[1:]),
        "hot_extends_pct": 100.0 * extends / max(1, hot),
        "prompt_tokens": sum(c.prompt_estimated_tokens for c in calls),
        "uncached_tokens": uncached,
        "folds": len(summaries),
        "summary_tokens": sum(m.prompt_tokens + m.completion_tokens for m in summaries),
    }
    figures["with_summaries"] = figures["uncached_tokens"] + figures["summary_tokens"]
    return figures


async def run_cold_bench(
    turns: int = TURNS,
    every: int = COLD_EVERY[0],
    settings: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every setting before (TTL 0) and after (TTL 300 s), each in a fresh SQLite database."""
    messages, idle = script(turns), gaps(turns, every)
    out: dict[str, Any] = {"turns": turns, "ttl": TTL, "cold_every": every, "settings": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, history) in enumerate((settings or COLD_SETTINGS).items()):
            pair = {}
            for label, ttl in (("before", 0.0), ("after", TTL)):
                url = f"sqlite+aiosqlite:///{Path(tmp) / f'cold{i}-{label}.db'}"
                pair[label] = await cold_conversation(history, ttl, messages, idle, url)
            out["settings"][name] = {"history": history, **pair}
    return out


def render_cold(results: dict[str, Any]) -> str:
    lines = [
        f"Folding when the cache is cold: {results['turns']} turns, every "
        f"{results['cold_every']}th after an idle gap past the TTL ({results['ttl']:.0f} s); "
        "a cold turn's whole prompt counts as uncached",
        f"{'setting':18} {'TTL':>5} {'hot turns':>10} {'uncached':>9} {'prompt':>8} "
        f"{'folds':>6} {'summary':>8} {'uncached +':>10}",
        f"{'':18} {'':>5} {'extend %':>10} {'tokens':>9} {'tokens':>8} {'':>6} {'tokens':>8} "
        f"{'summary':>10}",
    ]
    for name, pair in results["settings"].items():
        for label, ttl in (("before", 0.0), ("after", results["ttl"])):
            f = pair[label]
            lines.append(
                f"{name:18} {ttl:5.0f} {f['hot_extends_pct']:10.1f} {f['uncached_tokens']:9,} "
                f"{f['prompt_tokens']:8,} {f['folds']:6} {f['summary_tokens']:8,} "
                f"{f['with_summaries']:10,}"
            )
    return "\n".join(lines)


def cold_holds(results: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per setting, (uncached tokens before, after): the check is after <= before."""
    return {
        name: (pair["before"]["uncached_tokens"], pair["after"]["uncached_tokens"])
        for name, pair in results["settings"].items()
    }
