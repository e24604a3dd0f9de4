"""Issue 36: a summarizer that keeps failing costs a small multiple of a healthy one, its
backoff survives a restart, replays follow their journal, and it recovers when healed; a
summary that does not stand for its chunk is refused as `unrelated`.

The cost test runs the same thread twice, through the loop on SQLite and PostgreSQL: once
with a healthy summarizer, once with one that always answers empty text, and counts the
summarizer's calls and the input tokens it was handed (`input_tokens` of the run reports:
the estimate of the summary so far plus the chunk, what a provider bills as input)."""

from __future__ import annotations

import uuid

import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import FoldHealth, HistoryPolicyContext, HistorySummary, Usage
from bounded_agents.core.report import RunResult, SummaryReport
from bounded_agents.errors import RunFailed
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from tests.factories import summary_rows
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv
from tests.loop.test_fold_attacks import DiesOnce

TURNS = 150
WINDOW = 20
COST_MULTIPLE = 1.5
"""The bound: over TURNS turns, a summarizer that always fails is handed at most this many
times the input tokens a healthy one is. Measured (docs/history.md): 1.11x at 150 turns and
1.26x at 500 (without the backoff: 34.5x and 39.8x, 135 and 485 calls)."""

CITIES = ["Rotterdam", "Valencia", "Gdansk", "Porto", "Tampere", "Lyon", "Brno", "Ghent"]


def _said(i: int) -> str:
    """A support-style user message of realistic length, with identifiers and numbers."""
    return (
        f"Turn {i}: the shipment ORD-{10000 + i} for {CITIES[i % len(CITIES)]} is still "
        f"pending; ticket TCK-{2000 + i * 7} says the carrier will call before {8 + i % 3}:00. "
        "Please keep the invoice and the delivery window in mind when you plan the next steps "
        "with the warehouse team and the customer service desk."
    )


class Notes:
    """A healthy summarizer: the notes so far plus one line per new user message, its
    identifiers kept (what the default instruction asks for). Or, while `broken`, empty text
    (the issue's 486 refused folds). Usage: the estimated input, as the loop books it."""

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.calls = 0

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        if self.broken:
            return HistorySummary(text="")
        lines = ctx.summary.text.splitlines() if ctx.summary is not None else []
        for m in messages:
            if m.role == "user":
                words = m.content.split()
                lines.append("- " + " ".join(w for w in words if any(c.isdigit() for c in w)))
        return HistorySummary(text="\n".join(lines[-60:]))


def rid() -> str:
    return str(uuid.uuid4())


async def _turn(loop: AgentLoop, tid: str, text: str, run_id: str | None = None) -> RunResult:
    return await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content=text, run_id=run_id or rid()
    )


async def _until_called(loop: AgentLoop, tid: str, summarizer: Notes, calls: int) -> list[str]:
    """Turns until the summarizer was called `calls` times; each turn's fold outcome."""
    outcomes: list[str] = []
    while summarizer.calls < calls:
        summary = (await _turn(loop, tid, _said(len(outcomes)))).report.summary
        outcomes.append(summary.outcome or "") if summary is not None else outcomes.append("")
        assert len(outcomes) < 100
    return outcomes


def _policy(summarizer: Notes) -> object:
    return window_history(max_messages=WINDOW, summarize=summarizer)


async def _run(env: LoopEnv, summarizer: Notes, turns: int) -> tuple[str, list[SummaryReport], int]:
    """(thread, the summary reports, the summarizer's input tokens as the loop booked them:
    with no usage reported, the estimate of what each call was handed)."""
    tid = await env.thread()
    loop = env.loop(EchoModel(), _policy(summarizer))  # type: ignore[arg-type]
    reports, tokens = [], 0
    for i in range(turns):
        report = (await _turn(loop, tid, _said(i))).report
        tokens += sum(c.prompt_tokens for c in report.model_calls if c.purpose != "chat")
        if report.summary is not None:
            reports.append(report.summary)
    return tid, reports, tokens


