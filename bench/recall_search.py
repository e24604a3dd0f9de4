"""Recall with the history search tool on: what the model can still find, not only what its
prompt holds.

The same seeded conversations as `bench.recall`, through the same module, with the agent
declared `search=True`. At each probe point one probe turn is inserted: the scripted model
asks `search_history` about every fact the user has stated so far (`What is <key>?`, one call
each, as a model that knows what it needs would), then answers. Two figures come from that one
turn: recall WITHOUT search is the probe turn's first prompt (window and summary, what
`bench.recall` measures), recall WITH search the prompt of its answering call (the same, plus
the search results). The probe turns stay in the thread, as they would in a real one.

Only message text is searchable: the tracking number, which only a tool result carries, is
found only by a strategy whose summary or window holds it.

`python -m bench --recall-search [--recall-turns 120,500] [--recall-seeds 0,1,2,3]`
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.recall import (
    ACTOR,
    AGENT,
    STRATEGIES,
    SYSTEM_PROMPT,
    Conversation,
    ReferenceSummarizer,
    ScriptedChat,
    _probe,
    conversation,
    probe_points,
)
from bench.turns import search_probe_settings
from bounded_agents.core.history import whole_thread
from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse, Summarizer, Usage
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.module import AgentModule
from bounded_agents.registry import agent, tool
from bounded_agents.store.sql import SqlAgentStore

SEARCH_PROBE = "Quick check before we go on: what do you still know about me? Look it up."
"""The probe turn's message; the scripted model searches when it sees it."""

_PROBE_CALL = "probe"


class SearchingChat(ScriptedChat):
    """`ScriptedChat`, and on the probe turn: one `search_history` call per key in `keys`,
    then an answer. `before` and `after` are that turn's two prompts."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []
        self.before: list[ChatMessage] = []
        self.after: list[ChatMessage] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        usage = Usage(prompt_tokens=sum(estimate_message_tokens(m) for m in request.messages))
        if last.role == "user" and last.content == SEARCH_PROBE:
            self.before = list(request.messages)
            calls = [
                ToolCall(
                    id=f"{_PROBE_CALL}_{i}",
                    name=SEARCH_TOOL_NAME,
                    arguments={"query": f"What is {key}?"},
                )
                for i, key in enumerate(self.keys)
            ]
            return ModelResponse(content="", tool_calls=calls, usage=usage, model=self.model)
        if last.role == "tool" and (last.tool_call_id or "").startswith(_PROBE_CALL):
            self.after = list(request.messages)
            return ModelResponse(content="Here is what I found.", usage=usage, model=self.model)
        return await super().complete(request)


def _agent_class(history: dict[str, Any] | None, tool_results: list[str]) -> type:
    policy = whole_thread() if history is None else history

    @agent(name=AGENT, system_prompt=SYSTEM_PROMPT, history=policy, search=True)
    class SearchingRecallAgent:
        @tool
        async def look_up(self) -> str:
            """Look up the user's parcel."""
            return tool_results.pop(0)

    return SearchingRecallAgent


async def run_search_strategy(
    history: dict[str, Any] | None,
    summarizer: Summarizer | None,
    convo: Conversation,
    probes: Sequence[int],
    url: str,
) -> dict[str, Any]:
    """The conversation with a probe turn at each probe point; recall without and with search."""
    if history is not None and history.get("summarize"):
        history = {**history, "summarize": summarizer}
    store = SqlAgentStore.from_url(url)
    await store.create_schema()
    chat = SearchingChat()
    tool_results = [t.tool_result for t in convo.turns if t.tool_result is not None]
    module = AgentModule.for_root(
        model=chat,
        store=store,
        agents=[_agent_class(history, tool_results)],
        settings=search_probe_settings(len(convo.facts)),
    )
    thread = await store.create_thread(actor_id=ACTOR, agent=AGENT)
    off: list[dict[str, Any]] = []
    on: list[dict[str, Any]] = []
    wanted = set(probes)

    async def probe(done: int) -> None:
        chat.keys = [f.key for f in convo.facts if f.current(done - 1) is not None]
        await module.run_turn(
            agent=AGENT, thread_id=thread.id, actor_id=ACTOR, content=SEARCH_PROBE
        )
        for out, prompt in ((off, chat.before), (on, chat.after)):
            found = await _probe(store, thread.id, convo, done, prompt)
            out.append(found.__dict__ | {"recall": found.recall})

    try:
        for n, turn in enumerate(convo.turns):
            if n in wanted:
                await probe(n)
            await module.run_turn(
                agent=AGENT, thread_id=thread.id, actor_id=ACTOR, content=turn.content
            )
        if len(convo.turns) in wanted:
            await probe(len(convo.turns))
    finally:
        await store.dispose()
    return {"without_search": off, "with_search": on}


async def run_recall_search(
    turn_counts: Sequence[int],
    seeds: Sequence[int] = (0,),
    *,
    strategies: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every strategy (the reference summarizer for the summarizing ones), per length and seed."""
    out: dict[str, Any] = {"runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for turns in turn_counts:
            for seed in seeds:
                convo = conversation(turns, seed=seed)
                for strategy in strategies or STRATEGIES:
                    n += 1
                    url = f"sqlite+aiosqlite:///{Path(tmp) / f's{n}.db'}"
                    figures = await run_search_strategy(
                        STRATEGIES[strategy], ReferenceSummarizer(), convo, probe_points(turns), url
                    )
                    row = {"turns": turns, "seed": seed, "strategy": strategy, **figures}
                    out["runs"].append(row)
                    log(_line(row))
    return out


def _recalls(probes: list[dict[str, Any]]) -> str:
    return ", ".join(f"{p['turn']}: {p['recall']:.0f}" for p in probes)


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['turns']:>4} s{row['seed']} {row['strategy']:<26} "
        f"off [{_recalls(row['without_search'])}] on [{_recalls(row['with_search'])}]"
    )


def render(results: dict[str, Any]) -> str:
    lines = [
        "| turns | seed | strategy | recall without search (turn: %) | "
        "recall with search (turn: %) | stale with search (max) | "
        "probe prompt tokens with search (last probe) |",
        "|---|---:|---|---|---|---:|---:|",
    ]
    for row in results["runs"]:
        on = row["with_search"]
        stale = max((p["stale"] for p in on), default=0)
        lines.append(
            f"| {row['turns']} | {row['seed']} | {row['strategy']} | "
            f"{_recalls(row['without_search'])} | {_recalls(on)} | {stale} | "
            f"{on[-1]['prompt_tokens']:,} |"
        )
    return "\n".join(lines)


def recall_search_main(json_path: Path, turn_counts: Sequence[int], seeds: Sequence[int]) -> int:
    results = asyncio.run(run_recall_search(turn_counts, seeds))
    print(render(results))
    json_path.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {json_path}")
    return 0
