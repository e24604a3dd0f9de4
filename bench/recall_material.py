"""Recall material the summarizers under test never saw: long support-style threads.

`bench.recall_layers` measures whether an agent can still reach what the user said. Material
written in one sentence pattern measures the pattern: a summarizer or search tuned to it scores
100% and tells nothing (issue 36: the old `bench.recall` material, `"Please note: <key> is
<value>."`, which its own reference summarizer parsed). So this generator plants each fact in one
of several WORDINGS:

- a plain statement naming the fact's topic ("the order number is ORD-41234");
- the answer to the assistant's question (the assistant asked for the topic; the user's message
  holds the value alone);
- a statement using another form of the topic word ("I ordered it under ...");
- a statement without the topic word at all ("... is the one on the packing slip");
- a tool result (the user asks, a tool answers with the value among other fields);
- corrections of 6 facts later on, with or without the topic word: only the CURRENT value
  counts, and an old value shown where the current one is missing is counted as stale.

Between them: small talk holding names and numbers, product questions, pasted prose and pasted
logs heavy with identifiers shaped like the facts' own (order, ticket, invoice ids, versions,
dates), so that "keep every sentence with a digit or a name" is not a strategy that stays small.

Two wording sets, `A` (the bench's) and `B` (held out): the generic templates differ entirely,
so a summarizer that keyed on `A`'s phrasing would fall on `B`. `tests/bench/test_recall_layers.py`
checks that no template string of either set appears in `bench/recall_styles.py` (the summarizer
styles) and that the compact note-taker recalls as much on `B` as on `A`.

Every value is distinctive (no filler ever holds it), so "the value's text is in what the model
is sent" is a fair test of recall.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field

FACTS = 20
UPDATES = 6
TOOL_FACTS = 3
MIN_TURNS = 2 * (FACTS + UPDATES) + 8
"""Every plant and correction on an even turn of its own, the turn before free for a question."""


@dataclass(frozen=True)
class Kind:
    """One kind of fact: its topic (the words a model would search for), how values look, and
    the kind-specific wordings (`{v}` is the value)."""

    topic: str
    value: Callable[[random.Random], str]
    inflected: str
    """A statement with another form of a topic word (ordered / order) and not the topic."""
    bare: str
    """A statement without any topic word."""
    tool: str | None = None
    """For a fact that arrives in a tool result: the tool's answer (`{v}` and noise)."""
    ask: str | None = None
    """For a tool fact: what the user asks."""


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789ABCDEF") for _ in range(n))


FACT_NAMES = [
    "Dana Whitfield", "Priya Natarajan", "Tomas Lindqvist", "Amara Okafor", "Kenji Watanabe",
    "Lucia Ferreira", "Ines Carvalho", "Mirela Popescu", "Sven Aaltonen", "Yusuf Demir",
]  # fmt: skip
"""Names a fact may hold; the filler draws from `FILLER_NAMES`, never from these."""
FILLER_NAMES = [
    "Omar Haddad", "Greta Janssen", "Ravi Menon", "Hana Kobayashi", "Pavel Novak",
    "Nora Lindgren", "Diego Alvarez", "Chloe Martin",
]  # fmt: skip
FACT_CITIES = ["Rotterdam", "Valencia", "Gdansk", "Tampere", "Ghent", "Bilbao", "Aarhus", "Graz"]
FILLER_CITIES = ["Lisbon", "Prague", "Vienna", "Dublin", "Oslo", "Krakow"]
PLANS = ["Amber-Flex", "Teal-Pro", "Coral-Max", "Indigo-Lite"]
CODENAMES = ["Heron", "Lantern", "Quarry", "Juniper", "Osprey"]
APPROACHES = ["blue-green cutover", "phased cutover", "shadow-traffic cutover"]