@SQL_JOURNAL_ONLY
async def test_a_summarizer_that_always_fails_costs_less_than_a_healthy_one_and_recovers(
    env: LoopEnv,
) -> None:
    healthy = Notes()
    _, _, good_tokens = await _run(env, healthy, TURNS)
    broken = Notes(broken=True)
    tid, bad, bad_tokens = await _run(env, broken, TURNS)

    refused = sum(r.rejected for r in bad)
    # Measured: healthy 27 calls (a window of 20 folds in batches); broken 8, with 1, 2, 4,
    # 8, 16, 32, 32 turns waited between them, each handed the whole owed chunk.
    assert healthy.calls == 27
    assert broken.calls == refused == 8
    assert all(r.rejected_reasons in ([], ["empty"]) for r in bad)
    assert bad_tokens <= COST_MULTIPLE * good_tokens, (bad_tokens, good_tokens)
    first = next(i for i, r in enumerate(bad) if r.rejected)
    assert {r.outcome for r in bad[first:]} == {"empty", "backoff"}
    assert all(r.pending for r in bad[first:]), "what is owed is reported on every turn"
    assert await summary_rows(env.store, tid) == []
    stored = await env.store.fold_health(tid)
    assert stored is not None and stored.outcome == "empty" and stored.failures == refused
    assert stored.owed == bad[-1 - [r.outcome for r in reversed(bad)].index("empty")].pending

    # Healed: the thread folds on the first turn its backoff allows, and is healthy again.
    broken.broken = False
    loop = env.loop(EchoModel(), _policy(broken))  # type: ignore[arg-type]
    wait = bad[-1].backoff_turns
    after = [(await _turn(loop, tid, _said(TURNS + i))).report.summary for i in range(wait + 2)]
    made = [i for i, r in enumerate(after) if r is not None and r.made]
    assert made and made[0] == wait, (wait, [r.outcome if r else None for r in after])
    healed = after[made[0]]
    assert healed is not None and healed.outcome == "ok" and healed.failures == 0
    assert await env.store.fold_health(tid) == FoldHealth(outcome="ok")


@SQL_JOURNAL_ONLY
async def test_the_backoff_survives_a_restart(env: LoopEnv) -> None:
    """The thread's backoff is on its row: a new process (a new store and loop over the same
    database) keeps waiting instead of calling a failing summarizer again at once."""
    broken = Notes(broken=True)
    tid = await env.thread()
    loop = env.loop(EchoModel(), _policy(broken))  # type: ignore[arg-type]
    outcomes = await _until_called(loop, tid, broken, 2)
    assert outcomes[-3:] == ["empty", "backoff", "empty"]
    health = await env.store.fold_health(tid)
    assert health is not None and health.failures == 2

    restarted = SqlAgentStore(env.store.engine)
    fresh = Notes(broken=True)
    loop = env.loop(EchoModel(), _policy(fresh), store=restarted)  # type: ignore[arg-type]
    waited = [(await _turn(loop, tid, _said(100 + i))).report.summary for i in range(2)]
    assert fresh.calls == 0, "the new process waits out the stored backoff"
    assert [r.outcome if r else None for r in waited] == ["backoff", "backoff"]
    assert (await _turn(loop, tid, "and now")).report.summary.outcome == "empty"  # type: ignore[union-attr]
    assert fresh.calls == 1
    await restarted.dispose()  # its driver connections (the engine is env's: disposed again)


@SQL_JOURNAL_ONLY
async def test_a_resumed_run_decides_its_backoff_from_its_journal_not_the_row(
    env: LoopEnv,
) -> None:
    """A run that backed off and then failed at its chat call is resumed after the thread's
    row was healed by someone else: the replay reads the backoff it journaled, sends the same
    prompt and calls no summarizer."""
    broken = Notes(broken=True)
    tid = await env.thread()
    loop = env.loop(EchoModel(), _policy(broken))  # type: ignore[arg-type]
    await _until_called(loop, tid, broken, 2)
    model = DiesOnce()
    loop = env.loop(model, _policy(broken))  # type: ignore[arg-type]
    run_id = rid()
    with pytest.raises(RunFailed):
        await _turn(loop, tid, "dies", run_id)
    assert broken.calls == 2, "backing off"
    await env.store.save_fold_health(tid, None)
    result = await loop.resume(run_id)
    assert broken.calls == 2, "the replay follows the journal"
    first, second = model.prompts
    assert first == second
    assert result.report.summary is not None and result.report.summary.outcome == "backoff"


