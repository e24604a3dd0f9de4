"""Recall by memory layer, on material the project did not write (`python -m bench --recall`).

Can an agent with a bounded prompt still reach what the user said, whatever its summarizer?
Long support-style threads from `bench.recall_material` (20 facts in varied wordings, 6 of them
corrected, 3 arriving in tool results, filler with pasted logs) run through the module's public
API (`AgentModule.for_root`, `module.run_turn`) on SQLite with a scripted chat model, for each
memory layer:

- `window`: a sliding window of W messages, nothing else;
- `summary`: the window plus the rolling summary of one of the summarizer styles of
  `bench.recall_styles` (compact, verbose, verbose-nocompress, junk, empty, down);
- `search`: the window, and the model searches the thread (`search_history`) once per fact, in
  the fact's topic words only, as a model that needs it would;
- `summary + search`: both.

At each probe point the thread is COPIED (SQLite's backup API) and one probe turn runs on the
copy, so probing never feeds the thread (its search results would otherwise be folded into
later summaries): the probe turn's first prompt is what `window` and `summary` send; the prompt
of its answering call, the same plus every search result, is what `search` and
`summary + search` send. A fact is recalled when its CURRENT value's text is in what the model
is sent; a fact whose current value is missing while an older value is there is counted apart
as stale-as-current. `sent / thread` is what the model is sent (prompt plus search results)
against the estimated tokens of the whole thread at that point; `summarizer tokens` is what the
summarizer was handed plus what it answered (estimates), failed calls included.

One command, one markdown table: `python -m bench --recall` (2 lengths x 2 seeds x 2 windows x
(1 + 6 styles) runs, about 2.5 minutes of CPU; `--quick` is 120 turns, seed 0, window 20,
about 25 s). The table alone goes to stdout, progress and file names to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.recall_material import Fact, Material, Turn, generate
from bench.recall_styles import STYLES, Counted, style
from bench.turns import bench_settings, search_probe_settings
from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse, Summarizer, Usage
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.module import AgentModule
from bounded_agents.registry import agent, tool
from bounded_agents.store.sql import SqlAgentStore

ACTOR = "recall-actor"
AGENT = "support"
SYSTEM_PROMPT = "You are a support assistant. Use what the user told you earlier."
PROBE = "Before we go on, tell me everything you have on file for me. Look it up if you must."
LAYERS = ("window", "summary", "search", "summary + search")
TURNS = (120, 500)
SEEDS = (0, 1)
WINDOWS = (20, 40)
WORST_FROM = 100
"""The worst probe is taken over probe points at or past this turn."""


def probe_points(turns: int) -> list[int]:
    """Every 20 turns up to 150, else every 50, and the end."""
    step = 20 if turns <= 150 else 50
    return sorted({*range(step, turns, step), turns})


# --- the chat model ---------------------------------------------------------------------------


class ScriptedChat:
    """The chat model of the thread: answers each turn with its scripted reply (a question when
    the next turn is an answer to it), calling `look_up` first on a tool turn."""

    model = "scripted-chat"

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.turns = turns
        self.index = -1

    def current(self) -> Turn:
        return self.turns[self.index]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        usage = Usage(prompt_tokens=sum(estimate_message_tokens(m) for m in request.messages))
        if last.role == "user":
            self.index += 1
            if self.current().tool_result is not None:
                call = ToolCall(id=f"call_{self.index}", name="look_up", arguments={})
                return ModelResponse(content="", tool_calls=[call], usage=usage, model=self.model)
        turn = self.current()
        reply = turn.reply or "Thanks, noted. Happy to keep going whenever you are ready."
        return ModelResponse(content=reply, usage=usage, model=self.model)


class ProbeChat:
    """The probe turn's model: one `search_history` call per topic in `topics` (topic words
    only), then an answer. `before` and `after` are the turn's two prompts."""

    model = "probe-chat"

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics
        self.before: list[ChatMessage] = []
        self.after: list[ChatMessage] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        usage = Usage(prompt_tokens=sum(estimate_message_tokens(m) for m in request.messages))
        if last.role == "user":
            self.before = list(request.messages)
            calls = [
                ToolCall(id=f"probe_{i}", name=SEARCH_TOOL_NAME, arguments={"query": topic})
                for i, topic in enumerate(self.topics)
            ]
            if calls:
                return ModelResponse(content="", tool_calls=calls, usage=usage, model=self.model)
        self.after = list(request.messages)
        return ModelResponse(content="Here is what I have.", usage=usage, model=self.model)