KINDS: list[Kind] = [
    Kind("order number", lambda r: f"ORD-{_digits(r, 5)}",
         "I ordered it under {v}.", "Oh, and {v} is the one on the packing slip."),
    Kind("support ticket", lambda r: f"TCK-{_digits(r, 4)}",
         "Your helpdesk ticketed it as {v} last spring.", "Your people filed it as {v} back then."),
    Kind("invoice number", lambda r: f"INV-2027-{_digits(r, 4)}",
         "You invoiced us under {v}.", "The billing document says {v} at the top."),
    Kind("delivery date", lambda r: f"2027-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
         "We need the deliveries to land on {v}.", "Everything has to arrive by {v}."),
    Kind("budget", lambda r: f"{r.randint(11, 89)},{r.choice(['250', '750'])} EUR",
         "We budgeted {v} for this.", "We can spend up to {v} on this, no more."),
    Kind("shipping city", lambda r: r.choice(FACT_CITIES),
         "Please ship everything to {v}.", "Our new office is in {v}, send things there."),
    Kind("subscription plan", lambda r: r.choice(PLANS),
         "Of the plans you offer we picked {v}.", "We went with {v} in the end."),
    Kind("call hours", lambda r: f"{r.randint(7, 10)}:{r.choice(['15', '40', '45'])} am",
         "Please avoid calling me before {v}.", "I am not available before {v} on any day."),
    Kind("meeting room", lambda r: f"Room {r.choice('BCDFGH')}{_digits(r, 3)}",
         "We meet in {v} on Thursdays.", "Thursdays we sit in {v}."),
    Kind("account manager", lambda r: r.choice(FACT_NAMES),
         "{v} manages our account.", "{v} is who we deal with on your side."),
    Kind("contract length", lambda r: f"{r.choice([14, 18, 30, 42])} months",
         "We contracted for {v}.", "We are committing for {v}."),
    Kind("report language", lambda r: r.choice(["Portuguese", "Finnish", "Estonian", "Czech"]),
         "Reports should be written in {v}.", "Our auditors only read {v}."),
    Kind("warehouse code", lambda r: f"WH-{_digits(r, 3)}",
         "It is warehoused at {v}.", "The pick-up point is {v}."),
    Kind("discount code", lambda r: f"SPRING-{_digits(r, 4)}",
         "It was discounted with {v}.", "At checkout I used {v}."),
    Kind("project codename", lambda r: r.choice(CODENAMES),
         "Among our projects this one is {v}.", "Internally we just call it {v}."),
    Kind("database version", lambda r: f"PostgreSQL 1{r.randint(3, 7)}.{r.randint(1, 9)}",
         "Our databases run {v}.", "In production we are on {v}."),
    Kind("API rate limit", lambda r: f"{r.randint(2, 9)},{_digits(r, 1)}50 requests per minute",
         "We are limited to {v} on your side.", "We can push {v} at most."),
    Kind("backup window", lambda r: f"0{r.randint(1, 4)}:30-0{r.randint(5, 8)}:30 UTC",
         "Backups run {v}.", "Nothing heavy should run {v}, that is when we snapshot."),
    Kind("phone number", lambda r: f"+31 6 {_digits(r, 4)} {_digits(r, 4)}",
         "You can phone me on {v}.", "Reach me on {v} if it is urgent."),
    Kind("contact preference", lambda r: r.choice(["Signal", "Threema", "Telegram", "Matrix"]),
         "I prefer being contacted via {v}.", "{v} is the best way to reach me."),
    Kind("migration approach", lambda r: r.choice(APPROACHES),
         "We will migrate with a {v}.", "We settled on a {v}, final answer."),
    Kind("VAT number", lambda r: f"NL{_digits(r, 9)}B01",
         "Our tax registration is {v}.", "On the paperwork put {v} as well."),
    # Facts that arrive only in a tool result.
    Kind("tracking number", lambda r: f"1Z{_hex(r, 12)}", "", "",
         tool="carrier=UPS tracking number {v} status=in_transit last_scan=hub-{n}",
         ask="Where is my parcel right now?"),
    Kind("assigned engineer", lambda r: r.choice(FACT_NAMES), "", "",
         tool="case {n}: assigned engineer {v} (L2), queue EU-{n}, sla=8h",
         ask="Who is handling my case at the moment?"),
    Kind("refund amount", lambda r: f"{r.randint(120, 980)}.{_digits(r, 2)} EUR", "", "",
         tool="refund RF-{n} approved, refund amount {v}, method=original payment",
         ask="Did my refund go through?"),
]  # fmt: skip


