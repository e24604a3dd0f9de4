"""Prompt-cache friendliness: a scripted conversation through the real loop, per history setting.

Every setting answers the same `turns` user messages (sizes vary, seeded) in one thread on
SQLite with the offline EchoModel. Per setting, from the run reports (`prompt_cache`, model
calls) and checked against the prompts the model actually received:

- `extends_pct`: turns (after the first) whose prompt extends the previous turn's whole prompt
  byte for byte, which is what a provider's prefix cache needs to serve all of it;
  `steady_pct` the same from turn `STEADY_FROM` on, once every setting's window is full (a
  sliding window extends its prompt while the thread is still shorter than the window);
- `reused_msgs` / `reused_tokens`: the mean prefix each turn repeats from the previous one;
- `prompt_tokens`: estimated prompt tokens sent over all turns (chat calls), and
  `vs_window10`, that total against the sliding window of 10;
- `new_tokens`: of them, those NOT in a repeated prefix (what a cache cannot serve);
- `summary_tokens`: summarizer input and output (a summarizing setting pays it as well).

`live(...)` runs a short conversation against a real OpenAI-compatible server (llama.cpp) and
records each turn's wall time and the cached tokens the server reports, if it reports any.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bounded_agents.core.history import HistoryConfig, policy_from_config
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelProvider, ModelRequest, ModelResponse
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.durable import SqlJournal
from bounded_agents.providers.echo import EchoModel
from bounded_agents.providers.openai.compat import OpenAICompatibleProvider
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.sql import SqlAgentStore

TURNS = 200
SETTINGS: dict[str, dict[str, Any]] = {
    "window 10": {"max_messages": 10},
    "window 40": {"max_messages": 40},
    "window 10 + summaries": {"max_messages": 10, "summarize": True},
    "hysteresis 40/20": {"max_messages": 40, "min_messages": 20},
    "hysteresis 40/20 + summaries": {"max_messages": 40, "min_messages": 20, "summarize": True},
    "hysteresis 24/4": {"max_messages": 24, "min_messages": 4},
}
"""What is compared. `window 10` is today's sliding window and the size baseline."""
BASELINE = "window 10"
STEADY_FROM = 26
"""From this turn on the thread holds over 50 messages: past every setting's high mark."""
SYSTEM_PROMPT = "You are a careful assistant. Answer from the conversation so far."


def script(turns: int, seed: int = 17) -> list[str]:
    """The user's messages: a question number and 10..400 characters of filler, seeded."""
    rng = random.Random(seed)
    words = "cache prefix window summary thread token budget model answer question".split()
    out = []
    for n in range(turns):
        size = rng.randint(10, 400)
        text = f"Question {n}:"
        while len(text) < size:
            text += " " + rng.choice(words)
        out.append(text)
    return out


