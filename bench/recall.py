"""Recall: does a bounded history still hold what the user said?

Every other figure in bench/ is a cost. This one is the reason people turn summaries on: a
seeded conversation plants facts (names, order/ticket/invoice ids, dates, amounts, decisions,
standing constraints, one tracking number that only a tool result carries), updates some of
them later, and fills the turns between with chat, numbers and pasted text. It runs through
the module's public API (`AgentModule.for_root`, `module.run_turn`) on SQLite with a scripted
chat model that records every prompt, and at each probe point checks the EXACT prompt of the
next turn for each planted fact's current value.

Per strategy and probe point it reports: recall of current values, stale values presented as
current (an old value in the prompt, the current one not), the prompt's estimated tokens
against the whole thread's; per strategy the summarizer's input tokens per folded message,
folds, compressions, clips, refused folds, summarizer calls, and the share of turns whose
prompt extends the previous one (what a provider's prompt cache needs).

Summarizers: `reference` (offline, compact: restates the previous notes' facts as one line
each and adds or replaces the new ones; what a good model should do), `verbose` (offline,
extractive: keeps every sentence that holds a digit or a capitalized name, so it outgrows any
cap; asked to compress, it keeps only identifiers, decisions and the newest value per subject),
`llama` (SmolLM2-135M-Instruct through llama.cpp's server, `make llama`), and `endpoint` (any
OpenAI-compatible server: `AGENT_BENCH_SUMMARIZER_URL`, `..._MODEL`, `..._API_KEY`). Each comes in
a `before` form (this project before issue 25: clip instead of compress, the prose instruction,
the chat cap applied to the summary) and the current one, measured in the same run.

`python -m bench --recall [--recall-turns 120,500] [--recall-summarizers reference,verbose,llama]`
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.turns import bench_settings
from bounded_agents.core.history import whole_thread
from bounded_agents.core.messages import ChatMessage, Message, ToolCall
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    Summarizer,
    Usage,
)
from bounded_agents.core.summary import (
    DEFAULT_FOLD_MAX_TOKENS,
    DEFAULT_HISTORY_SUMMARY_INSTRUCTION,
    PROSE_SUMMARY_INSTRUCTION,
    summarize_with_model,
)
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.module import AgentModule
from bounded_agents.registry import agent, tool
from bounded_agents.store.sql import SqlAgentStore

ACTOR = "recall-actor"
AGENT = "recall"
SYSTEM_PROMPT = "You are a helpful assistant. Use what the user told you earlier."
WINDOW = 20

STRATEGIES: dict[str, dict[str, Any] | None] = {
    "whole thread": None,
    "window 20": {"max_messages": WINDOW},
    "hysteresis 20/10": {"max_messages": WINDOW, "min_messages": 10},
    "window 20 + summary": {"max_messages": WINDOW, "summarize": True},
    "tokens 2000 + summary": {"max_tokens": 2000, "summarize": True},
    "runs + threshold summary": {
        "summary_token_threshold": 2000,
        "keep_recent_runs": 5,
        "summarize": True,
    },
}
"""What is compared: the settings a user can pick, window 20 unless said. `None` is no history
setting at all (the whole thread, the upper bound of recall and of cost)."""
SUMMARIZING = [name for name, h in STRATEGIES.items() if h and h.get("summarize")]


# --- the conversation ----------------------------------------------------------------------

NAMES = [
    "Dana Whitfield", "Priya Natarajan", "Tomas Lindqvist", "Amara Okafor", "Kenji Watanabe",
    "Lucia Ferreira", "Omar Haddad", "Greta Janssen", "Ravi Menon", "Ines Carvalho",
]  # fmt: skip
CITIES = ["Rotterdam", "Valencia", "Gdansk", "Porto", "Tampere", "Lyon", "Brno", "Ghent"]
WORDS = (
    "the report mentions a review of the process and a plan for the next quarter while the team "
    "looks at options budgets timelines and a few open points that need a closer look soon"
).split()


ANSWER_WORDS = (
    "happy to help with that and I will keep it in mind as we go so let me know what else "
    "you would like to look at next since there is plenty we can work through together"
).split()
"""The scripted answers' words: a realistic length (40-70 words), no digits, no names."""