@dataclass(frozen=True)
class Wordings:
    """The generic templates of one wording set (`{t}` the topic, `{v}` the value)."""

    statements: tuple[str, ...]
    questions: tuple[str, ...]
    """The assistant's question; the user then answers with one of `answers`."""
    answers: tuple[str, ...]
    corrections: tuple[str, ...]
    bare_corrections: tuple[str, ...]


WORDINGS: dict[str, Wordings] = {
    "A": Wordings(
        statements=(
            "The {t} is {v}.",
            "For the record, our {t} is {v}.",
            "Just so you have it: {t} {v}.",
            "Please keep in mind that the {t} is {v}.",
        ),
        questions=("Before I forget, what is your {t}?", "Could you give me the {t}, please?"),
        answers=("It is {v}.", "Sure: {v}.", "{v}"),
        corrections=(
            "Correction: the {t} is now {v}.",
            "Sorry, I gave you the wrong {t} earlier, it is {v}.",
            "Update on the {t}: it changed to {v}.",
        ),
        bare_corrections=(
            "Scratch what I said before, make that {v}.",
            "Actually, use {v} instead.",
        ),
    ),
    "B": Wordings(
        statements=(
            "Our {t} happens to be {v}.",
            "Write down {v} as the {t}, please.",
            "{v} -- that is the {t} we agreed on.",
            "Noting here that {t} = {v}.",
        ),
        questions=("Which {t} should I use?", "Mind telling me the {t}?"),
        answers=("Use {v}.", "That would be {v}.", "{v}, thanks."),
        corrections=(
            "We changed the {t}; the new one is {v}.",
            "The {t} moved to {v}, please forget the old one.",
            "New {t}: {v}, the previous one is void.",
        ),
        bare_corrections=("Never mind the earlier one, go with {v}.", "Let us switch to {v}."),
    ),
}

FORMS = ("statement", "answer", "inflected", "bare")
_FORM_MIX = ["statement"] * 7 + ["answer"] * 3 + ["inflected"] * 4 + ["bare"] * 3
"""How the 17 facts stated by the user are worded (the 3 others arrive in tool results). An
answer or a bare statement holds none of its topic's words: a search by topic words cannot
find it by its text (only its summary note, or a neighbour's context, can carry it)."""


@dataclass
class Fact:
    topic: str
    values: list[tuple[int, str]]
    """(turn it was said at, value), oldest first: a corrected fact has two."""
    form: str
    """statement, answer, inflected, bare or tool."""
    corrections: list[str] = field(default_factory=list)
    """The wording of each correction: topic or bare."""

    def current(self, turns_done: int) -> str | None:
        """The value as of `turns_done` completed turns (None: not said yet)."""
        said = [v for t, v in self.values if t < turns_done]
        return said[-1] if said else None

    def wording(self, turns_done: int) -> str:
        """How the current value was said: the fact's form, or `correction` / `bare
        correction` once corrected."""
        n = sum(1 for t, _ in self.values if t < turns_done)
        if n <= 1:
            return self.form
        return "correction" if self.corrections[n - 2] == "topic" else "bare correction"

    def stale(self, turns_done: int) -> list[str]:
        said = [v for t, v in self.values if t < turns_done]
        return said[:-1]


@dataclass
class Turn:
    content: str
    reply: str | None = None
    """The scripted assistant's answer to this turn (None: a generic one)."""
    tool_result: str | None = None
    """When set, the scripted model calls the `look_up` tool first, which answers this."""


@dataclass
class Material:
    turns: list[Turn]
    facts: list[Fact]
    wording: str
    seed: int

    def texts(self) -> list[str]:
        out: list[str] = []
        for t in self.turns:
            out.append(t.content)
            if t.reply:
                out.append(t.reply)
            if t.tool_result:
                out.append(t.tool_result)
        return out