class Junk:
    """The issue's broken summarizer: the same junk sentence for every fold."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        return HistorySummary(
            text="The quick brown fox jumps over the lazy dog while the orchestra tunes.",
            usage=Usage(prompt_tokens=10, completion_tokens=12),
        )


@SQL_JOURNAL_ONLY
async def test_an_unrelated_summary_is_refused_counted_and_never_stored(env: LoopEnv) -> None:
    junk = Junk()
    tid = await env.thread()
    loop = env.loop(EchoModel(), window_history(max_messages=WINDOW, summarize=junk))
    reports = [(await _turn(loop, tid, _said(i))).report.summary for i in range(40)]
    reasons = [x for r in reports if r is not None for x in r.rejected_reasons]
    assert reasons and set(reasons) == {"unrelated"} and len(reasons) == junk.calls
    assert await summary_rows(env.store, tid) == [], "nothing stored as the summary"
    health = await env.store.fold_health(tid)
    assert health is not None and health.outcome == "unrelated"
    assert health.failures == junk.calls
    # What stays unsummarized is reported on every turn after the first refusal.
    owing = [r for r in reports if r is not None and r.outcome in ("unrelated", "backoff")]
    assert owing and all(r.pending for r in owing)
    assert len(owing) == 40 - next(i for i, r in enumerate(reports) if r is not None)


@SQL_JOURNAL_ONLY
async def test_junk_after_small_talk_is_refused_so_it_cannot_vouch_for_later_folds(
    env: LoopEnv,
) -> None:
    """Twenty turns of "hi" and "ok" give the first fold a source too small to judge by
    support. The junk sentence was stored for it, and then for every later fold: the same
    sentence again adds nothing (`new_part` is empty), so nothing was judged, and 9 folds of
    orders and tickets were stored as the fox sentence. A summary sharing no term with even a
    small source is refused."""
    junk = Junk()
    tid = await env.thread()
    loop = env.loop(EchoModel(), window_history(max_messages=WINDOW, summarize=junk))
    small_talk = ["hi", "ok", "thanks", "yes", "sure"] * 4
    reports = [(await _turn(loop, tid, text)).report.summary for text in small_talk]
    reports += [(await _turn(loop, tid, _said(i))).report.summary for i in range(40)]
    assert await summary_rows(env.store, tid) == [], "the fox sentence is never the summary"
    reasons = [x for r in reports if r is not None for x in r.rejected_reasons]
    assert junk.calls >= 2 and reasons == ["unrelated"] * junk.calls


class ThanksJunk(Junk):
    """The attack's variant: a chat word first, shared with the small talk."""

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        return HistorySummary(text="Thanks! The quick brown fox jumps over the lazy dog.")


@SQL_JOURNAL_ONLY
async def test_junk_sharing_only_a_chat_word_with_small_talk_is_refused(env: LoopEnv) -> None:
    junk = ThanksJunk()
    tid = await env.thread()
    loop = env.loop(EchoModel(), window_history(max_messages=WINDOW, summarize=junk))
    for text in ["hi", "ok", "thanks", "yes", "sure"] * 4:
        await _turn(loop, tid, text)
    for i in range(40):
        await _turn(loop, tid, _said(i))
    assert junk.calls >= 2
    assert await summary_rows(env.store, tid) == [], "stored 13 of 13 times before"


class Fixed:
    """A summarizer that answers `text` at every fold."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls += 1
        return HistorySummary(text=self.text)


OTHER_THREAD = (
    "- Customer Tom Berg: order ORD-77120 placed April 2 has not arrived; tracking says "
    "delivered, no parcel at door.\n- Refund of 45.99 GBP to Visa ending 1111 requested; "
    "delivery address change to 9 Baker Street asked.\n- Ticket CAS-9034 closed without an "
    "answer; reopen requested."
)


NAMES = ["Maria Jensen", "Tom Berg", "Aisha Khan", "Luca Rossi", "Eva Novak", "Sam Lee"]


def _support_chat(i: int) -> str:
    """The attack's support chat: names, orders, dates, amounts, an address, tickets; the
    words of any support thread, which another thread's summary shares."""
    name, city, order = NAMES[i % 6], CITIES[i % 6], f"ORD-{58000 + i}"
    return [
        f"Hi, this is {name}. Order {order} placed on March {1 + i % 28} hasn't arrived.",
        f"The tracking for {order} says delivered but there is no parcel at my door.",
        f"Can I get a refund of {20 + i}.99 GBP to my Visa ending {4000 + i}?",
        f"Please change the delivery address for {order} to {i} Baker Street, {city}.",
        f"My ticket CAS-{7000 + i} was closed without an answer, please reopen it.",
    ][i % 5]


