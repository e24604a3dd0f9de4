"""Attacks on the fold's promises (issue 25), from outside: each test states a promise the fold
code makes and tries to break it. On SQLite and PostgreSQL; the replay tests on the SQL journal
and on DBOS workflows too.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from bounded_agents.core.history import summarizing_runs_window, window_history
from bounded_agents.core.loop import AgentLoop
from bounded_agents.core.messages import Message, ToolCall, ToolResult
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySummary,
    ModelRequest,
    ModelResponse,
    ToolSpec,
    Usage,
)
from bounded_agents.errors import ProviderContextExceeded, ProviderError, RunFailed
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.schema import actor_usage
from tests.factories import assistant, summary_rows, toy_summary, user
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv


def rid() -> str:
    return str(uuid.uuid4())


class Recording(EchoModel):
    """EchoModel that keeps every chat prompt it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[list[str]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append([m.content for m in request.messages])
        return await super().complete(request)


async def _turn(loop: AgentLoop, tid: str, text: str = "next?") -> object:
    return await loop.run_turn(
        agent="helper", thread_id=tid, actor_id="alice", content=text, run_id=rid()
    )


def _through(messages: list[Message]) -> HistorySummary:
    return HistorySummary(
        text=toy_summary("- through", messages), usage=Usage(prompt_tokens=9, completion_tokens=5)
    )


# --- the call budget and a too-long chunk ---------------------------------------------------


@SQL_JOURNAL_ONLY
async def test_a_chunk_the_summarizer_can_take_only_a_quarter_of_still_folds_over_turns(
    env: LoopEnv,
) -> None:
    """The issue's SmolLM2 case: its tokenizer counts digit-heavy text at up to 2.2x the
    estimate, so a chunk may need halving twice to fit. With the default two calls a turn,
    every turn spends both calls re-learning the size (the fitted size is not kept across
    turns), and the fold never moves: the memory stays where it was forever."""
    history = [
        m for i in range(40) for m in (user(f"q{i:02d} " * 10), assistant(f"a{i:02d} " * 10))
    ]
    tid = await env.thread(history)
    sent: list[int] = []

    async def small_context(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        sent.append(len(messages))
        if len(messages) > 4:
            raise ProviderContextExceeded("request exceeds the available context size")
        return _through(messages)

    policy = window_history(
        max_messages=4, fold_messages=4, summarize=small_context, fold_max_tokens=400
    )
    loop = env.loop(EchoModel(), policy, fold_calls=2)
    for i in range(4):
        await _turn(loop, tid, f"turn {i}")
    assert await summary_rows(env.store, tid), (
        f"four turns, no fold ever stored: chunk sizes sent {sent}"
    )


# --- quota ----------------------------------------------------------------------------------


async def _actor_total(store: SqlAgentStore, actor: str) -> int:
    async with store.engine.connect() as conn:
        total = await conn.scalar(
            sa.select(actor_usage.c.tokens).where(actor_usage.c.actor_id == actor)
        )
    return int(total or 0)


@SQL_JOURNAL_ONLY
async def test_a_compression_refused_by_the_quota_books_the_fold_call_and_leaks_no_reservation(
    env: LoopEnv,
) -> None:
    """The fold's call is admitted and answers (the provider billed it) with a summary over its
    cap; the compression call's reservation is then refused by the quota. The step must not
    fail in a way that forgets the first call: it is booked, and no reservation stays held
    (the actor's running total equals what the ledger booked)."""
    history = [m for i in range(6) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    tid = await env.thread(history)

    async def verbose(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        if ctx.fold_task == "compress":
            return HistorySummary(text="- short", usage=Usage(prompt_tokens=3, completion_tokens=2))
        return HistorySummary(
            text="- fact " * 400, usage=Usage(prompt_tokens=30, completion_tokens=20)
        )

    policy = window_history(max_messages=4, fold_messages=4, summarize=verbose, fold_max_tokens=400)
    # One reservation (the fold's: its input plus the cap, ~300 tokens) fits under 100 spent;
    # the second (the compression's) finds the total past the quota.
    loop = env.loop(EchoModel(), policy, quota=100)
    try:
        await _turn(loop, tid)
    except RunFailed:
        pass  # the quota may fail the turn; what matters is what it leaves behind
    async with env.store.engine.connect() as conn:
        booked = (
            await conn.execute(
                sa.text(
                    "SELECT purpose, prompt_tokens + completion_tokens FROM ledger "
                    "WHERE actor_id = 'alice'"
                )
            )
        ).all()
    summaries = [tokens for purpose, tokens in booked if purpose == "history_summary"]
    assert summaries and summaries[0] >= 50, f"the fold's billed call is booked: {booked}"
    assert await _actor_total(env.store, "alice") == sum(t for _, t in booked), (
        "no reservation is left held"
    )


# --- the mid-run refold ---------------------------------------------------------------------


class ToolOnce(EchoModel):
    """Calls the `look` tool on its first `tool_steps` steps of every run, then answers."""

    def __init__(self, tool_steps: int) -> None:
        super().__init__()
        self.tool_steps = tool_steps
        self.steps_in_run = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user":
            self.steps_in_run = 0
        self.steps_in_run += 1
        if self.steps_in_run <= self.tool_steps:
            call = ToolCall(id=f"c{self.steps_in_run}", name="look", arguments={})
            return ModelResponse(content="", tool_calls=[call], usage=Usage(prompt_tokens=1))
        return await super().complete(request)


class Look:
    spec = ToolSpec(name="look", description="look", parameters={"type": "object"})

    async def invoke(self, arguments: dict[str, object]) -> ToolResult:
        return ToolResult(call_id="", content="seen " * 100)


@SQL_JOURNAL_ONLY
async def test_a_refold_never_asks_the_summarizer_twice_for_messages_it_folded_in_this_run(
    env: LoopEnv,
) -> None:
    """A mid-run refold whose first chunk is stored and whose second fails leaves the prompt
    as it was; the next model step's refold must start from the stored chunk, not fold the
    same messages again (a call spent twice, and a second summary for a boundary that has
    one)."""
    history: list[Message] = []
    for i in range(8):
        history += [user(f"q{i} " * 30), assistant(f"a{i} " * 30)]
    tid = await env.thread(history)
    asked: list[list[int]] = []
    folded: set[int] = set()
    again: list[int] = []

    async def flaky(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        seqs = [m.seq or 0 for m in messages]
        asked.append(seqs)
        again.extend(s for s in seqs if s in folded)
        if len(asked) == 2:
            raise ProviderError("a blip")
        folded.update(seqs)
        return _through(messages)

    policy = summarizing_runs_window(
        summarize=flaky, token_threshold=600, keep_recent_runs=1, fold_max_tokens=300
    )
    loop = env.loop(ToolOnce(tool_steps=3), policy, tools={"look": Look()}, fold_calls=6)
    await _turn(loop, tid)
    assert len(asked) >= 3, f"the failed chunk is tried again by a later refold: {asked}"
    assert again == [], f"folded messages sent to the summarizer again: {asked}"
    assert (await summary_rows(env.store, tid))[-1][0] == 16, "the refold got through at last"


# --- replay ---------------------------------------------------------------------------------


class DiesOnce(Recording):
    """Records every chat prompt; the first chat call of the test fails."""

    died = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append([m.content for m in request.messages])
        if not self.died:
            self.died = True
            raise ProviderError("the chat model fell over")
        return await EchoModel.complete(self, request)


class Counting:
    """A summarizer answering per a script (the last answer repeats): a `HistorySummary`, an
    exception to raise, or None for a good summary through the chunk's last message."""

    def __init__(self, *answers: HistorySummary | BaseException | None) -> None:
        self.answers = list(answers)
        self.calls: list[list[int]] = []

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.calls.append([m.seq or 0 for m in messages])
        answer = self.answers[min(len(self.calls), len(self.answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer if answer is not None else _through(messages)


def _backlog(turns: int) -> list[Message]:
    return [m for i in range(turns) for m in (user(f"q{i:03d} " * 8), assistant(f"a{i:03d} " * 8))]


@pytest.mark.parametrize(
    "answers",
    [
        pytest.param((None,), id="deferred-backlog"),
        pytest.param((None, HistorySummary(text="", finish_reason="length")), id="then-truncated"),
        pytest.param((None, ProviderError("HTTP 503")), id="then-down"),
    ],
)
async def test_a_resumed_run_replays_its_partial_fold_and_sends_the_same_prompt(
    env: LoopEnv, answers: tuple[HistorySummary | BaseException | None, ...]
) -> None:
    """A run whose fold stopped part way (out of calls, or a chunk refused after one was
    stored), then failed at its chat call, is resumed: on the SQL journal and as a DBOS
    workflow alike, the summarizer is not asked again and the model gets the same degraded
    prompt, byte for byte (the omission note's count included)."""
    tid = await env.thread(_backlog(40))
    summarizer = Counting(*answers)
    model = DiesOnce()
    policy = window_history(
        max_messages=4, fold_messages=4, summarize=summarizer, fold_max_tokens=300
    )
    loop = env.loop(model, policy, fold_calls=2)
    run_id = rid()
    with pytest.raises(RunFailed):
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=run_id
        )
    asked = len(summarizer.calls)
    assert asked == 2
    result = await loop.resume(run_id)
    assert len(summarizer.calls) == asked, "the journaled folds are read back"
    first, second = model.prompts
    assert first == second
    report = result.report.summary
    assert report is not None and report.pending and report.omitted
    assert any(f"{report.omitted:,} earlier messages" in part for part in second)


@SQL_JOURNAL_ONLY
async def test_a_run_resumed_by_a_process_allowing_fewer_fold_calls_replays_its_journal(
    env: LoopEnv,
) -> None:
    """`AGENT_HISTORY_FOLD_CALLS_PER_TURN` lowered between a run's attempts (a deploy, or two
    processes configured differently; a run journaled by the code before the budget existed
    is the same case, with no limit): the journal holds more fold chunks than the resuming
    process would make. Replay must follow the journal, not the new budget."""
    tid = await env.thread(_backlog(40))
    summarizer = Counting(None)
    model = DiesOnce()
    policy = window_history(
        max_messages=4, fold_messages=4, summarize=summarizer, fold_max_tokens=300
    )
    run_id = rid()
    with pytest.raises(RunFailed):
        await env.loop(model, policy, fold_calls=4).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=run_id
        )
    assert len(summarizer.calls) == 4
    await env.loop(model, policy, fold_calls=2).resume(run_id)
    assert len(summarizer.calls) == 4, "no summarizer call on replay"
    first, second = model.prompts
    assert first == second


class ToolsThenDies(ToolOnce):
    """`ToolOnce` whose last chat call of the first attempt fails (after its tool steps), so
    the run is resumed with its refolds journaled."""

    def __init__(self, tool_steps: int) -> None:
        super().__init__(tool_steps)
        self.prompts: list[list[str]] = []
        self.died = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append([m.content for m in request.messages])
        if request.messages[-1].role == "user":
            self.steps_in_run = 0
        if not self.died and self.steps_in_run == self.tool_steps:
            self.died = True
            raise ProviderError("the chat model fell over")
        return await super().complete(request)


async def test_refolds_stay_within_the_call_budget_and_replay_byte_for_byte(
    env: LoopEnv,
) -> None:
    """The mid-run refold path: a run whose tool results push it past the threshold refolds
    before each later model call. With a summarizer that refuses one chunk and then answers,
    the run's summarizer calls (the turn's own fold included) stay within
    `fold_calls_per_turn`; resumed after its last chat call failed, the run (SQL journal or
    DBOS workflow) asks the summarizer nothing more and sends every chat prompt as before."""
    history: list[Message] = []
    for i in range(8):
        history += [user(f"q{i} " * 30), assistant(f"a{i} " * 30)]
    tid = await env.thread(history)
    summarizer = Counting(HistorySummary(text="  "), None)
    model = ToolsThenDies(tool_steps=4)
    policy = summarizing_runs_window(
        summarize=summarizer, token_threshold=600, keep_recent_runs=1, fold_max_tokens=300
    )
    loop = env.loop(model, policy, tools={"look": Look()}, fold_calls=3)
    run_id = rid()
    with pytest.raises(RunFailed):
        await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="go", run_id=run_id
        )
    asked = len(summarizer.calls)
    assert 1 < asked <= 3, summarizer.calls
    attempt = list(model.prompts)
    result = await loop.resume(run_id)
    assert len(summarizer.calls) == asked, "the journaled refolds are read back"
    replayed = model.prompts[len(attempt) :]
    assert replayed[0] == attempt[-1], "the failed call is sent again exactly as it was"
    assert any("<conversation_summary>" in part for part in replayed[0]), "a refold got in"
    assert not any("<conversation_summary>" in part for part in attempt[0])
    report = result.report.summary
    assert report is not None and report.calls == asked and report.rejected == 1
    assert report.rejected_reasons == ["empty"]


# --- refusals that repeat the same way every turn -------------------------------------------


@SQL_JOURNAL_ONLY
async def test_a_message_too_long_for_the_summarizer_does_not_stop_every_later_fold(
    env: LoopEnv,
) -> None:
    """A pasted document longer than the summarizer's context, in the middle of a thread.
    Halving a chunk cannot help a chunk of one message. The chat goes on (degraded), but no
    fold ever gets past that message: every later turn spends a call on the same refusal and
    the left-out count grows without end."""
    history = [user("q0"), assistant("a0"), user("the contract: " + "clause " * 3000)]
    history += [m for i in range(1, 8) for m in (assistant(f"a{i}"), user(f"q{i}"))]
    tid = await env.thread(history)

    async def small_context(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        if sum(len(m.content) for m in messages) > 4000:
            raise ProviderContextExceeded("request exceeds the available context size")
        return _through(messages)

    policy = window_history(max_messages=4, fold_messages=4, summarize=small_context)
    loop = env.loop(EchoModel(), policy, fold_calls=6)  # calls enough to halve down to one
    for i in range(6):
        await _turn(loop, tid, f"turn {i}")
    covered = [c for c, _ in await summary_rows(env.store, tid)]
    assert covered, "the messages before the document fold"
    assert covered[-1] > 3, f"the fold got past message 3: {covered}"
    thread = await env.store.get_thread(tid)
    assert thread is not None and thread.messages[2].content.count("clause") == 3000


@SQL_JOURNAL_ONLY
async def test_a_summary_too_long_to_restate_is_compressed_not_refused_forever(
    env: LoopEnv,
) -> None:
    """`summarize_with_model` asks for at most 0.8 of the cap in model tokens; a model that
    counts digit-heavy notes at 2x the estimate can restate only ~40% of a summary that
    `summary_fits` accepts. Past that, every fold it writes stops at its token cap: refused as
    `truncated`; the next attempt (after the backoff) compresses the summary first and folds
    into the shorter one, so the folds move on (`ChunkTask.compress_first`)."""
    tid = await env.thread(_backlog(10))
    tasks: list[str] = []

    async def bounded_output(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        tasks.append(ctx.fold_task)
        previous = ctx.summary.text if ctx.summary is not None else ""
        if ctx.fold_task == "compress":
            return HistorySummary(text="- compressed notes", usage=Usage(completion_tokens=3))
        if len(previous) > 400:
            return HistorySummary(text=previous[:400], finish_reason="length")
        return HistorySummary(text=previous + "\n- facts" + " 12345" * 60)

    policy = window_history(
        max_messages=4, fold_messages=4, summarize=bounded_output, fold_max_tokens=1200
    )
    loop = env.loop(EchoModel(), policy, fold_calls=2)
    for i in range(8):
        await _turn(loop, tid, f"turn {i}")
    reports = [c for c, _ in await summary_rows(env.store, tid)]
    assert "compress" in tasks, f"the summary was never compressed: {tasks}"
    assert reports[-1] >= 20, f"the folds kept moving: {reports}"


# --- the books ------------------------------------------------------------------------------


@SQL_JOURNAL_ONLY
async def test_a_summarizer_reporting_no_usage_is_booked_at_its_input_not_its_reservation(
    env: LoopEnv,
) -> None:
    """A custom summarizer may return no usage; the fold then books an estimate. Its prompt
    tokens are the chunk's estimated input (the report's `input_tokens`), as before the call
    budget: not the quota held for the call, which adds the summary's whole cap (4,000
    tokens by default) to every such call's bill."""
    tid = await env.thread([m for i in range(6) for m in (user(f"q{i}"), assistant(f"a{i}"))])

    async def no_usage(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        return HistorySummary(text=toy_summary("- through", messages))

    policy = window_history(max_messages=4, fold_messages=4, summarize=no_usage)
    result = await _turn(env.loop(EchoModel(), policy), tid)
    report = result.report  # type: ignore[attr-defined]
    assert report.summary is not None and report.summary.made
    (booked,) = [row for row in report.ledger if row.purpose == "history_summary"]
    assert booked.estimated
    assert booked.prompt_tokens == report.summary.input_tokens
