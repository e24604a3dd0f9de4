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

The thread uses a tool: every `FETCH_EVERY`-th user message asks for a page, the model calls
`fetch` (a seeded 2-20 KB page, the README demo's size at most) and then answers. The same
script runs twice: once with the plain window, once with tool-result clearing
(`EVICTION`: the newest results verbatim, older ones placeholders, in grid-aligned steps). The
columns: uncached (the plain run's prompts, no cache), cached (the same prompts through the
provider's cache) and cached + eviction (the clearing run's prompts through the cache), each
as a share of the uncached cost.

Token counts are the chars/4 estimate on the body's blocks (the same for every column, so the
ratios hold).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.cache import SYSTEM_PROMPT, script
from bounded_agents.core.history import HistoryConfig, policy_from_config
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse, Usage
from bounded_agents.durable import SqlJournal
from bounded_agents.providers.anthropic.wire import (
    LOOKBACK_BLOCKS,
    messages_body,
    min_cacheable_tokens,
)
from bounded_agents.providers.echo import EchoModel
from bounded_agents.providers.openai.wire import wire_message
from bounded_agents.store.ledger import SqlLedger
from bounded_agents.store.sql import SqlAgentStore
from bounded_agents.testing import FunctionTool

TURNS = 500
HISTORY = {"max_messages": 40, "min_messages": 20}
PRICES = {
    # $ per million input tokens: plain, cache read, cache write
    "anthropic claude-sonnet-4-5": (3.00, 0.30, 3.75),
    "openai gpt-5": (1.25, 0.125, 1.25),
}
ANTHROPIC_MODEL = "claude-sonnet-4-5"
FETCH_EVERY = 3
"""Every third user message asks for a page."""
EVICTION = {"clear_tool_results_keep": 1, "clear_tool_results_step_tokens": 4096}
"""The clearing lever: the page of the previous turn that fetched one rides verbatim (a run's
own results are never in its kept history, so the page being answered always does), older
ones are cleared in steps of the default 4,096 estimated tokens."""


def page(n: int) -> str:
    """Page `n`: 2,000-20,000 characters of seeded words."""
    rng = random.Random(n)
    words = "price stock order delivery invoice customer region total margin".split()
    size = rng.randint(2_000, 20_000)
    text = f"Page {n}:"
    while len(text) < size:
        text += f" {rng.choice(words)} {rng.randint(0, 99_999)}"
    return text


def tool_script(turns: int) -> list[str]:
    """`bench.cache.script`, every `FETCH_EVERY`-th message asking for a page."""
    return [
        f"{text} Please fetch page {n}." if n % FETCH_EVERY == 0 else text
        for n, text in enumerate(script(turns))
    ]


class FetchingModel:
    """EchoModel that first calls `fetch` when the user's message asks for a page."""

    model = "echo"

    def __init__(self) -> None:
        self.echo = EchoModel()
        self.prompts: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "chat":
            self.prompts.append(request)
        last = request.messages[-1]
        if last.role == "user" and "Please fetch page " in last.content:
            n = int(last.content.rsplit("Please fetch page ", 1)[1].rstrip("."))
            call = ToolCall(id=f"fetch{n}", name="fetch", arguments={"page": n})
            usage = Usage(prompt_tokens=1, completion_tokens=1)
            return ModelResponse(content="", tool_calls=[call], model="echo", usage=usage)
        return await self.echo.complete(request)


async def tool_thread(history: dict[str, Any], turns: int, url: str) -> list[ModelRequest]:
    """The tool-using thread through `AgentLoop` on SQLite: every chat prompt sent."""
    store = SqlAgentStore.from_url(url)
    await store.create_schema()
    model = FetchingModel()

    async def fetch(page: int) -> str:
        return globals()["page"](page)

    definition = AgentDefinition(
        name="bench",
        system_prompt=SYSTEM_PROMPT,
        policy=policy_from_config(HistoryConfig.coerce(history), model),
        tools={"fetch": FunctionTool("fetch", fetch, "A page of the shop's records.")},
    )
    loop = AgentLoop(
        store=store,
        runtime=SqlJournal(store.engine, lease_seconds=60),
        ledger=SqlLedger(store.engine),
        model=model,
        agents={"bench": definition},
    )
    thread = await store.create_thread(actor_id="bench", agent="bench")
    try:
        for content in tool_script(turns):
            await loop.run_turn(
                agent="bench",
                thread_id=thread.id,
                actor_id="bench",
                content=content,
                run_id=str(uuid.uuid4()),
            )
    finally:
        await store.dispose()
    return model.prompts


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


def _lever(calls: list[dict[str, int]], prices: tuple[float, float, float]) -> dict[str, Any]:
    hit = [c["read"] / c["input"] for c in calls if c["input"]]
    return {
        "input_tokens": sum(c["input"] for c in calls),
        "cached_reads": sum(c["read"] for c in calls),
        "cache_writes": sum(c["written"] for c in calls),
        "cost": _cost(calls, prices),
        "hit_share_mean": statistics.fmean(hit) if hit else 0.0,
        "hit_share_median": statistics.median(hit) if hit else 0.0,
    }


async def run_spend_bench(turns: int = TURNS) -> dict[str, Any]:
    evicting = {**HISTORY, **EVICTION}
    with tempfile.TemporaryDirectory() as tmp:
        plain = await tool_thread(HISTORY, turns, f"sqlite+aiosqlite:///{Path(tmp) / 'a.db'}")
        cleared = await tool_thread(evicting, turns, f"sqlite+aiosqlite:///{Path(tmp) / 'b.db'}")
    results: dict[str, Any] = {
        "turns": turns,
        "history": HISTORY,
        "eviction": EVICTION,
        "fetch_every": FETCH_EVERY,
        "chat_calls": {"plain": len(plain), "eviction": len(cleared)},
        "providers": {},
    }
    for name, prices in PRICES.items():
        simulate = anthropic_calls if name.startswith("anthropic") else openai_calls
        calls, evicted = simulate(plain), simulate(cleared)
        uncached = _lever([{**c, "read": 0, "written": 0} for c in calls], prices)
        f = {
            "uncached": uncached,
            "cached": _lever(calls, prices),
            "cached_eviction": _lever(evicted, prices),
        }
        for lever in ("cached", "cached_eviction"):
            f[lever]["vs_uncached"] = f[lever]["cost"] / uncached["cost"]
        results["providers"][name] = f
    return results


def render_spend(results: dict[str, Any]) -> str:
    lines = [
        f"Spend: {results['turns']}-turn tool-using thread (a page every "
        f"{results['fetch_every']} turns), hysteresis {results['history']}, "
        f"eviction {results['eviction']}, EchoModel",
        f"{'price table':28} {'lever':16} {'input tok':>10} {'reads':>10} {'writes':>9} "
        f"{'$':>7} {'vs uncached':>11} {'hit/call':>8}",
    ]
    for name, f in results["providers"].items():
        for lever in ("uncached", "cached", "cached_eviction"):
            x = f[lever]
            lines.append(
                f"{name:28} {lever.replace('_', ' + '):16} {x['input_tokens']:10,} "
                f"{x['cached_reads']:10,} {x['cache_writes']:9,} {x['cost']:7.3f} "
                f"{x.get('vs_uncached', 1.0):11.2f} {x['hit_share_mean']:8.1%}"
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