def support_agent(
    window: int,
    summarizer: Summarizer | None,
    look_up: Callable[[], str],
    clear_keep: int | None = None,
) -> type:
    history: dict[str, Any] = {"max_messages": window}
    if summarizer is not None:
        history["summarize"] = summarizer
    if clear_keep is not None:
        # Tool-result clearing at its harshest: every result past the newest `clear_keep`
        # leaves the prompt at once (steps of 1 token), so the row bounds its effect on recall.
        history["clear_tool_results_keep"] = clear_keep
        history["clear_tool_results_step_tokens"] = 1

    @agent(name=AGENT, system_prompt=SYSTEM_PROMPT, history=history, search=True)
    class SupportAgent:
        @tool
        async def look_up(self) -> str:
            """Look up the user's case, order or parcel."""
            return look_up()

    return SupportAgent


# --- one run --------------------------------------------------------------------------------


@dataclass
class Probe:
    turn: int
    planted: int
    recalled: int
    stale: int
    sent_tokens: int
    thread_tokens: int
    missing: list[str] = field(default_factory=list)
    reachable: int = 0
    """Facts whose current value a search by the topic's words could find at all (`reachable`):
    the ceiling of any retrieval by topic words, whatever its ranking."""

    @property
    def recall(self) -> float:
        return 100.0 * self.recalled / self.planted if self.planted else 100.0


_WORDS = re.compile(r"[a-z]+")
_PREFIX = 5


def _shares_a_word(topic: str, text: str) -> bool:
    """Whether `text` holds a word of `topic`, or a form of one: the same first letters, up to
    `_PREFIX` of them and at least 4 ("warehoused" for "warehouse", "ship" for "shipping"); a
    word shorter than 4 letters only whole ("API", "VAT")."""
    words = set(_WORDS.findall(text.lower()))
    for t in _WORDS.findall(topic.lower()):
        for w in words:
            n = min(len(w), len(t), _PREFIX)
            if w == t or (n >= 4 and w[:n] == t[:n]):
                return True
    return False


def reachable(material: Material, fact: Fact, done: int) -> bool:
    """Whether a search by `fact`'s topic words could find its current value as of `done`
    turns: the message holding the value (the user's, or the tool result) has a word of the
    topic, or it answers an assistant message that asks with one (a search returns the reply to
    a question it finds). An oracle over the text, independent of the project's search: it
    tells which misses no retrieval by topic words can avoid (a value said without its topic,
    "Actually, use INV-2027-5523 instead.")."""
    current = fact.current(done)
    if current is None:
        return False
    at = max(t for t, v in fact.values if v == current and t < done)
    turn = material.turns[at]
    holder = turn.tool_result if turn.tool_result and current in turn.tool_result else turn.content
    if _shares_a_word(fact.topic, holder):
        return True
    before = material.turns[at - 1].reply if at > 0 else None
    return bool(before and "?" in before and _shares_a_word(fact.topic, before))


def measure(material: Material, done: int, prompt: Sequence[ChatMessage], thread: int) -> Probe:
    """Facts said in the first `done` turns, checked in `prompt` (what the model is sent)."""
    text = "\n".join(m.content for m in prompt)
    planted = recalled = stale = reach = 0
    missing: list[str] = []
    for fact in material.facts:
        current = fact.current(done)
        if current is None:
            continue
        planted += 1
        reach += reachable(material, fact, done)
        if current in text:
            recalled += 1
            continue
        missing.append(f"{fact.topic} ({fact.wording(done)})")
        if any(old in text for old in fact.stale(done)):
            stale += 1
    sent = sum(estimate_message_tokens(m) for m in prompt)
    return Probe(done, planted, recalled, stale, sent, thread, missing, reach)