def generate(n_turns: int, seed: int = 0, wording: str = "A") -> Material:
    """A seeded thread of `n_turns` user turns: `FACTS` facts over its first 90% (`TOOL_FACTS`
    of them in tool results), `UPDATES` of the user-stated ones corrected later, filler between.
    The same seed gives the same facts, values and slots whatever the wording set."""
    if n_turns < MIN_TURNS:
        raise ValueError(f"the material needs at least {MIN_TURNS} turns, got {n_turns}")
    words = WORDINGS[wording]
    rng = random.Random(seed)
    stated = [k for k in KINDS if k.tool is None]
    tooled = [k for k in KINDS if k.tool is not None]
    kinds = rng.sample(stated, FACTS - TOOL_FACTS) + rng.sample(tooled, TOOL_FACTS)
    rng.shuffle(kinds)
    forms = list(_FORM_MIX)
    rng.shuffle(forms)
    span = max(MIN_TURNS - 4, int(n_turns * 0.9))
    # Slots at least two turns apart: an answer needs the turn before it for the question.
    slots = sorted(rng.sample(range(2, span, 2), FACTS + UPDATES))
    # Corrections fall anywhere after the first third of the plants, so every probe point
    # past turn 100 of a long thread may meet one.
    later = sorted(rng.sample(slots[FACTS // 3 :], UPDATES))
    plant = [s for s in slots if s not in later]
    wrng = random.Random(f"wording-{seed}")  # the wording draws, apart from the values'
    turns: list[Turn | None] = [None] * n_turns
    facts: list[Fact] = []
    taken: set[str] = set()
    for at, kind in zip(plant, kinds, strict=True):
        value = kind.value(rng)
        while value in taken:  # two facts never share a value (two names, say)
            value = kind.value(rng)
        taken.add(value)
        if kind.tool is not None:
            result = kind.tool.format(v=value, n=_digits(rng, 4))
            facts.append(Fact(kind.topic, [(at, value)], "tool"))
            turns[at] = Turn(kind.ask or "", tool_result=result)
            continue
        form = forms.pop()
        facts.append(Fact(kind.topic, [(at, value)], form))
        if form == "statement":
            turns[at] = Turn(wrng.choice(words.statements).format(t=kind.topic, v=value))
        elif form == "answer":
            question = wrng.choice(words.questions).format(t=kind.topic)
            turns[at - 1] = Turn(_small_talk(rng), reply=f"{_reply(rng)} {question}")
            turns[at] = Turn(wrng.choice(words.answers).format(v=value))
        elif form == "inflected":
            turns[at] = Turn(kind.inflected.format(v=value))
        else:
            turns[at] = Turn(kind.bare.format(v=value))
    by_topic = {k.topic: k for k in KINDS}
    correctable = [f for f in facts if f.form != "tool"]
    bare_left = 2
    for at in later:
        eligible = [f for f in correctable if f.values[-1][0] < at and len(f.values) == 1]
        if not eligible:
            continue
        fact = rng.choice(eligible)
        value = by_topic[fact.topic].value(rng)
        while value in taken:
            value = by_topic[fact.topic].value(rng)
        taken.add(value)
        fact.values.append((at, value))
        if bare_left and rng.random() < 0.4:
            bare_left -= 1
            fact.corrections.append("bare")
            turns[at] = Turn(wrng.choice(words.bare_corrections).format(v=value))
        else:
            fact.corrections.append("topic")
            turns[at] = Turn(wrng.choice(words.corrections).format(t=fact.topic, v=value))
    values = {v for f in facts for _, v in f.values}
    out: list[Turn] = []
    for i, turn in enumerate(turns):
        if turn is None:
            turn = _filler(rng, i, values)
        out.append(turn)
    return Material(out, facts, wording, seed)


# --- filler --------------------------------------------------------------------------------

_PROSE = (
    "the rollout notes describe how the team reviews each change before it reaches production "
    "and which checks run on every build while the dashboards show error rates latency and "
    "throughput for the services that handle orders invoices and shipping across regions"
).split()

_SMALL_TALK = (
    "By the way, {name} from {city} said the {n} demo slides looked fine.",
    "I spent {n} hours on the train to {city} with {name} yesterday.",
    "{name} says hello, we had lunch in {city} after the {n} o'clock call.",
    "Funny thing, {name} also moved to {city} {n} years ago.",
)
_QUESTIONS = (
    "How do I rotate the API key for the staging project?",
    "Is there a way to export the dashboard as a spreadsheet?",
    "Why does the status page say degraded for the shipping service?",
    "Can invoices be sent to two email addresses at once?",
    "What happens to open orders when a plan is downgraded?",
    "Does the backup job lock the tables while it runs?",
    "How long do you keep the audit logs around?",
    "Can the warehouse team see our internal notes?",
)
_LOG_LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
_LOG_EVENTS = (
    "upstream timeout", "retrying request", "order sync finished", "invoice render failed",
    "backup job started", "rate limit hit", "cache miss", "connection reset by peer",
    "warehouse export queued", "ticket webhook delivered",
)  # fmt: skip
_REPLY_WORDS = (
    "happy to help with that and I will keep it in mind as we go so let me know what else "
    "you would like to look at next since there is plenty we can work through together"
).split()


def _small_talk(rng: random.Random) -> str:
    return rng.choice(_SMALL_TALK).format(
        name=rng.choice(FILLER_NAMES), city=rng.choice(FILLER_CITIES), n=rng.randint(2, 9)
    )


def _reply(rng: random.Random) -> str:
    start = rng.randrange(len(_REPLY_WORDS))
    n = rng.randint(25, 50)
    words = [_REPLY_WORDS[(start + i) % len(_REPLY_WORDS)] for i in range(n)]
    return "Thanks. " + " ".join(words) + "."


def _log(rng: random.Random) -> str:
    """A pasted log: 6-24 lines, each with a timestamp, ids shaped like the facts' own."""
    lines = []
    day = f"2027-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    for _ in range(rng.randint(6, 24)):
        t = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        ids = rng.choice(
            [
                f"order=ORD-{_digits(rng, 5)}",
                f"ticket=TCK-{_digits(rng, 4)}",
                f"invoice=INV-2027-{_digits(rng, 4)}",
                f"wh=WH-{_digits(rng, 3)}",
                f"db=pg1{rng.randint(3, 7)}.{rng.randint(1, 9)}",
            ]
        )
        lines.append(
            f"{day}T{t}.{_digits(rng, 3)}Z {rng.choice(_LOG_LEVELS):<5} "
            f"[worker-{rng.randint(1, 8)}] req={_hex(rng, 8).lower()} {ids} "
            f'latency={rng.randint(5, 4000)}ms msg="{rng.choice(_LOG_EVENTS)}"'
        )
    return "Here is what the worker logged this morning:\n" + "\n".join(lines)


def _filler(rng: random.Random, i: int, values: set[str]) -> Turn:
    while True:
        kind = rng.random()
        if kind < 0.12:
            text = _log(rng)
        elif kind < 0.20:
            words = [rng.choice(_PROSE) for _ in range(rng.randint(90, 220))]
            text = "Pasting the page I mentioned: " + " ".join(words) + "."
        elif kind < 0.55:
            text = _small_talk(rng)
        elif kind < 0.85:
            text = rng.choice(_QUESTIONS)
        else:
            text = rng.choice(["Thanks, that helps.", "Ok, makes sense.", "Great, go on."])
        if not any(v in text for v in values):
            return Turn(text)


def template_strings() -> list[str]:
    """Every piece of fixed text the generator writes facts with (both wording sets, every
    kind's own wordings and tool answers, the questions): what a summarizer must not key on."""
    out: list[str] = []
    for w in WORDINGS.values():
        out += [*w.statements, *w.questions, *w.answers, *w.corrections, *w.bare_corrections]
    for k in KINDS:
        out += [k.inflected, k.bare, k.tool or "", k.ask or ""]
    return [t for t in out if t]
