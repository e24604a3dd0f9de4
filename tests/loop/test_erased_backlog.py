"""What a turn owes after erasure: the fold's debt and the prompt's omission note count the
messages that exist, not the seqs between the summary and the page, on SQLite and PostgreSQL.

Erasing a message erases the summaries made of it, so the summary's boundary falls back and
the fold owes everything since; with the summarizer down the owed messages ride the prompt up
to a cap and the rest are announced. Before, the gap the erased messages left was counted as
messages: with 70 of the oldest 77 erased, the report owed 77 and the model was told that up
to 70-odd earlier messages were missing, when 7 existed (found in review: "57 of 0")."""

from __future__ import annotations

import uuid
from typing import Any

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import omission_note
from bounded_agents.core.messages import ChatMessage, Message
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    ModelRequest,
    ModelResponse,
    Usage,
)
from bounded_agents.core.report import SummaryReport
from bounded_agents.errors import ProviderError
from tests.factories import assistant, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv


async def _down(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    raise ProviderError("HTTP 503")


class Recording:
    """A chat model that answers at once and keeps every prompt it was sent."""

    def __init__(self) -> None:
        self.prompts: list[list[ChatMessage]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append(list(request.messages))
        return ModelResponse(content="ok", usage=Usage(prompt_tokens=1, completion_tokens=1))


def _backlog(turns: int) -> list[Message]:
    return [m for i in range(turns) for m in (user(f"q{i:03d} " * 8), assistant(f"a{i:03d} " * 8))]


def _notes(prompt: list[ChatMessage]) -> list[str]:
    return [m.content for m in prompt if m.role == "system" and "not in any" in m.content]


async def _turn_after_erasing(
    env: LoopEnv, tid: str, seqs: range, summarize: Any, **policy: Any
) -> tuple[SummaryReport | None, list[ChatMessage]]:
    """Erase `seqs` of the thread, then one turn of a 4-message window that may make one fold
    call: (its report's summary figures, the prompt the model was sent)."""
    for seq in seqs:
        assert await env.store.delete_message(tid, seq)
    model = Recording()
    history = window_history(max_messages=4, summarize=summarize, **policy)
    result = await env.loop(model, history, fold_calls=1).run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=str(uuid.uuid4())
    )
    return result.report.summary, model.prompts[-1]


@SQL_JOURNAL_ONLY
async def test_an_erased_gap_is_not_counted_as_owed_or_announced_as_missing(
    env: LoopEnv,
) -> None:
    tid = await env.thread(_backlog(40))  # seqs 1..80
    report, prompt = await _turn_after_erasing(env, tid, range(1, 71), _down)
    assert report is not None and report.outcome is not None and report.outcome != "ok"
    # 71..80 and the question (81) exist; the window keeps the newest 4 (78..81): 71..77 owed
    assert report.pending == 7, report
    # seq 2i+1 is q{i}, 2i+2 a{i}: the owed ones are q035..q038, the window a038, q039, a039
    backlog = {f"{r}{i:03d}" for r in "qa" for i in range(35, 40)}
    sent = [m.content.split(" ")[0] for m in prompt if m.role != "system"]
    ridden = [word for word in sent if word in backlog and word not in {"a038", "q039", "a039"}]
    assert ridden and report.omitted == 7 - len(ridden), (report, sent)
    assert _notes(prompt) == ([omission_note(report.omitted)] if report.omitted else [])


@SQL_JOURNAL_ONLY
async def test_a_backlog_erased_whole_owes_nothing_and_announces_nothing(env: LoopEnv) -> None:
    tid = await env.thread(_backlog(40))
    # all but the newest three: the window holds every message left
    report, prompt = await _turn_after_erasing(env, tid, range(1, 78), _down)
    assert report is not None and report.pending == 0 and report.omitted == 0, report
    assert _notes(prompt) == []


async def _folds(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    words = " ".join(m.content.split(" ")[0] for m in messages)
    return HistorySummary(text=f"the user asked about {words}", usage=Usage(prompt_tokens=1))


@SQL_JOURNAL_ONLY
async def test_a_fold_that_stops_just_before_an_erased_message_does_not_owe_its_seq(
    env: LoopEnv,
) -> None:
    """One fold call of small chunks covers 1..4 and stops (out of calls): seq 5, erased, sits
    between the summary and the next message, and was counted as owed (found in review)."""
    tid = await env.thread(_backlog(5))  # seqs 1..10
    report, prompt = await _turn_after_erasing(env, tid, range(5, 6), _folds, fold_max_tokens=60)
    summary = await env.store.latest_summary(tid)
    thread = await env.store.get_thread(tid)
    assert report is not None and summary is not None and thread is not None
    before_answer = [m.seq or 0 for m in thread.messages][:-1]
    owed = [s for s in before_answer[:-4] if s > summary.covers_through_seq]
    assert report.deferred and summary.covers_through_seq == 4  # the case under test
    assert report.pending == len(owed) == 2, (report, owed)
    assert report.omitted == 0 and _notes(prompt) == []


@SQL_JOURNAL_ONLY
async def test_a_fold_that_covers_part_of_an_unread_backlog_owes_what_exists_past_it(
    env: LoopEnv,
) -> None:
    """The read left a long backlog unread (counted: erased seqs lie in it), and one fold call
    covered its oldest part. The count of the whole span was kept as owed, so the report owed
    the erased seqs past the summary too (found in review: pending 27 for 13). The messages
    the fold took are taken off the count: owed is what exists past the summary, outside the
    window."""
    tid = await env.thread(_backlog(40))  # seqs 1..80
    report, prompt = await _turn_after_erasing(env, tid, range(21, 61), _folds, fold_max_tokens=60)
    summary = await env.store.latest_summary(tid)
    thread = await env.store.get_thread(tid)
    assert report is not None and summary is not None and thread is not None
    assert report.deferred and 0 < summary.covers_through_seq < 20  # the case under test
    before_answer = [m.seq or 0 for m in thread.messages][:-1]
    owed = [s for s in before_answer[:-4] if s > summary.covers_through_seq]
    assert report.pending == len(owed), (report, owed)
    assert _notes(prompt) == ([omission_note(report.omitted)] if report.omitted else [])
    assert report.omitted <= report.pending