class RecordingModel:
    """The model behind a recorder: every chat request as sent, for the independent check."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner
        self.model = getattr(inner, "model", "model")
        self.chat: list[list[ChatMessage]] = []
        self.seconds: list[float] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        start = time.perf_counter()
        response = await self.inner.complete(request)
        if request.purpose == "chat":
            self.chat.append(list(request.messages))
            self.seconds.append(time.perf_counter() - start)
        return response


def bench_loop(
    store: SqlAgentStore, recorder: RecordingModel, history: dict[str, Any], **options: Any
) -> AgentLoop:
    """One agent, `bench`, with `history`, on the SQL store, journal and ledger of `store`;
    `options` go to `AgentLoop` (the cache-cold bench's TTL and clock)."""
    definition = AgentDefinition(
        name="bench",
        system_prompt=SYSTEM_PROMPT,
        policy=policy_from_config(HistoryConfig.coerce(history), recorder),
    )
    return AgentLoop(
        store=store,
        runtime=SqlJournal(store.engine, lease_seconds=60),
        ledger=SqlLedger(store.engine),
        model=recorder,
        agents={"bench": definition},
        **options,
    )


async def conversation(
    history: dict[str, Any],
    model: ModelProvider,
    messages: list[str],
    url: str,
    reports_out: list[Any] | None = None,
) -> dict[str, Any]:
    """One thread, one user message per turn, through `AgentLoop` on the store at `url`."""
    store = SqlAgentStore.from_url(url)
    await store.create_schema()
    recorder = RecordingModel(model)
    loop = bench_loop(store, recorder, history)
    thread = await store.create_thread(actor_id="bench", agent="bench")
    reports = []
    try:
        for content in messages:
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
    if reports_out is not None:
        reports_out.extend(reports)
    return _figures(reports, recorder)


def _figures(reports: list[Any], recorder: RecordingModel) -> dict[str, Any]:
    prompts = recorder.chat
    # EchoModel answers in one step: one chat call per turn (after any summarizer call).
    calls = [next(m for m in r.model_calls if m.purpose == "chat") for r in reports]
    compared = calls[1:]
    # The independent check: the loop's figures are what the prompts themselves show.
    for n, call in enumerate(compared, start=1):
        previous, current = prompts[n - 1], prompts[n]
        same = 0
        while same < min(len(previous), len(current)) and previous[same] == current[same]:
            same += 1
        if same != call.prefix_reused_messages or call.extends_previous != (same == len(previous)):
            raise AssertionError(f"turn {n}: the report says {call}, the prompts {same}")
    prompt_tokens = sum(c.prompt_estimated_tokens for c in calls)
    reused = sum(c.prefix_reused_tokens for c in compared)
    summary_tokens = sum(
        m.prompt_tokens + m.completion_tokens
        for r in reports
        for m in r.model_calls
        if m.purpose == "history_summary"
    )
    cached = [c.cached_tokens for c in calls if c.cached_tokens is not None]
    return {
        "turns": len(reports),
        "extends_pct": 100.0 * sum(c.extends_previous for c in compared) / max(1, len(compared)),
        "steady_pct": 100.0
        * sum(c.extends_previous for c in calls[STEADY_FROM - 1 :])
        / max(1, len(calls) - STEADY_FROM + 1),
        "reused_msgs": statistics.fmean(c.prefix_reused_messages for c in compared),
        "reused_tokens": statistics.fmean(c.prefix_reused_tokens for c in compared),
        "prompt_msgs": statistics.fmean(c.messages_sent for c in calls),
        "prompt_tokens": prompt_tokens,
        "new_tokens": prompt_tokens - reused,
        "summary_tokens": summary_tokens,
        "cached_tokens": sum(cached) if cached else None,
        "turn_seconds": recorder.seconds,
        "max_prompt_tokens": max(sum(estimate_message_tokens(m) for m in p) for p in prompts),
    }


async def run_cache_bench(
    turns: int = TURNS, settings: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Every setting over the same script, each in a fresh SQLite database."""
    messages = script(turns)
    out: dict[str, Any] = {"turns": turns, "settings": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, history) in enumerate((settings or SETTINGS).items()):
            url = f"sqlite+aiosqlite:///{Path(tmp) / f'cache{i}.db'}"
            figures = await conversation(history, EchoModel(), messages, url)
            figures.pop("turn_seconds")
            out["settings"][name] = {"history": history, **figures}
    base = out["settings"].get(BASELINE)
    for figures in out["settings"].values():
        figures["vs_window10"] = (
            figures["prompt_tokens"] / base["prompt_tokens"] if base is not None else None
        )
    out["goal"] = goal(out)
    return out


def goal(results: dict[str, Any]) -> dict[str, Any]:
    """Issue 17's goal per hysteresis setting: >= 90% of turns extend the previous prompt, the
    sliding window 0%, at a total prompt size <= 1.5x the sliding window's."""
    settings = results["settings"]
    base = settings.get(BASELINE)
    verdict: dict[str, Any] = {}
    if base is None:
        return verdict
    for name, figures in settings.items():
        if name.startswith("hysteresis"):
            verdict[name] = {
                "extends_90pct": figures["extends_pct"] >= 90.0,
                "sliding_0pct": base["steady_pct"] == 0.0,
                "size_within_1_5x": figures["vs_window10"] <= 1.5,
            }
    return verdict


def render_cache(results: dict[str, Any]) -> str:
    header = (
        f"Prompt caching: {results['turns']}-turn scripted conversation (EchoModel, SQLite)\n"
        f"{'setting':30} {'extends':>8} {'steady':>7} {'reused':>7} {'reused':>7} {'prompt':>7} "
        f"{'prompt tok':>10} {'vs w10':>6} {'new tok':>9} {'summary':>8}\n"
        f"{'':30} {'prev %':>8} {'%':>7} {'msgs':>7} {'tokens':>7} {'msgs':>7} "
        f"{'(total)':>10} {'':>6} {'(uncached)':>9} {'tokens':>8}"
    )
    lines = [header]
    for name, f in results["settings"].items():
        lines.append(
            f"{name:30} {f['extends_pct']:8.1f} {f['steady_pct']:7.1f} "
            f"{f['reused_msgs']:7.1f} {f['reused_tokens']:7.0f} "
            f"{f['prompt_msgs']:7.1f} {f['prompt_tokens']:10,} {f['vs_window10']:6.2f} "
            f"{f['new_tokens']:9,} {f['summary_tokens']:8,}"
        )
    for name, verdict in results.get("goal", {}).items():
        held = all(verdict.values())
        lines.append(f"goal ({name}): {'MET' if held else 'NOT met'} {verdict}")
    return "\n".join(lines)


LIVE_SETTINGS: dict[str, dict[str, Any]] = {
    "window 6": {"max_messages": 6},
    "hysteresis 10/2": {"max_messages": 10, "min_messages": 2},
}
"""The live comparison: no summaries (the summarizer's own calls would evict the server's
single cached sequence), windows small enough for a 135M model on two shared cores."""
_PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt")


class _ShortAnswers(OpenAICompatibleProvider):
    """Answers capped at `max_tokens`, greedy: the turns' time is then mostly the prompt's."""

    max_tokens = 24

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return {
            **super()._body(request, stream=stream),
            "max_tokens": self.max_tokens,
            "temperature": 0,
        }


async def live(
    base_url: str,
    model_name: str,
    turns: int,
    settings: dict[str, dict[str, Any]] | None = None,
    server_log: Path | None = None,
    request_seconds: float = 600.0,
) -> dict[str, Any]:
    """The same script, shorter (messages of at most 120 characters), against a real
    OpenAI-compatible server: per setting each turn's wall time, the cached tokens the server
    reports in `usage` (None if it reports none), and, given the server's log
    (llama-cpp-python's `--verbose True`), the prompt tokens it says it reused from its cache
    ("N prefix-match hit")."""
    messages = [m[:120] for m in script(turns)]
    out: dict[str, Any] = {"turns": turns, "base_url": base_url, "settings": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, history) in enumerate((settings or LIVE_SETTINGS).items()):
            provider = _ShortAnswers(
                base_url, None, model_name, timeout=request_seconds, max_retries=0
            )
            url = f"sqlite+aiosqlite:///{Path(tmp) / f'live{i}.db'}"
            offset = _log_size(server_log)
            store_figures, reports = await _conversation_with_reports(
                history, provider, messages, url
            )
            figures = {"history": history, **store_figures}
            figures["server_prompt_tokens"] = sum(
                m.prompt_tokens for r in reports for m in r.model_calls if m.purpose == "chat"
            )
            if server_log is not None:
                hits = _prefix_hits(server_log, offset)
                figures["server_reused_tokens"] = sum(a for a, _ in hits)
                figures["server_evaluated_tokens"] = (
                    figures["server_prompt_tokens"] - figures["server_reused_tokens"]
                )
            seconds = figures["turn_seconds"]
            figures["mean_turn_s"] = statistics.fmean(seconds)
            figures["mean_turn_s_after_3"] = (
                statistics.fmean(seconds[3:]) if len(seconds) > 3 else None
            )
            out["settings"][name] = figures
    return out


def _log_size(path: Path | None) -> int:
    return path.stat().st_size if path is not None else 0


def _prefix_hits(path: Path, offset: int) -> list[tuple[int, int]]:
    """(reused, evaluated) prompt tokens of each request the server logged a prefix hit for."""
    with path.open() as log:
        log.seek(offset)
        return [(int(a), int(b)) for a, b in _PREFIX_HIT.findall(log.read())]


async def _conversation_with_reports(
    history: dict[str, Any], model: ModelProvider, messages: list[str], url: str
) -> tuple[dict[str, Any], list[Any]]:
    kept: list[Any] = []
    figures = await conversation(history, model, messages, url, reports_out=kept)
    return figures, kept


def live_main(argv: list[str] | None = None) -> int:
    """`python -m bench.cache --live http://127.0.0.1:8717/v1 --model smollm2 --turns 16
    [--server-log llama.log]`: writes results/cache_live.json."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.cache")
    parser.add_argument("--live", required=True, help="OpenAI-compatible API root")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--server-log", type=Path)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "cache_live.json"
    )
    args = parser.parse_args(argv)
    results = asyncio.run(live(args.live, args.model, args.turns, server_log=args.server_log))
    for name, f in results["settings"].items():
        print(
            f"{name:18} extends {f['extends_pct']:5.1f}%  mean turn {f['mean_turn_s']:6.2f} s  "
            f"server prompt tokens {f['server_prompt_tokens']:6}  "
            f"reused (server log) {f.get('server_reused_tokens')}  "
            f"evaluated {f.get('server_evaluated_tokens')}  usage.cached {f['cached_tokens']}"
        )
    args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


def cache_main(json_path: Path, turns: int = TURNS) -> int:
    """`python -m bench --cache`: the tables (bench/cache_cold.py's too), and the figures as
    JSON beside the other results."""
    from bench.cache_cold import COLD_EVERY, render_cold, run_cold_bench

    results = asyncio.run(run_cache_bench(turns))
    print(render_cache(results))
    results["cold"] = [asyncio.run(run_cold_bench(turns, every)) for every in COLD_EVERY]
    for cold in results["cold"]:
        print("\n" + render_cold(cold))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(live_main())
