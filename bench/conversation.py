"""A scripted conversation of many turns (200 by default) on a fresh thread, with a rolling
summary (`{"max_messages": 10, "summarize": True}`) and the offline EchoModel: what the
summarizer is handed per fold and in total as the conversation grows.

The promise checked: summarizer input per fold stays below a fixed bound (the policy's
`fold_max_tokens`, and in practice far below it), and the total over the conversation grows
linearly with the turns (total at 200 turns about twice the total at 100), where re-summarizing
every dropped message every turn would grow it quadratically.

The script mixes plain questions of varying length with tool turns whose result size varies, so
folds carry different loads; it is seeded, so every run sends the same conversation.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from bench.data import ACTOR, AGENT, tool_output
from bench.policies import CountingStore, turn_figures
from bounded_agents.core.summary import DEFAULT_FOLD_MAX_TOKENS
from bounded_agents.module import AgentModule
from bounded_agents.providers.echo import EchoModel
from bounded_agents.registry import agent, tool
from bounded_agents.settings import Settings

WORDS = (
    "budget invoice shipment customer ticket refund order warehouse delay contract clause "
    "deadline supplier quote region forecast margin audit policy renewal discount"
).split()


def checkpoints(turns: int) -> list[int]:
    """Turns at which the running total of summarizer input is reported: each quarter of the
    conversation (50, 100, 150, 200 for 200 turns)."""
    return sorted({max(1, turns * k // 4) for k in (1, 2, 3, 4)})


def script(turns: int, seed: int = 200) -> list[str]:
    """The user's messages: every fourth turn reads a page (1-6 KB tool result, the size
    carried in the URL), the others ask a question of 5 to 80 words."""
    rng = random.Random(seed)
    out = []
    for i in range(1, turns + 1):
        if i % 4 == 0:
            out.append(f"/read_page https://e.x/doc-{i}?size={rng.randint(1024, 6144)}")
        else:
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 80)))
            out.append(f"Turn {i}: {words}?")
    return out


def conversation_agent(history: dict[str, Any]) -> type:
    """An agent whose one tool returns a page of the size its URL asks for."""

    @agent(name=AGENT, system_prompt="You answer from the pages you read.", history=history)
    class ConversationAgent:
        @tool
        async def read_page(self, url: str) -> str:
            """Read a web page."""
            size = int(url.rsplit("size=", 1)[-1])
            return tool_output(random.Random(url), size)

    return ConversationAgent


async def scripted_conversation(
    store: CountingStore, *, turns: int, window: int, fold_max_tokens: int = DEFAULT_FOLD_MAX_TOKENS
) -> dict[str, Any]:
    """Run `script(turns)` through `module.run_turn` on a fresh thread and return per-fold and
    cumulative summarizer figures (see the module docstring)."""
    history = {"max_messages": window, "summarize": True, "fold_max_tokens": fold_max_tokens}
    settings = Settings(
        migrate_on_start=False,
        history_max_messages=None,
        history_max_tokens=None,
        token_quota=None,
        api_keys=None,
    )
    module = AgentModule.for_root(
        model=EchoModel(), store=store, agents=[conversation_agent(history)], settings=settings
    )
    thread = await store.create_thread(actor_id=ACTOR, agent=AGENT, title="scripted")
    folds: list[dict[str, Any]] = []
    per_turn: list[dict[str, Any]] = []
    started = time.perf_counter()
    for i, content in enumerate(script(turns), start=1):
        store.reset()
        start = time.perf_counter()
        result = await module.run_turn(
            agent=AGENT, thread_id=thread.id, actor_id=ACTOR, content=content
        )
        figures = turn_figures(result, store, time.perf_counter() - start)
        summary_calls = [c for c in result.report.model_calls if c.purpose == "history_summary"]
        for call in summary_calls:
            folds.append(
                {
                    "turn": i,
                    # The loop's estimate per call; a turn with one fold gives it exactly.
                    "input_tokens": figures["input_tokens"] // max(1, figures["folds"]),
                    "input_messages": call.messages_sent,
                    "prompt_tokens": call.prompt_tokens,
                    "summary_tokens": call.completion_tokens,
                }
            )
        per_turn.append(
            {
                "turn": i,
                "ms": figures["ms"],
                "rows": figures["rows"],
                "backlog_rows": figures["backlog_rows"],
                "folds": figures["folds"],
                "input_tokens": figures["input_tokens"],
                "prompt_tokens": sum(figures["prompt_tokens"]),
                "covers_through_seq": figures["covers_through_seq"],
            }
        )
    elapsed = time.perf_counter() - started
    return summarize_conversation(per_turn, folds, window, fold_max_tokens, elapsed)


def summarize_conversation(
    per_turn: list[dict[str, Any]],
    folds: list[dict[str, Any]],
    window: int,
    fold_max_tokens: int,
    elapsed_s: float,
) -> dict[str, Any]:
    """Per-fold maximum and mean, running totals at the checkpoints, and how the totals and the
    per-fold input grow (ratios near 2 and 1 mean linear in turns and flat per fold)."""
    n = len(per_turn)
    marks = checkpoints(n)
    totals: dict[str, dict[str, int]] = {}
    running_in = running_prompt = 0
    for t in per_turn:
        running_in += t["input_tokens"]
        running_prompt += t["prompt_tokens"]
        if t["turn"] in marks:
            totals[str(t["turn"])] = {"input_tokens": running_in, "prompt_tokens": running_prompt}
    inputs = [f["input_tokens"] for f in folds]
    prompts = [f["prompt_tokens"] for f in folds]
    half = len(folds) // 2

    def total_ratio(a: int, b: int, key: str) -> float | None:
        if str(a) not in totals or str(b) not in totals or not totals[str(b)][key]:
            return None
        return totals[str(a)][key] / totals[str(b)][key]

    return {
        "turns": n,
        "window": window,
        "fold_max_tokens": fold_max_tokens,
        "elapsed_s": elapsed_s,
        "turn_ms_mean": statistics.fmean(t["ms"] for t in per_turn) if per_turn else 0.0,
        "rows_max": max((t["rows"] for t in per_turn), default=0),
        "backlog_rows_max": max((t["backlog_rows"] for t in per_turn), default=0),
        "folds": len(folds),
        "fold_turns": sum(1 for t in per_turn if t["folds"]),
        "input_tokens_max": max(inputs, default=0),
        "input_tokens_mean": statistics.fmean(inputs) if inputs else 0.0,
        "input_tokens_mean_first_half": statistics.fmean(inputs[:half]) if half else 0.0,
        "input_tokens_mean_second_half": statistics.fmean(inputs[half:]) if half else 0.0,
        "prompt_tokens_max": max(prompts, default=0),
        "prompt_tokens_mean": statistics.fmean(prompts) if prompts else 0.0,
        "summary_tokens_max": max((f["summary_tokens"] for f in folds), default=0),
        "totals": totals,
        # With 200 turns: total(200)/total(100) and total(100)/total(50).
        "growth_full_half": total_ratio(n, n // 2, "input_tokens"),
        "growth_half_quarter": total_ratio(n // 2, n // 4, "input_tokens"),
        "prompt_growth_full_half": total_ratio(n, n // 2, "prompt_tokens"),
        "per_fold": folds,
        "per_turn": per_turn,
    }
