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

import pytest

from bounded_agents.core import fold_health
from bounded_agents.core.checkpoints import LOAD_THREAD, or_none, parse_load_thread
from bounded_agents.core.history import window_history
from bounded_agents.core.history.runs import summarizing_runs_window
from bounded_agents.core.loop import AgentDefinition, omission_note
from bounded_agents.core.messages import ChatMessage, Message, ToolCall
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    ModelRequest,
    ModelResponse,
    Usage,
)
from bounded_agents.core.report import SummaryReport
from bounded_agents.core.turn import fold as fold_module
from bounded_agents.core.turn import load as load_module
from bounded_agents.core.turn import prompt as prompt_module
from bounded_agents.core.turn.kept import kept_messages, read_kept
from bounded_agents.core.turn.prompt import rebuilt_prompt
from bounded_agents.errors import ProviderError
from bounded_agents.testing import FunctionTool, ScriptedProvider, reply
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


async def _sent_and_rebuilt(
    env: LoopEnv, tid: str, model: Recording, policy: Any
) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """The last prompt the model was sent, and the one `rebuilt_prompt` makes of the journal
    (what `GET .../sent-prompt` shows, and what a resumed run sends again)."""
    [trace] = await env.journal.thread_runs(tid, limit=1)
    load = or_none(parse_load_thread, trace.payloads.get(LOAD_THREAD))
    thread = await env.store.get_thread(tid)
    assert thread is not None and load is not None
    question, answer = thread.messages[-2:]
    definition = AgentDefinition(name="helper", system_prompt="You help.", policy=policy)
    kept = kept_messages(load, await read_kept(env.store, tid, [load]), question.seq)
    rebuilt = rebuilt_prompt(definition, trace, load, answer, kept=kept, user_seq=question.seq)
    return model.prompts[-1], rebuilt


@SQL_JOURNAL_ONLY
async def test_a_run_journaled_before_the_net_count_is_rebuilt_as_it_was_sent(
    env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous release counted the whole unread span in a partial fold's omission note, and
    journaled no `unread_net`. Its run's prompt, rebuilt by this release, must say what it said
    (found in review: the rebuild said 30 where the model had read 34)."""
    tid = await env.thread(_backlog(40))
    for seq in range(21, 61):
        assert await env.store.delete_message(tid, seq)
    real_payload, real_count = load_module.load_thread_payload, fold_health.owed_count

    def as_before(*args: Any, **kwargs: Any) -> Any:  # the previous release's load:thread
        made = real_payload(*args, **kwargs)
        if made.get("fold"):
            made["fold"].pop("unread_net", None)
        return made

    def gross(fold: Any, covered: int, *, folded: int = 0) -> int:  # and its count
        return real_count(fold, covered)

    model = Recording()
    policy = window_history(max_messages=4, summarize=_folds, fold_max_tokens=60)
    with monkeypatch.context() as patched:
        patched.setattr(load_module, "load_thread_payload", as_before)
        patched.setattr(fold_module, "owed_count", gross)
        patched.setattr(prompt_module, "owed_count", gross)
        await env.loop(model, policy, fold_calls=1).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=str(uuid.uuid4())
        )

    sent, rebuilt = await _sent_and_rebuilt(env, tid, model, policy)
    assert _notes(sent) and _notes(rebuilt) == _notes(sent)
    assert rebuilt == sent


@SQL_JOURNAL_ONLY
async def test_a_refold_that_makes_no_attempt_keeps_the_turns_exact_count(env: LoopEnv) -> None:
    """A refolding policy whose turn's fold used its one call on part of an erased backlog, then
    a tool step that brings it over its threshold: the refold has no call left. It recounted
    the debt from its own fold, which carries no count, so the erased seqs before the window
    came back as owed (found in review: 74 owed for 34)."""
    tid = await env.thread(_backlog(40))
    for seq in range(21, 61):
        assert await env.store.delete_message(tid, seq)
    policy = summarizing_runs_window(
        _folds, token_threshold=300, keep_recent_runs=2, fold_max_tokens=60
    )
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})
    model = ScriptedProvider([reply("", tool_calls=[call]), reply("done")])
    tools = {"look": FunctionTool("look", _long_page)}
    result = await env.loop(model, policy, tools=tools, fold_calls=1).run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=str(uuid.uuid4())
    )

    report = result.report.summary
    summary = await env.store.latest_summary(tid)
    thread = await env.store.get_thread(tid)
    assert report is not None and summary is not None and thread is not None
    steps = await env.step_names(result.run_id)
    assert sum(1 for s in steps if s.startswith("history:summarize")) == 1  # the case under test
    question = [m for m in thread.messages if m.role == "user"][-1]
    owed = [
        m.seq
        for m in thread.messages
        if summary.covers_through_seq < (m.seq or 0) < (question.seq or 0) - 2
    ]
    assert report.pending == len(owed), (report, owed)
    health = await env.store.fold_health(tid)
    assert health is None or health.owed == report.pending


async def _long_page(q: str) -> str:
    return "r" * 2000
