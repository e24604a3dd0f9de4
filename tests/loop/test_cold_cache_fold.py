"""Folding when the cache is cold anyway, through the loop on SQLite and PostgreSQL.

A summarizing window of 6 messages folding 6 at a time reaches its high mark at 12
unsummarized messages; half a batch below it is 9. Turn `i` reads `2i + 1` messages (its own
user message included), so turn 4 is the first within half a batch and turn 6 the first at
the mark. A thread idle past the provider's cache lifetime folds at turn 4 instead of turn 6;
the clock is scripted (the real time plus the idle gap a test adds before a turn)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from bounded_agents.core.history import HistoryConfig, policy_from_config, window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySummary,
    ModelProvider,
    Usage,
)
from bounded_agents.errors import ProviderError, RunFailed
from bounded_agents.providers.echo import EchoModel
from bounded_agents.testing import ScriptedProvider, reply
from tests.factories import summary_rows
from tests.loop.conftest import SQL_JOURNAL_ONLY, CountingPolicy, CountingStore, LoopEnv
from tests.store.test_store import captured_sql

TTL = 300.0


@dataclass
class ScriptedClock:
    """The real time, plus the idle gap the test puts before the next turn."""

    gap: float = 0.0

    def __call__(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.gap)


@dataclass
class Summarizer:
    folds: list[list[int]] = field(default_factory=list)

    async def __call__(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
        self.folds.append([m.seq or 0 for m in messages])
        return HistorySummary(
            text=f"summary through {messages[-1].seq}",
            usage=Usage(prompt_tokens=10, completion_tokens=3),
        )


def _loop(
    env: LoopEnv,
    policy: HistoryPolicy,
    clock: ScriptedClock,
    *,
    ttl: float = TTL,
    model: ModelProvider | None = None,
    store: object = None,
) -> AgentLoop:
    definition = AgentDefinition(name="helper", system_prompt="You help.", policy=policy)
    return AgentLoop(
        store=store or env.store,  # type: ignore[arg-type]
        runtime=env.journal,
        ledger=env.ledger,
        model=model or EchoModel(),
        agents={"helper": definition},
        cache_ttl_seconds=ttl,
        clock=clock,
    )


async def _turns(loop: AgentLoop, tid: str, gaps: Sequence[float], clock: ScriptedClock) -> None:
    for i, gap in enumerate(gaps):
        clock.gap = gap
        await loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content=f"turn {i}",
            run_id=str(uuid.uuid4()),
        )


def _policy(summarizer: Summarizer) -> HistoryPolicy:
    return window_history(max_messages=6, fold_messages=6, summarize=summarizer)


async def test_a_thread_idle_past_the_ttl_within_half_a_batch_folds_now(env: LoopEnv) -> None:
    summarizer, clock = Summarizer(), ScriptedClock()
    loop = _loop(env, _policy(summarizer), clock)
    tid = await env.thread()
    await _turns(loop, tid, [0, 0, 0, 0], clock)
    assert summarizer.folds == [], "below half a batch from the mark, hot: nothing folds"
    await _turns(loop, tid, [TTL + 100], clock)  # turn 4: 9 unsummarized messages, cold
    assert summarizer.folds == [[1, 2, 3]], "cut back to the window of 6 at once"
    assert [seq for seq, _ in await summary_rows(env.store, tid)] == [3]
    # Turn 6, where a hot thread would have folded, extends the folded prompt instead.
    await _turns(loop, tid, [0, 0], clock)
    assert len(summarizer.folds) == 1


async def test_a_thread_idle_past_the_ttl_far_from_the_mark_does_not_fold(env: LoopEnv) -> None:
    summarizer, clock = Summarizer(), ScriptedClock()
    loop = _loop(env, _policy(summarizer), clock)
    tid = await env.thread()
    await _turns(loop, tid, [0, 0, 0, 10 * TTL], clock)  # turn 3: 7 messages, 2 short of 9
    assert summarizer.folds == []


async def test_a_hot_thread_at_the_same_point_does_not_fold(env: LoopEnv) -> None:
    summarizer, clock = Summarizer(), ScriptedClock()
    loop = _loop(env, _policy(summarizer), clock)
    tid = await env.thread()
    await _turns(loop, tid, [0, 0, 0, 0, TTL / 2, 0], clock)  # idle under the TTL at turn 4
    assert summarizer.folds == []
    await _turns(loop, tid, [0], clock)  # turn 6: 13 messages, past the mark
    assert summarizer.folds == [[1, 2, 3, 4, 5, 6, 7]]


async def test_a_ttl_of_zero_never_folds_early(env: LoopEnv) -> None:
    summarizer, clock = Summarizer(), ScriptedClock()
    loop = _loop(env, _policy(summarizer), clock, ttl=0)
    tid = await env.thread()
    await _turns(loop, tid, [0, 0, 0, 0, 86_400.0, 86_400.0], clock)
    assert summarizer.folds == []


async def test_a_replay_after_a_crash_past_the_fold_decision_keeps_its_selection(
    env: LoopEnv,
) -> None:
    """The idle figure is taken inside `load:thread`: a resumed run, its clock now hot, reads
    the cold turn's selection and fold back instead of selecting again."""
    summarizer, clock = Summarizer(), ScriptedClock()
    tid = await env.thread()
    await _turns(_loop(env, _policy(summarizer), clock), tid, [0, 0, 0, 0], clock)
    failing = ScriptedProvider([ProviderError("provider down")])
    run_id = str(uuid.uuid4())
    clock.gap = TTL + 100
    with pytest.raises(RunFailed):
        await _loop(env, _policy(summarizer), clock, model=failing).run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="back", run_id=run_id
        )
    load = json.loads(await env.step_payload(run_id, "load:thread"))
    assert load["fold"]["through"] == 3, "the cold turn decided to fold"
    assert summarizer.folds == [[1, 2, 3]]

    clock.gap = 0.0  # the process comes back at once: the thread is hot now
    store = CountingStore(env.store)
    policy = CountingPolicy(_policy(summarizer))
    answering = ScriptedProvider([reply("answer")])
    await _loop(env, policy, clock, model=answering, store=store).resume(run_id)
    assert policy.selects == 0 and store.bounded_reads == [], "nothing read or selected again"
    assert answering.calls[0].model_dump_json() == failing.calls[0].model_dump_json()
    assert summarizer.folds == [[1, 2, 3]], "the fold is not made twice"
    assert json.loads(await env.step_payload(run_id, "load:thread")) == load


