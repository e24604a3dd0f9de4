"""Whole turns through `module.run_turn` with EchoModel, with a window and without one.

Each measured turn is `/read_page <url>`: EchoModel asks for the tool, the tool returns
`TOOL_BYTES` characters, EchoModel answers. The turn therefore stores what the seed stores (a
user message, then an assistant answer carrying one 8 KB tool result), so the thread keeps its
shape however many turns the benchmark runs. It costs two model calls per turn.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import event

from bench.data import ACTOR, AGENT, TOOL_BYTES, tool_output
from bench.reads import window_bytes
from bench.stats import reps_within, summarize
from bench.trips import DriverClock
from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta
from bounded_agents.core.report import RunResult
from bounded_agents.module import AgentModule
from bounded_agents.providers.echo import EchoModel
from bounded_agents.registry import agent, tool
from bounded_agents.settings import Settings
from bounded_agents.store.sql import SqlAgentStore

TURN_CONTENT = "/read_page https://e.x/bench-page"
PAGE = tool_output(random.Random(8192), TOOL_BYTES)


class TimedModel:
    """EchoModel behind a stopwatch: `seconds` accumulates the time spent in complete/stream."""

    def __init__(self, inner: EchoModel) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        start = time.perf_counter()
        try:
            return await self.inner.complete(request)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        """Only the time spent inside EchoModel's generator counts, not the consumer's."""
        events = self.inner.stream(request)
        self.calls += 1
        while True:
            start = time.perf_counter()
            try:
                item = await anext(events)
            except StopAsyncIteration:
                self.seconds += time.perf_counter() - start
                return
            self.seconds += time.perf_counter() - start
            yield item


History = dict[str, Any]
"""A `history=` setting as a user writes it (`{"max_messages": 10, "summarize": True}`)."""


def window_spec(window: int | None) -> History | None:
    """`window` messages of history, or None: no history setting at all (the whole thread)."""
    return {"max_messages": window} if window is not None else None


def bench_agent(history: History | None) -> type:
    """The benchmark's agent: one tool returning `TOOL_BYTES` characters, with `history` as
    given (None: no history setting, the whole thread is read)."""

    @agent(name=AGENT, system_prompt="You answer from the pages you read.", history=history)
    class BenchAgent:
        @tool
        async def read_page(self, url: str) -> str:
            """Read a web page."""
            return PAGE

    return BenchAgent


def bench_settings(fold_calls_per_turn: int = 2) -> Settings:
    """Settings that leave every history choice to the agent: no module-wide window, quota or
    keys, whatever the environment says; `fold_calls_per_turn` summarizer calls a turn."""
    return Settings(
        migrate_on_start=False,
        history_max_messages=None,
        history_max_tokens=None,
        token_quota=None,
        api_keys=None,
        history_fold_calls_per_turn=fold_calls_per_turn,
    )


def search_probe_settings(searches: int, fold_calls_per_turn: int = 2) -> Settings:
    """`bench_settings` for a recall probe that asks one `search_history` per fact in a single
    turn (what each search returns is what is measured), past the tool budget's default caps
    (4 searches a step, 12 a turn, 64 KiB of results a step): room for all of them, at most
    8 KiB each."""
    from bounded_agents.core.search_results import MAX_RESULT_BYTES

    room = max(1, searches) * MAX_RESULT_BYTES
    return bench_settings(fold_calls_per_turn).model_copy(
        update={
            "search_calls_per_step": max(1, searches),
            "search_calls_per_turn": max(1, searches),
            "tool_result_bytes_per_step": room,
            "tool_result_bytes_per_turn": room,
        }
    )


def bench_module(
    store: SqlAgentStore,
    history: History | None,
    model: TimedModel,
    fold_calls_per_turn: int = 2,
) -> AgentModule:
    settings = bench_settings(fold_calls_per_turn)
    return AgentModule.for_root(
        model=model, store=store, agents=[bench_agent(history)], settings=settings
    )


class TurnSeries:
    """Turns in one thread through one module; each `once()` records one measured turn.

    Per turn: wall time, model time (the TimedModel), loop overhead (wall minus model), and the
    driver calls and time spent awaiting the driver (`clock`, shared by the whole store); from
    the run report: rows and bytes read, journal bytes in total and of `load:thread`.
    """

    def __init__(
        self, store: SqlAgentStore, thread_id: str, window: int | None, clock: DriverClock
    ) -> None:
        self.store = store
        self.thread_id = thread_id
        self.window = window
        self.clock = clock
        self.model = TimedModel(EchoModel())
        self.module = bench_module(store, window_spec(window), self.model)
        self.warmup = 0
        self.samples: dict[str, list[float]] = {
            k: [] for k in ("time", "model", "overhead", "driver", "python")
        }
        self.driver_calls: list[int] = []
        self.transactions: list[int] = []
        self.rows: list[int] = []
        self.read: list[int] = []
        self.last: RunResult | None = None
        self.indexed = False

    async def warm(self, turns: int) -> None:
        for _ in range(turns):
            await self._turn()
        self.warmup += turns

    async def once(self) -> None:
        self.model.seconds = 0.0
        self.clock.reset()
        self.clock.enabled = True
        commits = [0]

        def on_commit(_conn: Any) -> None:
            commits[0] += 1

        event.listen(self.store.engine.sync_engine, "commit", on_commit)
        try:
            start = time.perf_counter()
            result = await self._turn()
            seconds = time.perf_counter() - start
        finally:
            self.clock.enabled = False
            event.remove(self.store.engine.sync_engine, "commit", on_commit)
        self.transactions.append(commits[0])
        overhead = seconds - self.model.seconds
        self.samples["time"].append(seconds)
        self.samples["model"].append(self.model.seconds)
        self.samples["overhead"].append(overhead)
        self.samples["driver"].append(self.clock.seconds)
        self.samples["python"].append(overhead - self.clock.seconds)
        self.driver_calls.append(self.clock.calls)
        self.rows.append(result.report.rows_read)
        self.read.append(result.report.bytes_read)
        self.last = result

    async def _turn(self) -> RunResult:
        if not self.indexed:
            # What the module's lifespan does at start-up: the bench agent does not search, so
            # its threads stop feeding the search index (issue 37).
            await self.module.persistence.index_search(self.module.loop.agents)
            self.indexed = True
        return await self.module.run_turn(
            agent=AGENT, thread_id=self.thread_id, actor_id=ACTOR, content=TURN_CONTENT
        )

    async def result(self, compare_window: int) -> dict[str, Any]:
        if self.last is None:
            raise RuntimeError("no measured turn")
        report = self.last.report
        # The window the last turn's read saw: the newest messages before its answer.
        own = await window_bytes(self.store, self.thread_id, compare_window, self.last.message.seq)
        return {
            **{k: summarize(v) for k, v in self.samples.items()},
            "driver_calls": sorted(self.driver_calls)[len(self.driver_calls) // 2],
            "transactions": sorted(self.transactions)[len(self.transactions) // 2],
            "model_calls": len(report.model_calls),
            "read_bound": report.read_bound,
            "rows_read": report.rows_read,
            "rows_read_range": [min(self.rows), max(self.rows)],
            "bytes_read": report.bytes_read,
            "bytes_read_range": [min(self.read), max(self.read)],
            "window_bytes": own,
            "journal_bytes": sum(report.journal_bytes.values()),
            "load_thread_bytes": report.journal_bytes.get("load:thread", 0),
            "journal_steps": dict(report.journal_bytes),
            "warmup": self.warmup,
        }


async def window_turns(
    store: SqlAgentStore,
    threads: dict[int, str],
    clock: DriverClock,
    *,
    window: int,
    reps: int,
    warmup: int,
) -> dict[int, dict[str, Any]]:
    """Turns with the window, interleaved across thread lengths (one turn per length per round,
    the starting length rotating), so machine noise hits every length alike."""
    series = {n: TurnSeries(store, tid, window, clock) for n, tid in threads.items()}
    for s in series.values():
        await s.warm(warmup)
    order = list(series)
    gc.collect()
    for i in range(reps):
        k = i % len(order)
        for n in order[k:] + order[:k]:
            await series[n].once()
    return {n: await s.result(window) for n, s in series.items()}


async def nowindow_turns(
    store: SqlAgentStore,
    thread_id: str,
    clock: DriverClock,
    *,
    reps: int,
    budget_s: float,
    cap: int | None,
    warmup: int,
    window: int,
    window_warmup: int,
) -> dict[str, Any]:
    """Turns without a window in one thread, each paired with a windowed turn in the same thread
    right beside it (order alternating), so `nowin/win` compares neighbours, not figures taken
    minutes apart on a noisy machine. The first no-window warm-up turn tells how long one
    takes; as many reps follow as `budget_s` allows (at least 3, at most `reps`, `cap`)."""
    whole = TurnSeries(store, thread_id, None, clock)
    paired = TurnSeries(store, thread_id, window, clock)
    start = time.perf_counter()
    await whole.warm(1)
    one = time.perf_counter() - start
    await whole.warm(max(0, warmup - 1))
    await paired.warm(window_warmup)
    n = reps_within(one, reps, budget_s, minimum=3)
    if cap is not None:
        n = min(n, cap)
    for i in range(n):
        gc.collect()
        pair = [whole, paired]
        for s in pair if i % 2 == 0 else reversed(pair):
            await s.once()
    out = await whole.result(window)
    out["capped"] = n < reps
    out["paired_window"] = {k: summarize(v) for k, v in paired.samples.items()}
    return out