@SQL_JOURNAL_ONLY
@pytest.mark.parametrize(
    "answer",
    ["Sure! Please paste the conversation.", "N/A", OTHER_THREAD],
    ids=["chat-reply", "not-available", "another-thread"],
)
async def test_a_short_answer_or_another_threads_summary_is_never_stored(
    env: LoopEnv, answer: str
) -> None:
    """Found by attack, each stored at 9 of 9 folds of 60 turns: an answer under 4 terms was
    too small to judge; another customer's summary shared the words of any support thread
    (support 0.72) and, stored once, vouched for itself at every later fold."""
    fixed = Fixed(answer)
    tid = await env.thread()
    loop = env.loop(EchoModel(), window_history(max_messages=WINDOW, summarize=fixed))
    reports = [(await _turn(loop, tid, _support_chat(i))).report.summary for i in range(60)]
    assert await summary_rows(env.store, tid) == []
    reasons = [x for r in reports if r is not None for x in r.rejected_reasons]
    assert fixed.calls >= 2 and reasons == ["unrelated"] * fixed.calls


@SQL_JOURNAL_ONLY
async def test_a_message_holding_a_huge_number_never_fails_a_turn_by_its_fold(
    env: LoopEnv,
) -> None:
    """Found by review: the identifier check compared numbers by `int()`, which refuses a run
    of more than 4,300 digits, so a pasted blob of digits failed the turn whose fold judged
    it, with the summarizer's numbers not found as written."""
    fixed = Fixed("- orders 101, 202 and 303 are pending for the warehouse team")
    tid = await env.thread()
    loop = env.loop(EchoModel(), window_history(max_messages=WINDOW, summarize=fixed))
    blob = " blob " + "7" * 5000
    reports = [
        (await _turn(loop, tid, _said(i) + (blob if i == 0 else ""))).report.summary
        for i in range(30)
    ]
    assert fixed.calls >= 1
    assert any(r is not None and r.outcome == "unrelated" for r in reports)


class JunkCompressor:
    """Folds well (the chunk's own words, over the cap), but answers a compress request with a
    junk sentence: shorter, well-formed, and standing for none of the notes."""

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        if ctx.fold_task == "compress":
            return HistorySummary(text="The quick brown fox jumps over the lazy dog again.")
        lines = [f"- {m.content}" for m in messages if m.role == "user"]
        return HistorySummary(text="\n".join(lines * 6))


async def test_a_compression_that_answers_junk_is_not_taken_for_the_notes(env: LoopEnv) -> None:
    """The compress answer replaces the whole summary: a junk one (shorter, so it passed the
    old checks) would wipe every fact; it is refused as unrelated, and the summary's oldest part
    is archived instead (reported), the summary keeping its newest facts."""
    tid = await env.thread()
    policy = window_history(max_messages=WINDOW, summarize=JunkCompressor(), fold_max_tokens=1000)
    loop = env.loop(EchoModel(), policy)
    reports = [(await _turn(loop, tid, _said(i))).report.summary for i in range(WINDOW)]
    rows = await summary_rows(env.store, tid)
    assert rows, "folded"
    assert all("quick brown fox" not in text for _, text in rows)
    assert any(r is not None and r.archived for r in reports)
    assert all(r is None or r.compressed == 0 for r in reports)
    assert "ORD-" in rows[-1][1], "the summary kept the newest facts"


@SQL_JOURNAL_ONLY
async def test_erasing_in_the_window_does_not_end_an_earned_backoff(env: LoopEnv) -> None:
    """Found by review: the loop's fold clock (the seq its fold owes up to) steps back when
    messages in the window are erased; a guard that read a wait longer than the cap past that
    clock as another thread's folded at once, one turn into a 32-turn backoff."""
    broken = Notes(broken=True)
    tid = await env.thread()
    loop = env.loop(EchoModel(), _policy(broken))  # type: ignore[arg-type]
    await _until_called(loop, tid, broken, 6)  # 6 failures: the next wait is the cap, 32 turns
    health = await env.store.fold_health(tid)
    assert health is not None and health.failures == 6
    newest = max(m.seq or 0 for m in await env.store.list_messages(tid, limit=5))
    # the user erases three of the window's messages (the newest ones)
    for seq in (newest, newest - 1, newest - 2):
        assert await env.store.delete_message(tid, seq)
    calls = broken.calls
    outcomes = [(await _turn(loop, tid, _said(200 + i))).report.summary for i in range(3)]
    assert broken.calls == calls, "a backoff of 32 turns was earned one turn ago"
    assert all(o is not None and o.outcome == "backoff" for o in outcomes)
