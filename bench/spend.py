"""Spend: what a long thread's input costs per provider price table, uncached vs cached.

A scripted thread (`bench.cache.script`) runs through the real loop (SQLite, EchoModel) with
the hysteresis window; every chat prompt the model received is then replayed, call by call,
against a simulation of each provider's prompt cache, fed the request body the project's own
provider would send:

- Anthropic-native: `providers.anthropic.messages_body` (the real breakpoints). Anthropic's
  cache as documented: entries written only at breakpoints; a breakpoint reads the longest entry
  among the 20 blocks before it; a prefix below the model's minimum (1,024) is neither read nor
  written. Reads bill 0.1x, writes 1.25x (5-minute cache; the thread never idles).
- OpenAI: automatic prefix caching of the thread's previous prompt (one `prompt_cache_key` per
  thread routes to one cache), in 128-token steps from 1,024 tokens.

Token counts are the chars/4 estimate on the body's blocks (the same for every column, so the
ratios hold). Tool-result eviction is not built yet: no `+ eviction` column.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.cache import conversation, script
from bounded_agents.core.ports import ModelRequest
from bounded_agents.providers.anthropic.wire import (
    LOOKBACK_BLOCKS,
    messages_body,
    min_cacheable_tokens,
)
from bounded_agents.providers.echo import EchoModel
from bounded_agents.providers.openai.wire import wire_message

TURNS = 500
HISTORY = {"max_messages": 40, "min_messages": 20}
PRICES = {
    # $ per million input tokens: plain, cache read, cache write
    "anthropic claude-sonnet-4-5": (3.00, 0.30, 3.75),
    "openai gpt-5": (1.25, 0.125, 1.25),
}
ANTHROPIC_MODEL = "claude-sonnet-4-5"


def _tokens(value: Any) -> int:
    return math.ceil(len(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) / 4)


def _unmarked(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _chain(blocks: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """Per block: the hash of the prefix through it, and the prefix's tokens."""
    digest = hashlib.sha256()
    hashes, cum, total = [], [], 0
    for block in blocks:
        digest.update(json.dumps(_unmarked(block), sort_keys=True).encode())
        hashes.append(digest.copy().hexdigest())
        total += _tokens(_unmarked(block))
        cum.append(total)
    return hashes, cum


def anthropic_calls(prompts: list[ModelRequest]) -> list[dict[str, int]]:
    cache: set[str] = set()
    minimum = min_cacheable_tokens(ANTHROPIC_MODEL)
    out = []
    for request in prompts:
        body, _ = messages_body(request, model=ANTHROPIC_MODEL, stream=False, max_tokens=None)
        blocks = list(body.get("tools", [])) + list(body.get("system", []))
        blocks += [b for turn in body["messages"] for b in turn["content"]]
        hashes, cum = _chain(blocks)
        marks = [i for i, b in enumerate(blocks) if "cache_control" in b]
        hit = -1
        for mark in marks:
            for p in range(mark, max(mark - LOOKBACK_BLOCKS, -1), -1):
                if hashes[p] in cache:
                    hit = max(hit, p)
                    break
        total = cum[-1]
        end = cum[marks[-1]] if marks else 0
        if end >= minimum:
            read = cum[hit] if hit >= 0 else 0
            written = end - read
            cache.update(hashes[m] for m in marks)
        else:
            read = written = 0
        out.append({"input": total, "read": read, "written": written})
    return out


def openai_calls(prompts: list[ModelRequest]) -> list[dict[str, int]]:
    previous: list[str] = []
    out = []
    for request in prompts:
        blocks = [wire_message(m) for m in request.messages]
        hashes, cum = _chain(blocks)
        same = 0
        while same < min(len(hashes), len(previous)) and hashes[same] == previous[same]:
            same += 1
        common = cum[same - 1] if same else 0
        read = (common // 128) * 128 if common >= 1024 else 0
        out.append({"input": cum[-1], "read": read, "written": 0})
        previous = hashes
    return out


def _cost(calls: list[dict[str, int]], prices: tuple[float, float, float]) -> float:
    plain, read, write = prices
    return (
        sum(
            (c["input"] - c["read"] - c["written"]) * plain
            + c["read"] * read
            + c["written"] * write
            for c in calls
        )
        / 1_000_000
    )


async def run_spend_bench(turns: int = TURNS) -> dict[str, Any]:
    from bench.cache import RecordingModel  # the recorder keeps every chat prompt

    prompts: list[ModelRequest] = []

    class Keeping(RecordingModel):
        async def complete(self, request: ModelRequest) -> Any:
            if request.purpose == "chat":
                prompts.append(request)
            return await super().complete(request)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'spend.db'}"
        await conversation(HISTORY, Keeping(EchoModel()), script(turns), url)
    results: dict[str, Any] = {"turns": turns, "history": HISTORY, "providers": {}}
    for name, prices in PRICES.items():
        calls = anthropic_calls(prompts) if name.startswith("anthropic") else openai_calls(prompts)
        uncached = [{**c, "read": 0, "written": 0} for c in calls]
        hit = [c["read"] / c["input"] for c in calls if c["input"]]
        results["providers"][name] = {
            "input_tokens": sum(c["input"] for c in calls),
            "cached_reads": sum(c["read"] for c in calls),
            "cache_writes": sum(c["written"] for c in calls),
            "cost_uncached": _cost(uncached, prices),
            "cost_cached": _cost(calls, prices),
            "hit_share_mean": statistics.fmean(hit) if hit else 0.0,
            "hit_share_median": statistics.median(hit) if hit else 0.0,
        }
        f = results["providers"][name]
        f["cached_vs_uncached"] = f["cost_cached"] / f["cost_uncached"]
    return results


def render_spend(results: dict[str, Any]) -> str:
    lines = [
        f"Spend: {results['turns']}-turn thread, hysteresis {results['history']}, EchoModel",
        f"{'price table':30} {'input tok':>10} {'reads':>10} {'writes':>9} {'$ uncached':>10} "
        f"{'$ cached':>9} {'ratio':>6} {'hit/turn':>8}",
    ]
    for name, f in results["providers"].items():
        lines.append(
            f"{name:30} {f['input_tokens']:10,} {f['cached_reads']:10,} {f['cache_writes']:9,} "
            f"{f['cost_uncached']:10.3f} {f['cost_cached']:9.3f} {f['cached_vs_uncached']:6.2f} "
            f"{f['hit_share_mean']:8.1%}"
        )
    return "\n".join(lines)


def spend_main(json_path: Path, turns: int = TURNS) -> int:
    """`python -m bench --spend`: the table, and the figures as JSON beside the other results."""
    results = asyncio.run(run_spend_bench(turns))
    print(render_spend(results))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {json_path}")
    return 0