@pytest.mark.parametrize(
    ("own_ttl", "loop_ttl", "gap", "folds"),
    [
        (3_600.0, TTL, TTL + 100, 0),  # the agent's provider keeps its cache an hour
        (60.0, 0.0, 100.0, 1),  # the module's is off, the agent's lives a minute
        (0.0, TTL, 10 * TTL, 0),  # the agent turns it off
    ],
)
async def test_a_history_config_ttl_overrides_the_modules(
    env: LoopEnv, own_ttl: float, loop_ttl: float, gap: float, folds: int
) -> None:
    summarizer, clock = Summarizer(), ScriptedClock()
    config = HistoryConfig(
        max_messages=6, fold_messages=6, summarize=summarizer, cache_ttl_seconds=own_ttl
    )
    loop = _loop(env, policy_from_config(config, None), clock, ttl=loop_ttl)
    tid = await env.thread()
    await _turns(loop, tid, [0, 0, 0, 0, gap], clock)
    assert len(summarizer.folds) == folds


async def test_the_window_preview_shows_the_fold_a_turn_would_make_now(env: LoopEnv) -> None:
    """`GET .../window` reads the way a turn reads: on a thread idle past the TTL, within half
    a batch once the next message is counted, the preview says the next turn folds."""
    summarizer, clock = Summarizer(), ScriptedClock()
    loop = _loop(env, _policy(summarizer), clock)
    tid = await env.thread()
    await _turns(loop, tid, [0, 0, 0, 0], clock)  # 8 messages: the next turn reads 9
    assert (await loop.preview(tid, "alice")).next_fold is None, "hot"
    clock.gap = TTL + 100
    cold = await loop.preview(tid, "alice")
    assert cold.next_fold is not None and cold.next_fold.through_seq == 3
    assert summarizer.folds == [], "a preview folds nothing"


@SQL_JOURNAL_ONLY
async def test_the_idle_time_costs_the_turn_no_statement(env: LoopEnv) -> None:
    """It rides on the turn's one bounded read: a turn with the TTL on sends exactly the
    statements it sends with it off, among them one read of the thread."""
    counts = []
    for ttl in (TTL, 0.0):
        summarizer, clock = Summarizer(), ScriptedClock()
        loop = _loop(env, _policy(summarizer), clock, ttl=ttl)
        tid = await env.thread()
        await _turns(loop, tid, [0, 0, 0], clock)
        with captured_sql(env.store) as statements:
            await _turns(loop, tid, [TTL + 100], clock)  # cold, 7 messages: no fold either way
        assert summarizer.folds == []
        reads = [s for s in statements if " AS page " in s and "previous_at" in s]
        assert len(reads) == 1, "one turn read, the idle time in it"
        counts.append(len(statements))
    assert counts[0] == counts[1]