def _fact_values(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    """(key as the user says it, a generator of values) for each fact kind."""
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
    return [
        ("my name", lambda: rng.choice(NAMES)),
        ("my order number", lambda: f"ORD-{digits(5)}"),
        ("the support ticket", lambda: f"TCK-{digits(4)}"),
        ("the delivery date", lambda: f"2027-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"),
        ("the budget", lambda: f"{rng.randint(10, 90)},{rng.choice(['000', '500'])} EUR"),
        ("the shipping city", lambda: rng.choice(CITIES)),
        ("the plan we chose", lambda: f"the {rng.choice(['Blue', 'Amber', 'Teal'])} plan"),
        ("the rule for calls", lambda: f"never before {rng.randint(8, 10)}:00"),
        ("the meeting room", lambda: f"R-{digits(3)}"),
        ("my account manager", lambda: rng.choice(NAMES)),
        ("the invoice number", lambda: f"INV-2027-{digits(4)}"),
        ("the contract length", lambda: f"{rng.choice([12, 18, 24, 36])} months"),
        ("the report language", lambda: rng.choice(["Portuguese", "Finnish", "Dutch", "Czech"])),
        ("the warehouse code", lambda: f"WH-{digits(2)}"),
        ("the discount code", lambda: f"SPRING-{digits(4)}"),
        ("the project codename", lambda: rng.choice(["Heron", "Lantern", "Quarry", "Juniper"])),
        ("the database version", lambda: f"PostgreSQL 1{rng.randint(3, 7)}.{rng.randint(1, 9)}"),
        ("the API limit", lambda: f"{rng.randint(2, 9)},{digits(1)}00 requests per minute"),
        ("the backup window", lambda: f"0{rng.randint(1, 4)}:00-0{rng.randint(5, 8)}:00 UTC"),
    ]


TRACKING_KEY = "the tracking number"


@dataclass
class Fact:
    key: str
    values: list[tuple[int, str]]
    """(turn it was said at, value), oldest first: an updated fact has several."""
    via_tool: bool = False

    def current(self, turn: int) -> str | None:
        said = [v for t, v in self.values if t <= turn]
        return said[-1] if said else None

    def stale(self, turn: int) -> list[str]:
        said = [v for t, v in self.values if t <= turn]
        return [v for v in said[:-1] if v != said[-1]]


@dataclass
class Turn:
    content: str
    tool_result: str | None = None
    """When set, the scripted model calls `look_up` and the tool answers this."""


@dataclass
class Conversation:
    turns: list[Turn]
    facts: list[Fact]


def conversation(n_turns: int, seed: int = 0, facts: int = 20, updates: int = 6) -> Conversation:
    """A seeded conversation of `n_turns` user turns: `facts` facts planted over the first 90%
    of it (one of them, the tracking number, inside a tool result), `updates` of them said again
    later with a new value, filler between (chat holding numbers and names, and every ~12 turns
    a pasted paragraph of 600-1,500 characters)."""
    rng = random.Random(seed)
    kinds = _fact_values(rng)
    rng.shuffle(kinds)
    kinds = kinds[: facts - 1]
    span = max(facts + updates + 2, int(n_turns * 0.9))
    slots = sorted(rng.sample(range(1, span), facts + updates))
    plant, later = slots[:facts], slots[facts:]
    planted: list[Fact] = []
    turns = [_filler(rng, i) for i in range(n_turns)]
    tool_at = plant[rng.randrange(len(plant))]
    for at in plant:
        if at == tool_at:
            value = f"1Z{''.join(rng.choice('0123456789ABCDEF') for _ in range(12))}"
            planted.append(Fact(TRACKING_KEY, [(at, value)], via_tool=True))
            turns[at] = Turn(
                "Can you look up my parcel, please?",
                tool_result=f"Note: {TRACKING_KEY} is {value}. Status: in transit.",
            )
            continue
        key, make = kinds.pop()
        value = make()
        planted.append(Fact(key, [(at, value)]))
        turns[at] = Turn(f"Please note: {key} is {value}.")
    updatable = [f for f in planted if not f.via_tool]
    for at in later:
        eligible = [f for f in updatable if f.values[-1][0] < at and len(f.values) == 1]
        if not eligible:
            continue
        fact = rng.choice(eligible)
        make = dict(_fact_values(random.Random(at)))[fact.key]
        value = make()
        while value == fact.values[-1][1]:
            value = make()
        fact.values.append((at, value))
        turns[at] = Turn(f"Correction: {fact.key} is now {value}.")
    return Conversation(turns, planted)


def _filler(rng: random.Random, i: int) -> Turn:
    kind = rng.random()
    if kind < 0.08:
        words = [rng.choice(WORDS) for _ in range(rng.randint(100, 240))]
        words[rng.randrange(len(words))] = str(rng.randint(100, 999))
        return Turn("Here is the paragraph I mentioned: " + " ".join(words) + ".")
    if kind < 0.5:
        return Turn(
            f"By the way, I read {rng.randint(2, 9)} chapters with {rng.choice(NAMES)} "
            f"yesterday, and we talked about {rng.choice(CITIES)} for a while."
        )
    topics = ["weekend plans", "a good book", "the weather", "coffee", "a film", "music"]
    return Turn(f"What do you think about {rng.choice(topics)}? Just chatting, turn {i}.")


# --- the chat model and the agent ---------------------------------------------------------


class ScriptedChat:
    """The chat model: answers every turn briefly; calls `look_up` on the tool turn. Records
    every chat prompt (the summarizer is a separate callable, never this model)."""

    model = "scripted-chat"

    def __init__(self) -> None:
        self.prompts: list[list[ChatMessage]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append(list(request.messages))
        last = request.messages[-1]
        usage = Usage(prompt_tokens=sum(estimate_message_tokens(m) for m in request.messages))
        if last.role == "user" and "look up my parcel" in last.content:
            call = ToolCall(id=f"call_{len(self.prompts)}", name="look_up", arguments={})
            return ModelResponse(content="", tool_calls=[call], usage=usage, model=self.model)
        if last.role == "tool":
            return ModelResponse(content="Your parcel is on its way.", usage=usage)
        n = len(self.prompts)
        words = " ".join(ANSWER_WORDS[(n * 7 + i) % len(ANSWER_WORDS)] for i in range(40 + n % 30))
        return ModelResponse(content=f"Thanks, noted. {words}.", usage=usage)


def _agent_class(history: dict[str, Any] | None, tool_results: list[str]) -> type:
    policy = whole_thread() if history is None else history

    @agent(name=AGENT, system_prompt=SYSTEM_PROMPT, history=policy)
    class RecallAgent:
        @tool
        async def look_up(self) -> str:
            """Look up the user's parcel."""
            return tool_results.pop(0)

    return RecallAgent


# --- summarizers ------------------------------------------------------------------------

_FACT = re.compile(
    r"(?:please note|note|correction):\s*(?P<key>[^.]*?) is (?:now )?(?P<value>.+?)\.(?:\s|$)",
    re.IGNORECASE,
)
_NOTE = re.compile(r"^- (?P<key>.+?): (?P<value>.+)$")


def _texts(messages: Sequence[Message]) -> list[str]:
    out: list[str] = []
    for m in messages:
        out.append(m.content)
        out.extend(r.content for r in m.tool_results)
    return out


class ReferenceSummarizer:
    """Offline and compact: the notes so far as `- key: value` lines, updated by every fact the
    new messages state (a later value replaces an earlier one). What a good model does with
    `DEFAULT_HISTORY_SUMMARY_INSTRUCTION`; it understands this module's fact sentences only."""

    name = "reference"

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        notes: dict[str, str] = {}
        if ctx.summary is not None:
            for line in ctx.summary.text.splitlines():
                found = _NOTE.match(line.strip())
                if found:
                    notes[found["key"]] = found["value"]
        for text in _texts(messages):
            for found in _FACT.finditer(text):
                notes[found["key"].strip().lower()] = found["value"].strip()
        text = "\n".join(f"- {k}: {v}" for k, v in notes.items()) or "- nothing noted yet"
        return HistorySummary(text=text, usage=_usage(messages, ctx, text), model="reference")


_SENTENCE = re.compile(r"[^\n]+?(?:[.!?](?=\s|$)|$)", re.MULTILINE)
_HAS_NAME_OR_DIGIT = re.compile(r"\d|\b[A-Z][a-z]+ [A-Z][a-z]+\b|\s[A-Z][a-z]{2,}")
_IDENTIFIER = re.compile(r"\b[A-Z]{2,}-[\dA-Z-]+\b|\b1Z[0-9A-F]+\b|\d{4}-\d{2}-\d{2}|\bEUR\b")
_DECISION = re.compile(r"\b(decided|chose|never|always|must)\b", re.I)


class VerboseSummarizer:
    """Offline and extractive: the summary so far plus every sentence of the new messages that
    holds a digit or a capitalized name, so it grows past any cap (chat about "9 chapters with
    Omar Haddad" is kept too). Asked to compress (`fold_task="compress"`) it keeps what the
    compress instruction asks for: sentences with an identifier, a date, an amount, a decision
    or a rule, only the newest per subject, and drops the rest; `compress=False` is a
    summarizer that ignores the request (the loop then clips)."""

    name = "verbose"

    def __init__(self, compress: bool = True) -> None:
        self.compress = compress

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        previous = ctx.summary.text if ctx.summary is not None else ""
        if ctx.fold_task == "compress":
            text = _compressed(previous) if self.compress else previous
            return HistorySummary(text=text, usage=_usage(messages, ctx, text), model="verbose")
        kept = [previous] if previous else []
        for text in _texts(messages):
            kept.extend(s.strip() for s in _SENTENCE.findall(text) if _HAS_NAME_OR_DIGIT.search(s))
        text = "\n".join(kept)
        return HistorySummary(text=text, usage=_usage(messages, ctx, text), model="verbose")


def _compressed(text: str) -> str:
    newest: dict[str, str] = {}
    for sentence in (s.strip() for s in _SENTENCE.findall(text)):
        if not (_IDENTIFIER.search(sentence) or _DECISION.search(sentence)):
            if not _FACT.search(sentence + " "):
                continue
        found = _FACT.search(sentence + " ")
        subject = found["key"].strip().lower() if found else sentence
        newest.pop(subject, None)
        newest[subject] = sentence
    return "\n".join(newest.values())


def _usage(messages: Sequence[Message], ctx: HistoryPolicyContext, text: str) -> Usage:
    prompt = sum(estimate_message_tokens(m) for m in messages)
    if ctx.summary is not None:
        prompt += estimate_message_tokens(Message(role="system", content=ctx.summary.text))
    out = estimate_message_tokens(Message(role="assistant", content=text))
    return Usage(prompt_tokens=prompt, completion_tokens=out, estimated=True)


class ChatCapped:
    """A provider wrapper that applies the chat answer's cap to every call, as the provider did
    before issue 25 (`min(configured, request)`): the `before` of a model summarizer."""

    def __init__(self, inner: ModelProvider, cap: int) -> None:
        self.inner = inner
        self.cap = cap
        self.model = getattr(inner, "model", "model")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        capped = min(self.cap, request.max_tokens or self.cap)
        response = await self.inner.complete(request.model_copy(update={"max_tokens": capped}))
        # The old parser ignored finish_reason: a cut summary was stored as whole.
        return response.model_copy(update={"finish_reason": None})


class Ignoring:
    """A summarizer that ignores compress requests and never reports a finish reason: the loop's
    `before` behaviour (clip at the cap, commit truncated answers)."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        if ctx.fold_task == "compress":
            text = ctx.summary.text if ctx.summary is not None else ""
            return HistorySummary(text=text, usage=Usage(estimated=True))
        made = await self.inner(messages, ctx)
        return made.model_copy(update={"finish_reason": None})


# --- one run ---------------------------------------------------------------------------


@dataclass
class Probe:
    turn: int
    planted: int
    recalled: int
    stale: int
    prompt_tokens: int
    thread_tokens: int
    missing: list[str] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return 100.0 * self.recalled / self.planted if self.planted else 100.0


async def run_strategy(
    history: dict[str, Any] | None,
    summarizer: Summarizer | None,
    convo: Conversation,
    probes: Sequence[int],
    url: str,
    *,
    fold_max_tokens: int | None = None,
    fold_calls_per_turn: int = 2,
) -> dict[str, Any]:
    """The conversation through a fresh module on the SQLite database at `url`; the figures."""
    if history is not None and history.get("summarize"):
        history = {**history, "summarize": summarizer}
        if fold_max_tokens is not None:
            history["fold_max_tokens"] = fold_max_tokens
    store = SqlAgentStore.from_url(url)
    await store.create_schema()
    chat = ScriptedChat()
    tool_results = [t.tool_result for t in convo.turns if t.tool_result is not None]
    settings = bench_settings(fold_calls_per_turn)
    module = AgentModule.for_root(
        model=chat,
        store=store,
        agents=[_agent_class(history, tool_results)],
        settings=settings,
    )
    thread = await store.create_thread(actor_id=ACTOR, agent=AGENT)
    totals = {"folds": 0, "compressed": 0, "clipped": 0, "archived": 0, "rejected": 0, "calls": 0}
    input_tokens = input_messages = extends = omitted_turns = 0
    wanted = set(probes)
    found: list[Probe] = []
    start = time.perf_counter()
    turns = [*convo.turns, Turn(PROBE_QUESTION)] if len(convo.turns) in wanted else convo.turns
    try:
        for n, turn in enumerate(turns):
            result = await module.run_turn(
                agent=AGENT, thread_id=thread.id, actor_id=ACTOR, content=turn.content
            )
            report = result.report
            chats = [c for c in report.model_calls if c.purpose == "chat"]
            extends += bool(chats[0].extends_previous)
            if report.summary is not None:
                s = report.summary
                for key in totals:
                    totals[key] += getattr(s, key)
                input_tokens += s.input_tokens
                input_messages += s.input_messages
                omitted_turns += bool(s.omitted)
            if n in wanted:
                # Probe point n: n turns are done, and this is the prompt of the next one.
                found.append(await _probe(store, thread.id, convo, n, chat.prompts[-len(chats)]))
    finally:
        await store.dispose()
    return {
        "probes": [p.__dict__ | {"recall": p.recall} for p in found],
        **totals,
        "summary_input_per_folded_message": input_tokens / input_messages if input_messages else 0,
        "extends_pct": 100.0 * extends / max(1, len(convo.turns) - 1),
        "omitted_turns": omitted_turns,
        "seconds": time.perf_counter() - start,
    }


PROBE_QUESTION = "Quick check before we go on: what do you still know about me?"
"""The extra turn whose prompt is probed after the last turn of the conversation."""


async def _probe(
    store: SqlAgentStore, thread_id: str, convo: Conversation, done: int, prompt: list[ChatMessage]
) -> Probe:
    """Facts said in the first `done` turns, checked in `prompt` (the next turn's first)."""
    text = "\n".join(m.content for m in prompt)
    planted = recalled = stale = 0
    missing: list[str] = []
    for fact in convo.facts:
        current = fact.current(done - 1)
        if current is None:
            continue
        planted += 1
        if current in text:
            recalled += 1
        else:
            missing.append(fact.key)
            if any(old in text for old in fact.stale(done - 1)):
                stale += 1
    thread = await store.get_thread(thread_id)
    assert thread is not None
    return Probe(
        turn=done,
        planted=planted,
        recalled=recalled,
        stale=stale,
        prompt_tokens=sum(estimate_message_tokens(m) for m in prompt),
        thread_tokens=sum(estimate_message_tokens(m) for m in thread.messages[:-1]),
        missing=missing,
    )


# --- the whole benchmark ---------------------------------------------------------------


def summarizers(names: Sequence[str]) -> dict[str, tuple[Summarizer, Summarizer, dict[str, Any]]]:
    """name -> (before, after, options); model summarizers need their server running."""
    out: dict[str, tuple[Summarizer, Summarizer, dict[str, Any]]] = {}
    for name in names:
        if name == "reference":
            ref = ReferenceSummarizer()
            out[name] = (Ignoring(ref), ref, {})
        elif name == "verbose":
            out[name] = (VerboseSummarizer(compress=False), VerboseSummarizer(), {})
        elif name in ("llama", "endpoint"):
            continue  # built by `model_summarizers` once a server is known
        else:
            raise ValueError(f"unknown summarizer {name!r}")
    return out


def model_summarizers(
    provider: ModelProvider, chat_cap: int | None
) -> tuple[Summarizer, Summarizer, dict[str, Summarizer]]:
    """(before, after, the instructions compared) for a model summarizer."""
    before = Ignoring(
        summarize_with_model(
            ChatCapped(provider, chat_cap) if chat_cap else provider, PROSE_SUMMARY_INSTRUCTION
        )
    )
    after = summarize_with_model(provider, DEFAULT_HISTORY_SUMMARY_INSTRUCTION)
    variants = {
        "prose instruction": summarize_with_model(provider, PROSE_SUMMARY_INSTRUCTION),
        "fact list, rewrite (default)": after,
        "fact list, append": summarize_with_model(provider, carry="append"),
    }
    if os.environ.get("AGENT_BENCH_CARRY_PROSE"):
        variants["carry forward, prose"] = summarize_with_model(provider, CARRY_PROSE_INSTRUCTION)
    return before, after, variants


CARRY_PROSE_INSTRUCTION = (
    "You keep the running summary of a conversation for an assistant that will continue it "
    "without seeing the messages. Rewrite the summary so far together with the new messages as "
    "one updated summary: keep every fact of the summary so far unless a new message changes "
    "it, and then keep only the new value. Keep names, identifiers, dates, amounts, decisions "
    "and constraints exactly as written. Omit pleasantries. Reply with the summary only."
)
"""An alternative measured against the default (a fact list): the same carry-forward rule,
written as prose."""


async def run_recall(
    turn_counts: Sequence[int],
    names: Sequence[str],
    *,
    seeds: Sequence[int] = (0,),
    strategies: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    out: dict[str, Any] = {"window": WINDOW, "runs": []}
    chosen = list(strategies or STRATEGIES)
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for turns in turn_counts:
            probes = probe_points(turns)
            for seed in seeds:
                convo = conversation(turns, seed=seed)
                for sname, (before, after, options) in summarizers(names).items():
                    for strategy in chosen:
                        history = STRATEGIES[strategy]
                        forms = [("after", after)]
                        if strategy in SUMMARIZING:
                            forms = [("before", before), ("after", after)]
                        elif sname != names[0]:
                            continue  # a strategy without summaries once per length and seed
                        for form, summarizer in forms:
                            n += 1
                            url = f"sqlite+aiosqlite:///{Path(tmp) / f'r{n}.db'}"
                            figures = await run_strategy(
                                history, summarizer, convo, probes, url, **options
                            )
                            row = {
                                "turns": turns,
                                "seed": seed,
                                "strategy": strategy,
                                "summarizer": sname if strategy in SUMMARIZING else "-",
                                "form": form,
                                **figures,
                            }
                            out["runs"].append(row)
                            log(_line(row))
    return out


def probe_points(turns: int) -> list[int]:
    """Turn counts after which the next prompt is checked: every 30 (every 50 past 150 turns),
    and the end."""
    step = 30 if turns <= 150 else 50
    return [*range(step, turns, step), turns]


def _line(row: dict[str, Any]) -> str:
    recalls = " ".join(f"{p['recall']:3.0f}" for p in row["probes"])
    return (
        f"{row['turns']:>4} s{row['seed']} {row['strategy']:<26} {row['summarizer']:<9} "
        f"{row['form']:<6} recall% [{recalls}] folds {row['folds']} comp {row['compressed']} "
        f"clip {row['clipped']} rej {row['rejected']} ({row['seconds']:.1f} s)"
    )


def render(results: dict[str, Any]) -> str:
    lines = [
        "| turns | strategy | summarizer | form | recall at probe points (turn: %) | "
        "stale | prompt / thread tokens (last probe) | summarizer in-tokens per folded msg | "
        "folds | compressions | clips | refused | turns extending the previous prompt |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["runs"]:
        last = row["probes"][-1]
        recalls = ", ".join(f"{p['turn']}: {p['recall']:.0f}" for p in row["probes"])
        stale = max((p["stale"] for p in row["probes"]), default=0)
        lines.append(
            f"| {row['turns']} | {row['strategy']} | {row['summarizer']} | {row['form']} | "
            f"{recalls} | {stale} | {last['prompt_tokens']:,} / {last['thread_tokens']:,} "
            f"({100 * last['prompt_tokens'] / max(1, last['thread_tokens']):.0f}%) | "
            f"{row['summary_input_per_folded_message']:.0f} | {row['folds']} | "
            f"{row['compressed']} | {row['clipped']} | {row['rejected']} | "
            f"{row['extends_pct']:.0f}% |"
        )
    return "\n".join(lines)


def write_chart(results: dict[str, Any], path: Path) -> None:
    """Recall against turn, one line per strategy/summarizer/form, one panel per length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted({r["turns"] for r in results["runs"]})
    fig, axes = plt.subplots(1, len(lengths), figsize=(7 * len(lengths), 5), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, turns in zip(axes[0], lengths, strict=True):
        rows = [r for r in results["runs"] if r["turns"] == turns and r["seed"] == 0]
        for i, row in enumerate(rows):
            label = f"{row['strategy']} / {row['summarizer']} / {row['form']}"
            style = "--" if row["form"] == "before" else "-"
            ax.plot(
                [p["turn"] for p in row["probes"]],
                [p["recall"] for p in row["probes"]],
                style,
                marker="o",
                label=label,
                color=colors[i % len(colors)],
            )
        ax.set_title(f"recall of planted facts, {turns} turns")
        ax.set_xlabel("turn")
        ax.set_ylabel("% of facts whose current value is in the prompt")
        ax.set_ylim(-5, 105)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def recall_main(
    json_path: Path,
    chart_path: Path,
    turn_counts: Sequence[int],
    names: Sequence[str],
    seeds: Sequence[int] = (0,),
) -> int:
    offline = [n for n in names if n not in ("llama", "endpoint")]
    results: dict[str, Any] = (
        asyncio.run(run_recall(turn_counts, offline, seeds=seeds)) if offline else {"runs": []}
    )
    for name in (n for n in names if n in ("llama", "endpoint")):
        results["runs"].extend(_model_runs(name, turn_counts))
    print(render(results))
    json_path.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {json_path}")
    try:
        write_chart(results, chart_path)
    except ImportError:  # the chart is optional: `.[dev]` has no matplotlib, `.[bench]` does
        print("chart skipped: matplotlib is not installed (pip install -e '.[bench]' for it)")
    else:
        print(f"wrote {chart_path}")
    return 0


def _model_runs(name: str, turn_counts: Sequence[int]) -> list[dict[str, Any]]:
    """The model summarizer's rows: SmolLM2 on a llama.cpp server started here, or the
    endpoint the environment names."""
    from bounded_agents.providers.openai.compat import OpenAICompatibleProvider

    cap = int(os.environ.get("AGENT_BENCH_CHAT_CAP", "256"))
    fold = int(os.environ.get("AGENT_BENCH_FOLD_MAX_TOKENS", str(DEFAULT_FOLD_MAX_TOKENS)))

    async def runs(base_url: str, model: str, api_key: str | None) -> list[dict[str, Any]]:
        provider = OpenAICompatibleProvider(
            base_url=base_url, model=model, api_key=api_key, max_tokens=cap, timeout=300
        )
        before, _after, variants = model_summarizers(provider, cap)
        rows: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory() as tmp:
            for turns in turn_counts:
                convo = conversation(turns, seed=0)
                forms: list[tuple[str, Summarizer]] = [("before", before), *variants.items()]
                for i, (form, summarizer) in enumerate(forms):
                    url = f"sqlite+aiosqlite:///{Path(tmp) / f'm{turns}-{i}.db'}"
                    figures = await run_strategy(
                        STRATEGIES["window 20 + summary"],
                        summarizer,
                        convo,
                        probe_points(turns),
                        url,
                        fold_max_tokens=fold,
                    )
                    row = {
                        "turns": turns,
                        "seed": 0,
                        "strategy": "window 20 + summary",
                        "summarizer": name,
                        "form": form,
                        **figures,
                    }
                    print(_line(row), flush=True)
                    rows.append(row)
        await provider.aclose()
        return rows

    if name == "endpoint":
        url = os.environ["AGENT_BENCH_SUMMARIZER_URL"]
        return asyncio.run(
            runs(
                url,
                os.environ.get("AGENT_BENCH_SUMMARIZER_MODEL", "default"),
                os.environ.get("AGENT_BENCH_SUMMARIZER_API_KEY"),
            )
        )
    from scripts.llama_server import MODEL_ALIAS, llama_server

    with llama_server(verbose=False) as base_url:
        return asyncio.run(runs(base_url, MODEL_ALIAS, None))
