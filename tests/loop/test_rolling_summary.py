"""Rolling summaries, through the loop on SQLite and PostgreSQL: the boundary moves forward, a
fold is handed the summary so far plus only what is new, a backlog folds in bounded chunks, a
failure between summarizing and storing neither loses nor repeats the summary, and runs
journaled on the older path still replay on it."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import pytest

from bounded_agents.core.history import summarizing_runs_window, window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import Message, ToolCall
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    ModelRequest,
    ReadBound,
    ThreadSummary,
    ThreadTurnQuery,
    Usage,
)
from bounded_agents.core.summary import ARCHIVED_UNSEARCHABLE_NOTE
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.durable import InlineRuntime
from bounded_agents.errors import ConfigError, RunFailed
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import MemoryStore, SqlAgentStore
from bounded_agents.store.ledger import MemoryLedger
from bounded_agents.store.schema import run_steps, runs
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import assistant, summary_rows, toy_summary, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, CountingStore, LoopEnv


def rid() -> str:
    return str(uuid.uuid4())


@dataclass
class Fold:
    previous: str | None
    seqs: list[int]


@dataclass
class RecordingSummarizer:
    """Names each summary by the last seq it covers, and records what each fold was handed."""

    folds: list[Fold] = field(default_factory=list)

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.folds.append(
            Fold(ctx.summary.text if ctx.summary else None, [m.seq or 0 for m in messages])
        )
        return HistorySummary(
            text=toy_summary("summary through", messages),
            usage=Usage(prompt_tokens=10 * len(messages), completion_tokens=3),
            model="summarizer-1",
        )


async def _turns(env: LoopEnv, loop: AgentLoop, tid: str, n: int) -> list[str]:
    run_ids = []
    for i in range(n):
        run_id = rid()
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=f"turn {i}", run_id=run_id
        )
        run_ids.append(run_id)
    return run_ids


async def test_the_boundary_rolls_forward_and_each_fold_gets_only_new_messages(
    env: LoopEnv,
) -> None:
    summarizer = RecordingSummarizer()
    policy = window_history(max_messages=4, summarize=summarizer, fold_messages=4)
    model = EchoModel()
    loop = env.loop(model, policy)
    tid = await env.thread()
    await _turns(env, loop, tid, 20)

    covered = 0
    for fold in summarizer.folds:
        assert fold.seqs == list(range(covered + 1, fold.seqs[-1] + 1)), "contiguous, only new"
        assert (fold.previous or "").partition(":")[0] == (
            f"summary through {covered}" if covered else ""
        )
        assert len(fold.seqs) <= 4 + 2, "a fold takes a batch, never the thread"
        covered = fold.seqs[-1]
    # A fold every other turn (the window refills by two messages a turn), not every turn.
    assert 8 <= len(summarizer.folds) <= 10
    rows = await summary_rows(env.store, tid)
    assert [seq for seq, _ in rows] == [f.seqs[-1] for f in summarizer.folds]
    # The newest turn's prompt: system, the summary, then only what the summary does not cover.
    thread = await env.store.get_thread(tid)
    assert thread is not None
    page = await env.store.load_thread_for_turn(ThreadTurnQuery(thread_id=tid, after_summary=True))
    assert page is not None and page.summary is not None
    assert page.summary.covers_through_seq == covered
    assert len(thread.messages) - covered <= 4 + 4, "the unsummarized part stays bounded"


async def test_between_folds_each_prompt_extends_the_previous_one(env: LoopEnv) -> None:
    summarizer = RecordingSummarizer()
    policy = window_history(max_messages=6, summarize=summarizer, fold_messages=6)
    calls: list[ModelRequest] = []

    async def answer(request: ModelRequest) -> object:
        calls.append(request)
        return reply(f"answer {len(calls)}")

    model = ScriptedProvider([answer] * 30)
    loop = env.loop(model, policy)
    tid = await env.thread()
    folds_after: list[int] = []
    for i in range(30):
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=f"turn {i}", run_id=rid()
        )
        folds_after.append(len(summarizer.folds))
    extended = 0
    for n in range(1, 30):
        previous, current = calls[n - 1].messages, calls[n].messages
        if folds_after[n] == folds_after[n - 1]:  # turn n folded nothing
            assert current[: len(previous)] == previous, f"turn {n} rewrote the prefix"
            extended += 1
        else:
            assert current[: len(previous)] != previous, "a fold is the turn that changes it"
    assert extended >= 20, "most turns reuse the previous prompt as their prefix"


async def test_a_long_backlog_folds_in_chunks_that_each_fit_the_budget(env: LoopEnv) -> None:
    """A policy switched on for a thread that is already long, with calls enough to fold it in
    one turn: no single summarizer call is larger than `fold_max_tokens`; every chunk is
    stored as it is made."""
    history = [m for i in range(150) for m in (user(f"q{i:03d}" * 8), assistant(f"a{i:03d}" * 8))]
    tid = await env.thread(history)
    budget = 400
    summarizer = RecordingSummarizer()
    policy = window_history(max_messages=4, summarize=summarizer, fold_max_tokens=budget)
    store = CountingStore(env.store)
    run_id = rid()
    result = await env.loop(EchoModel(), policy, store=store, fold_calls=100).run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
    )
    assert store.bounded_reads == [8], "the turn read itself is the window plus a fold batch"
    thread = await env.store.get_thread(tid)
    assert thread is not None
    by_seq = {m.seq: m for m in thread.messages}
    covered = 0
    for i, fold in enumerate(summarizer.folds):
        assert fold.seqs[0] == covered + 1
        previous = ThreadSummary(text=fold.previous, covers_through_seq=covered) if i else None
        size = sum(estimate_message_tokens(by_seq[s]) for s in fold.seqs)
        if previous is not None:
            size += estimate_message_tokens(Message(role="system", content=previous.text))
        assert size <= budget
        covered = fold.seqs[-1]
    assert covered == 301 - 4, "everything but the kept window is covered"
    assert len(summarizer.folds) >= 8
    names = [n for n, _ in await env.journal.steps(run_id)]
    assert names.count("persist:summary") == 1
    assert f"history:summarize:{len(summarizer.folds)}" in names
    assert len(await summary_rows(env.store, tid)) == len(summarizer.folds)
    report = result.report
    assert report.summary is not None and report.summary.made
    assert (report.summary.folds, report.summary.covers_through_seq) == (len(summarizer.folds), 297)
    assert report.summary.input_messages == 297
    ledger = await env.ledger.entries_for_run(run_id)
    summaries = [e for e in ledger if e.purpose == "history_summary"]
    assert len(summaries) == len(summarizer.folds)
    assert {e.model for e in summaries} == {"summarizer-1"}


class FailingOnce(CountingStore):
    """Dies (once) right where a summary is stored: after the summarizer ran and its result was
    journaled, before the summary row exists."""

    def __init__(self, inner: SqlAgentStore) -> None:
        super().__init__(inner)
        self.failed = False

    async def save_summary(self, thread_id: str, summary: ThreadSummary) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("process died here")
        await super().save_summary(thread_id, summary)


async def test_a_failure_between_summarizing_and_storing_loses_nothing_and_repeats_nothing(
    env: LoopEnv,
) -> None:
    tid = await env.thread([m for i in range(5) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    summarizer = RecordingSummarizer()
    policy = window_history(max_messages=2, summarize=summarizer)
    store = FailingOnce(env.store)
    first = ScriptedProvider([])
    run_id = rid()
    with pytest.raises(RunFailed):
        await env.loop(first, policy, store=store).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
        )
    assert await summary_rows(env.store, tid) == []
    model = ScriptedProvider([reply("answer")])
    again = RecordingSummarizer()
    result = await env.loop(
        model, window_history(max_messages=2, summarize=again), store=store
    ).resume(run_id)
    assert again.folds == [], "the journaled summary is reused, never made twice"
    assert await summary_rows(env.store, tid) == [(9, "summary through 9: q4")]
    assert "summary through 9" in model.calls[0].messages[1].content
    ledger = [e for e in await env.ledger.entries_for_run(run_id) if e.purpose == "history_summary"]
    assert len(ledger) == 1
    assert result.report.summary is not None and result.report.summary.covers_through_seq == 9


# SQL journal only: truncates run_steps rows to stage a crash mid-run (DBOS's replay after
# a real kill -9: tests/reliability/test_dbos_runtime.py).
@SQL_JOURNAL_ONLY
async def test_a_replayed_fold_sends_the_model_the_same_prompt_byte_for_byte(env: LoopEnv) -> None:
    tid = await env.thread([m for i in range(5) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    run_id = rid()
    first = ScriptedProvider([reply("first")])
    policy = window_history(max_messages=2, summarize=RecordingSummarizer())
    await env.loop(first, policy).run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
    )
    # Undo the answer's journal entry: the resumed run replays everything up to the model call.
    async with env.store.engine.begin() as conn:
        names = [n for n, _ in await env.journal.steps(run_id)]
        await conn.execute(
            run_steps.delete().where(
                run_steps.c.run_id == run_id, run_steps.c.position >= names.index("model:1")
            )
        )
        await conn.execute(runs.update().where(runs.c.id == run_id).values(status="failed"))
    second = ScriptedProvider([reply("second")])
    await env.loop(second, window_history(max_messages=2, summarize=RecordingSummarizer())).resume(
        run_id
    )
    assert second.calls[0].model_dump_json() == first.calls[0].model_dump_json()


async def test_a_summarizing_runs_window_folds_whole_runs_past_its_threshold(
    env: LoopEnv,
) -> None:
    summarizer = RecordingSummarizer()
    policy = summarizing_runs_window(summarizer, token_threshold=120, keep_recent_runs=2)
    loop = env.loop(EchoModel(), policy)
    tid = await env.thread()
    await _turns(env, loop, tid, 25)
    assert summarizer.folds, "the threshold was reached"
    thread = await env.store.get_thread(tid)
    assert thread is not None
    by_seq = {m.seq: m for m in thread.messages}
    for fold in summarizer.folds:
        assert by_seq[fold.seqs[0]].role == "user", "a fold starts at a run"
        nxt = by_seq.get(fold.seqs[-1] + 1)
        assert nxt is not None and nxt.role == "user", "and ends where a run ends"
    assert policy.read_bound == ReadBound(tokens=120, runs=2, widest=True)


class PinnedNewest:
    """A custom policy that declares a read bound AND summarizes: it keeps the newest two of the
    newest five rows it reads. It gets the rolling semantics: nothing vanishes unsummarized."""

    def __init__(self, summarize: RecordingSummarizer) -> None:
        self.max_messages = 5
        self.summarize = summarize

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=messages[-2:], drop=messages[:-2])


async def test_a_custom_bounded_summarizing_policy_loses_nothing(env: LoopEnv) -> None:
    tid = await env.thread([m for i in range(10) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    summarizer = RecordingSummarizer()
    loop = env.loop(EchoModel(), PinnedNewest(summarizer))  # type: ignore[arg-type]
    await _turns(env, loop, tid, 3)
    covered = [s for f in summarizer.folds for s in f.seqs]
    assert covered == list(range(1, covered[-1] + 1)), "the rows the read skipped were folded"
    thread = await env.store.get_thread(tid)
    assert thread is not None
    assert covered[-1] >= len(thread.messages) - 3


async def test_a_summarizing_policy_on_a_store_without_summaries_is_refused() -> None:
    class NoSummaries:
        async def create_thread(self, **kw: object) -> None: ...
        async def get_thread(self, thread_id: str) -> None: ...
        async def append_messages(self, thread_id: str, messages: object) -> list[Message]:
            return []

    definition = AgentDefinition(
        name="helper",
        system_prompt="x",
        policy=window_history(max_messages=3, summarize=RecordingSummarizer()),
    )
    with pytest.raises(ConfigError, match="keeps no summaries"):
        AgentLoop(
            store=NoSummaries(),  # type: ignore[arg-type]
            runtime=InlineRuntime(),
            ledger=MemoryLedger(),
            model=EchoModel(),
            agents={"helper": definition},
        )
    # The in-memory store keeps summaries, so it is accepted.
    AgentLoop(
        store=MemoryStore(),
        runtime=InlineRuntime(),
        ledger=MemoryLedger(),
        model=EchoModel(),
        agents={"helper": definition},
    )


async def test_a_run_journaled_on_the_selected_history_path_replays_it(env: LoopEnv) -> None:
    """A run from before rolling summaries: marker `agent:selected-history`, `load:thread` with
    keep and drop, and a summary it had yet to make. It summarizes its recorded drop, whole,
    as the code of its day did, and writes no summary row."""
    tid = await env.thread([m for i in range(3) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    run_id = rid()
    stored = await env.store.append_messages(tid, [user("legacy question", run_id=run_id)])
    load = {
        "keep": [{"role": "assistant", "content": "a2"}, {"role": "user", "content": "legacy"}],
        "drop": [{"role": "user", "content": "q0"}, {"role": "assistant", "content": "a0"}],
        "title": "t",
        "has_assistant_message": True,
    }
    await env.failed_run(
        run_id,
        tid,
        "legacy question",
        [
            ("persist:user", json.dumps({"seq": stored[0].seq})),
            ("patch:agent:selected-history", "true"),
            ("load:thread", json.dumps(load)),
        ],
    )
    summarizer = RecordingSummarizer()
    model = ScriptedProvider([reply("old path answer")])
    await env.loop(model, window_history(max_messages=2, summarize=summarizer)).resume(run_id)
    names = [n for n, _ in await env.journal.steps(run_id)]
    assert names == [
        "persist:user",
        "patch:agent:selected-history",
        "load:thread",
        "history:summarize",
        "persist:usage:history",
        "model:1",
        "persist:assistant",
    ]
    assert [f.seqs for f in summarizer.folds] == [[0, 0]], "the recorded drop, no seq in it"
    assert [m.content for m in model.calls[0].messages][2:] == ["a2", "legacy"]
    assert await summary_rows(env.store, tid) == []


async def test_a_summary_without_usage_is_booked_by_the_estimate_and_flagged(
    env: LoopEnv,
) -> None:
    """As a chat call without usage is: never free, and marked as an estimate in the ledger."""

    async def no_usage(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(text="short")

    tid = await env.thread([m for i in range(5) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    run_id = rid()
    result = await env.loop(
        ScriptedProvider([reply("answer")]), window_history(max_messages=2, summarize=no_usage)
    ).run_turn(agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id)
    rows = {e.purpose: e for e in await env.ledger.entries_for_run(run_id)}
    summary, chat = rows["history_summary"], rows["chat"]
    assert summary.estimated and summary.prompt_tokens > 0 and summary.completion_tokens > 0
    assert not chat.estimated  # the scripted provider reported its usage
    assert [r.estimated for r in result.report.ledger] == [True, False]


# SQL journal only: truncates run_steps rows to stage a crash mid-run (DBOS's replay after
# a real kill -9: tests/reliability/test_dbos_runtime.py).
@SQL_JOURNAL_ONLY
async def test_a_run_whose_tool_results_reach_the_threshold_folds_before_its_next_call(
    env: LoopEnv,
) -> None:
    """HasteKit counts before EACH model call: the tool results of this run's first step push
    the history to the threshold, so its older kept runs fold before the second call."""
    from bounded_agents.testing import FunctionTool

    async def look(q: str) -> str:
        return "r" * 2000  # about 500 tokens

    tid = await env.thread([m for i in range(3) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    summarizer = RecordingSummarizer()
    policy = summarizing_runs_window(summarizer, token_threshold=300, keep_recent_runs=1)
    call = ToolCall(id="c1", name="look", arguments={"q": "x"})
    model = ScriptedProvider([reply("", tool_calls=[call]), reply("done")])
    run_id = rid()
    loop = env.loop(model, policy, tools={"look": FunctionTool("look", look)})
    result = await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content="now?", run_id=run_id
    )
    first, second = (r.messages for r in model.calls)
    assert [m.content for m in first[1:4]] == ["q0", "a0", "q1"], "under the threshold: all rode"
    assert [f.seqs for f in summarizer.folds] == [[1, 2, 3, 4, 5, 6]], "the older runs folded"
    assert second[1].role == "system" and "summary through 6" in second[1].content
    assert [m.content for m in second[2:]][:1] == ["now?"], "then the run in flight"
    names = [n for n, _ in await env.journal.steps(run_id)]
    assert names[names.index("tool:1:c1") + 1 : names.index("model:2")] == [
        "history:summarize",
        "persist:usage:history",
        "persist:summary",
    ]
    assert result.report.summary is not None and result.report.summary.covers_through_seq == 6
    # A replay makes the same decision from the journal and sends the same second prompt.
    async with env.store.engine.begin() as conn:
        await conn.execute(
            run_steps.delete().where(
                run_steps.c.run_id == run_id, run_steps.c.position >= names.index("model:2")
            )
        )
        await conn.execute(runs.update().where(runs.c.id == run_id).values(status="failed"))
    again = ScriptedProvider([reply("done")])
    await env.loop(again, policy, tools={"look": FunctionTool("look", look)}).resume(run_id)
    assert again.calls[0].model_dump_json() == model.calls[1].model_dump_json()
    assert len(summarizer.folds) == 1


async def test_the_threshold_prefers_the_providers_count_of_the_last_call(env: LoopEnv) -> None:
    """HasteKit counts with the provider's reported totals when there are any: a provider that
    says the last call cost 5,000 tokens pushes the history past a 1,000-token threshold that
    the estimate (a few short messages) never reaches; an estimated count does not."""
    summarizer = RecordingSummarizer()
    policy = summarizing_runs_window(summarizer, token_threshold=1000, keep_recent_runs=1)
    tid = await env.thread()
    heavy = ScriptedProvider([reply("a", prompt_tokens=4000, completion_tokens=1000), reply("b")])
    loop = env.loop(heavy, policy)
    await _turns(env, loop, tid, 1)
    assert summarizer.folds == []  # nothing reported yet: the estimate is far below
    await _turns(env, loop, tid, 1)
    assert [f.seqs for f in summarizer.folds] == [[1, 2]], "the reported 5,000 reached it"

    quiet = RecordingSummarizer()
    tid2 = await env.thread()
    echo = env.loop(EchoModel(), summarizing_runs_window(quiet, token_threshold=1000))
    await _turns(env, echo, tid2, 3)
    assert quiet.folds == [], "an estimated count is not a report: the estimate decides"


async def test_a_summarizer_that_ignores_its_cap_is_archived_and_the_prompt_stays_bounded(
    env: LoopEnv,
) -> None:
    """A summarizer (a model that rambles, or lies) returning far more than the summary's cap,
    even when asked to compress: the summary is asked to compress itself once per fold, then
    each one kept is cut to half the fold budget, its oldest part ARCHIVED (the store keeps a
    `SummaryArchive`: nothing leaves reach) and the summary says so, so every later prompt and
    fold stays bounded however long the thread gets; the archivings are counted and the ledger
    still books what the provider billed. (It rambles ABOUT the thread, repeating its
    messages' words: a summary of invented words is refused as `unrelated` since issue 36.)"""
    budget = 400
    cap = budget // 2
    seen: list[tuple[str, int | None]] = []

    async def rambling(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        seen.append((ctx.fold_task, ctx.summary_max_tokens))
        return HistorySummary(
            text=" ".join(f"q{i % 6} a{i % 6}" for i in range(20_000)),  # ~ 30,000 tokens
            usage=Usage(prompt_tokens=100, completion_tokens=40_000),
        )

    tid = await env.thread([m for i in range(6) for m in (user(f"q{i}"), assistant(f"a{i}"))])
    model = ScriptedProvider([reply(f"answer {i}") for i in range(12)])
    loop = env.loop(
        model, window_history(max_messages=4, summarize=rambling, fold_max_tokens=budget)
    )
    reports, run_ids = [], [rid() for _ in range(12)]
    for i, run_id in enumerate(run_ids):
        result = await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content=f"turn {i}", run_id=run_id
        )
        reports.append(result.report)
    assert {cap_ for task, cap_ in seen if task == "fold"} == {cap}, "told its cap"
    assert {cap_ for task, cap_ in seen if task == "compress"} == {cap // 2}, "asked for half"
    for _, text in await summary_rows(env.store, tid):
        assert estimate_message_tokens(Message(role="system", content=text)) <= cap
        assert text.startswith(ARCHIVED_UNSEARCHABLE_NOTE + "\n"), "it says notes went"
        assert text.endswith("q0 a0 q1 a1"), "the end is kept"
    sizes = [sum(estimate_message_tokens(m) for m in call.messages) for call in model.calls]
    assert max(sizes) <= cap + 200, f"every prompt is the capped summary plus the window: {sizes}"
    folded = [r.summary for r in reports if r.summary is not None and r.summary.made]
    assert len(folded) >= 3 and all(s.archived == s.folds and not s.clipped for s in folded)
    parts = await env.store.archived_parts(tid)
    # One part per fold at most (a part is stored once per range and text).
    assert 1 <= len(parts) <= len(folded) and all("q0 a0" in p.content for p in parts)
    assert all(s.compressed == 0 and s.calls == 2 for s in folded), "one compression tried"
    ledger = [
        e
        for run_id in run_ids
        for e in await env.ledger.entries_for_run(run_id)
        if e.purpose == "history_summary"
    ]
    assert ledger and {e.completion_tokens for e in ledger} == {80_000}, "both calls booked"