def _copy_database(source: Path, target: Path) -> None:
    """A consistent copy of the SQLite database (WAL included), taken between turns."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


async def run_one(
    material: Material,
    window: int,
    style_name: str | None,
    probes: Sequence[int],
    workdir: Path,
    *,
    template: Path | None = None,
    clear_keep: int | None = None,
) -> dict[str, Any]:
    """The material through a fresh module (window `window`, the summarizer style or none),
    probed at `probes`: per probe point the figures without and with search. `template`: an
    empty database with the schema, copied rather than migrated again. `clear_keep`: the
    agent clears tool results past the newest `clear_keep` from its prompts."""
    path = workdir / "thread.db"
    if template is not None:
        _copy_database(template, path)
    store = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{path}")
    if template is None:
        await store.create_schema()
    chat = ScriptedChat(material.turns)
    counted = Counted(style(style_name)) if style_name else None

    def look_up() -> str:
        return chat.current().tool_result or "nothing found"

    module = AgentModule.for_root(
        model=chat,
        store=store,
        agents=[support_agent(window, counted, look_up, clear_keep)],
        settings=bench_settings(2),
    )
    thread = await store.create_thread(actor_id=ACTOR, agent=AGENT)
    totals = {"folds": 0, "compressed": 0, "clipped": 0, "rejected": 0}
    without: list[Probe] = []
    with_search: list[Probe] = []

    async def probe(done: int) -> None:
        whole = await store.get_thread(thread.id)
        assert whole is not None
        thread_tokens = sum(estimate_message_tokens(m) for m in whole.messages)
        copy = workdir / f"probe-{done}.db"
        _copy_database(path, copy)
        probe_store = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{copy}")
        topics = [f.topic for f in material.facts if f.current(done) is not None]
        probe_chat = ProbeChat(topics)
        fresh = style(style_name) if style_name else None
        probe_module = AgentModule.for_root(
            model=probe_chat,
            store=probe_store,
            agents=[support_agent(window, fresh, lambda: "nothing found", clear_keep)],
            settings=search_probe_settings(len(topics)),
        )
        try:
            await probe_module.run_turn(
                agent=AGENT, thread_id=thread.id, actor_id=ACTOR, content=PROBE
            )
        finally:
            await probe_store.dispose()
            copy.unlink()
        without.append(measure(material, done, probe_chat.before, thread_tokens))
        with_search.append(measure(material, done, probe_chat.after, thread_tokens))

    wanted = set(probes)
    start = time.perf_counter()
    try:
        for n, turn in enumerate(material.turns):
            if n in wanted:
                await probe(n)
            result = await module.run_turn(
                agent=AGENT, thread_id=thread.id, actor_id=ACTOR, content=turn.content
            )
            if result.report.summary is not None:
                for key in totals:
                    totals[key] += getattr(result.report.summary, key)
        if len(material.turns) in wanted:
            await probe(len(material.turns))
    finally:
        await store.dispose()
    assert chat.index == len(material.turns) - 1, "the scripted chat lost count of the turns"
    return {
        "without_search": [p.__dict__ | {"recall": p.recall} for p in without],
        "with_search": [p.__dict__ | {"recall": p.recall} for p in with_search],
        **totals,
        "summarizer_calls": counted.calls if counted else 0,
        "summarizer_failed": counted.failed if counted else 0,
        "summarizer_tokens_in": counted.tokens_in if counted else 0,
        "summarizer_tokens_out": counted.tokens_out if counted else 0,
        "seconds": time.perf_counter() - start,
    }


# --- the whole benchmark ---------------------------------------------------------------------


async def run_layers(
    turn_counts: Sequence[int] = TURNS,
    seeds: Sequence[int] = SEEDS,
    windows: Sequence[int] = WINDOWS,
    styles: Sequence[str] = STYLES,
    *,
    wording: str = "A",
    log: Callable[[str], None] = print,
    clear_keep: int | None = None,
) -> dict[str, Any]:
    """Every (length, seed, window, style or none) run; its rows in `runs`. `clear_keep`:
    every run's agent clears tool results past the newest `clear_keep` (off: None)."""
    out: dict[str, Any] = {
        "turn_counts": list(turn_counts),
        "seeds": list(seeds),
        "windows": list(windows),
        "styles": list(styles),
        "wording": wording,
        "clear_tool_results_keep": clear_keep,
        "runs": [],
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        # The schema once (migrating costs about 0.35 s and some memory a run), then a copy.
        template = Path(tmp) / "template.db"
        schema = SqlAgentStore.from_url(f"sqlite+aiosqlite:///{template}")
        await schema.create_schema()
        await schema.dispose()
        n = 0
        for turns in turn_counts:
            probes = probe_points(turns)
            for seed in seeds:
                material = generate(turns, seed=seed, wording=wording)
                for window in windows:
                    for style_name in [None, *styles]:
                        n += 1
                        workdir = Path(tmp) / f"run{n}"
                        workdir.mkdir()
                        figures = await run_one(
                            material,
                            window,
                            style_name,
                            probes,
                            workdir,
                            template=template,
                            clear_keep=clear_keep,
                        )
                        row = {
                            "turns": turns,
                            "seed": seed,
                            "window": window,
                            "style": style_name or "-",
                            **figures,
                        }
                        out["runs"].append(row)
                        log(_line(row))
    out["seconds"] = time.perf_counter() - start
    return out


def _line(row: dict[str, Any]) -> str:
    def recalls(key: str) -> str:
        return " ".join(f"{p['recall']:3.0f}" for p in row[key])

    return (
        f"{row['turns']:>4} s{row['seed']} w{row['window']} {row['style']:<18} "
        f"prompt [{recalls('without_search')}] +search [{recalls('with_search')}] "
        f"folds {row['folds']} comp {row['compressed']} clip {row['clipped']} "
        f"ref {row['rejected']} ({row['seconds']:.1f} s)"
    )


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows: per (length, layer, style, window), the seeds side by side."""
    out: list[dict[str, Any]] = []
    styles = ["-", *results["styles"]]
    for turns in results["turn_counts"]:
        for layer in LAYERS:
            summarized = layer.startswith("summary")
            key = "with_search" if layer.endswith("search") else "without_search"
            for style_name in styles:
                if summarized == (style_name == "-"):
                    continue
                for window in results["windows"]:
                    runs = [
                        r
                        for r in results["runs"]
                        if r["turns"] == turns
                        and r["window"] == window
                        and r["style"] == style_name
                    ]
                    if not runs:
                        continue
                    out.append(_row(turns, layer, style_name, window, key, runs))
    return out


def _row(
    turns: int, layer: str, style_name: str, window: int, key: str, runs: list[dict[str, Any]]
) -> dict[str, Any]:
    lasts = [r[key][-1] for r in runs]
    late = [p for r in runs for p in r[key] if p["turn"] >= WORST_FROM]
    sent = [100.0 * p["sent_tokens"] / max(1, p["thread_tokens"]) for p in lasts]
    summ = [r["summarizer_tokens_in"] + r["summarizer_tokens_out"] for r in runs]
    return {
        "turns": turns,
        "layer": layer,
        "style": style_name,
        "window": window,
        "seeds": [r["seed"] for r in runs],
        "last": [(p["recalled"], p["planted"]) for p in lasts],
        "worst": min((p["recall"] for p in late), default=100.0),
        "stale": sum(p["stale"] for r in runs for p in r[key]),
        "sent_pct": (min(sent), max(sent)),
        "summarizer_tokens": (min(summ), max(summ)) if style_name != "-" else None,
        "folds": sum(r["folds"] for r in runs) if style_name != "-" else None,
        "compressed": sum(r["compressed"] for r in runs),
        "clipped": sum(r["clipped"] for r in runs),
        "rejected": sum(r["rejected"] for r in runs),
        "missing": sorted({m for p in lasts for m in p["missing"]}),
        "missed_by_wording": _by_wording(lasts),
    }


def _by_wording(probes: list[dict[str, Any]]) -> dict[str, int]:
    """Facts missing at these probes, counted by how their current value was said."""
    out: dict[str, int] = {}
    for p in probes:
        for m in p["missing"]:
            wording = m.rsplit("(", 1)[-1].rstrip(")")
            out[wording] = out.get(wording, 0) + 1
    return dict(sorted(out.items()))


def _range(lo: float, hi: float, fmt: str) -> str:
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}\N{EN DASH}{b}"


def render(results: dict[str, Any]) -> str:
    """The markdown table (one row per length, layer, style and window; seeds in each cell)."""
    seeds = ", ".join(str(s) for s in results["seeds"])
    lines = [
        f"| turns | layers | summarizer | window | recall at the last turn (seeds {seeds}) | "
        f"worst probe ≥ {WORST_FROM} | stale as current (all probes) | sent / thread "
        "(last turn) | summarizer tokens | folds / compressions / clips / refused | "
        "missed at the last turn, by wording (seeds summed) |",
        "|---:|---|---|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for row in rows(results):
        last = ", ".join(f"{r}/{p}" for r, p in row["last"])
        summ = "—"
        if row["summarizer_tokens"] is not None:
            lo, hi = row["summarizer_tokens"]
            summ = _range(lo / 1000, hi / 1000, ".0f") + "k"
        sent_lo, sent_hi = row["sent_pct"]
        counts = (
            "—"
            if row["folds"] is None
            else f"{row['folds']} / {row['compressed']} / {row['clipped']} / {row['rejected']}"
        )
        missed = ", ".join(f"{w} {n}" for w, n in row["missed_by_wording"].items()) or "—"
        lines.append(
            f"| {row['turns']} | {row['layer']} | {row['style']} | {row['window']} | {last} | "
            f"{row['worst']:.0f}% | {row['stale']} | {_range(sent_lo, sent_hi, '.1f')}% | "
            f"{summ} | {counts} | {missed} |"
        )
    return "\n".join([*lines, "", ceiling_line(results)])


def ceiling_line(results: dict[str, Any]) -> str:
    """What a search by topic words could reach at all at the last turn (`reachable`), per
    length and seed: the ceiling under every search row of the table."""
    parts: list[str] = []
    for turns in results["turn_counts"]:
        seen: dict[int, tuple[int, int]] = {}
        for run in results["runs"]:
            if run["turns"] == turns and run["with_search"]:
                last = run["with_search"][-1]
                seen.setdefault(run["seed"], (last.get("reachable", 0), last["planted"]))
        cells = ", ".join(f"{r}/{p}" for _, (r, p) in sorted(seen.items()))
        parts.append(f"{turns} turns: {cells}")
    return (
        "Facts a search by topic words could reach at all at the last turn (seeds "
        + ", ".join(str(s) for s in results["seeds"])
        + "; the value's message or the assistant's question it answers holds a word of the "
        + "topic): "
        + "; ".join(parts)
        + "."
    )


def write_chart(results: dict[str, Any], path: Path) -> str:
    """Recall with summary + search at each probe point, one line per style (seed 0, the first
    window), a panel per length. Optional: without matplotlib, say so and carry on."""
    try:
        import matplotlib
    except ImportError:
        return "chart skipped: matplotlib is not installed (pip install -e '.[bench]' for it)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = results["turn_counts"]
    fig, axes = plt.subplots(1, len(lengths), figsize=(7 * len(lengths), 5), squeeze=False)
    seed, window = results["seeds"][0], results["windows"][0]
    for ax, turns in zip(axes[0], lengths, strict=True):
        for row in results["runs"]:
            if (row["turns"], row["seed"], row["window"]) != (turns, seed, window):
                continue
            key = "with_search"
            label = f"{row['style']} + search" if row["style"] != "-" else "search alone"
            points = row[key]
            ax.plot([p["turn"] for p in points], [p["recall"] for p in points], "-o", label=label)
        ax.set_title(f"recall with summary + search, {turns} turns, window {window}")
        ax.set_xlabel("turn")
        ax.set_ylabel("% of facts whose current value the model is sent")
        ax.set_ylim(-5, 105)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


def layers_main(
    json_path: Path,
    chart_path: Path,
    turn_counts: Sequence[int],
    seeds: Sequence[int],
    windows: Sequence[int],
    styles: Sequence[str],
    clear_keep: int | None = None,
) -> int:
    started = time.perf_counter()
    # A summarizer that is down or refused is what some rows measure: the loop's warnings (a
    # traceback per failed fold) would bury the table. The counts are in the table.
    logging.getLogger("bounded_agents").setLevel(logging.CRITICAL)

    def note(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = asyncio.run(
        run_layers(turn_counts, seeds, windows, styles, log=note, clear_keep=clear_keep)
    )
    if clear_keep is not None:
        print(
            f"Tool-result clearing on: the newest {clear_keep} results kept verbatim, "
            "older ones cleared at once (steps of 1 token).\n"
        )
    # The table alone on stdout: `python -m bench --recall > table.md` is the table.
    print(render(results), flush=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1, default=str))
    note(f"wrote {json_path}")
    note(write_chart(results, chart_path))
    note(f"{len(results['runs'])} runs in {time.perf_counter() - started:.0f} s")
    return 0
