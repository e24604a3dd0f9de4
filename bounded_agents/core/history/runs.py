"""Runs windows: a thread's history kept or folded by whole runs (a user message and all the
agent did to answer it), so a question never loses its answer nor a tool call its result.

`bounded_agents.core.history` re-exports them all: import them from there.
"""

from __future__ import annotations

from collections.abc import Sequence

from bounded_agents.core.history.clearing import ToolResultClearing
from bounded_agents.core.history.windows import cut_at
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import (
    HistoryPolicyContext,
    HistorySelection,
    ReadBound,
    Summarizer,
    SummaryRenderer,
)
from bounded_agents.core.summary import (
    DEFAULT_FOLD_MAX_TOKENS,
    render_history_summary,
)
from bounded_agents.core.tokens import TokenEstimator, estimate_message_tokens
from bounded_agents.errors import ConfigError

DEFAULT_KEEP_RECENT_RUNS = 5
"""Runs a summarizing runs window keeps verbatim unless told otherwise (HasteKit's default)."""


def split_runs(messages: Sequence[Message]) -> list[list[Message]]:
    """Group messages into runs, oldest first, without reordering anything.

    A run is one user message and everything after it up to the next user message: what the
    agent did to answer it. Messages before the first user message (an imported greeting, or
    the tail of a run a summary boundary cut into) form a run of their own. `run_id` plays no
    part: imported history without run ids groups exactly like history the loop wrote, and the
    store finds where the n-th newest run starts with one index probe (the n-th newest user
    message).
    """
    runs: list[list[Message]] = []
    for m in messages:
        if not runs or m.role == "user":
            runs.append([m])
        else:
            runs[-1].append(m)
    return runs


def _keep_newest_runs(messages: Sequence[Message], n_runs: int) -> HistorySelection:
    runs = split_runs(messages)
    dropped = runs[: max(0, len(runs) - max(1, n_runs))]
    return cut_at(messages, sum(len(r) for r in dropped))


class RunsWindow:
    """Keeps the newest `max_runs` whole runs. Build it with `runs_window(...)`."""

    summarize: Summarizer | None = None

    def __init__(
        self, *, max_runs: int, clear_tool_results: ToolResultClearing | None = None
    ) -> None:
        if max_runs < 0:
            raise ConfigError(f"max_runs must be >= 0, got {max_runs!r}")
        self.max_runs = max_runs
        self.clear_tool_results = clear_tool_results
        self.read_bound = ReadBound(runs=max(1, max_runs))

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return _keep_newest_runs(messages, self.max_runs)

    def __repr__(self) -> str:
        return f"RunsWindow(max_runs={self.max_runs!r})"


def runs_window(max_runs: int, clear_tool_results: ToolResultClearing | None = None) -> RunsWindow:
    """Keep the newest `max_runs` runs whole; drop everything older (no summary).

    Runs are grouped by `split_runs`, and a run is never split: a question is never separated
    from its answer or a tool call from what followed it. The run in flight (the newest, which
    holds the current user message) counts as one of the `max_runs` and is never cut, so
    `max_runs=0` still keeps it. The store reads from the start of the `max_runs`-th newest run
    (one statement). Raises `ConfigError` for a negative `max_runs`.
    """
    return RunsWindow(max_runs=max_runs, clear_tool_results=clear_tool_results)


class SummarizingRunsWindow:
    """Keeps every unsummarized run until their tokens reach a threshold, then folds all but
    the newest runs into the rolling summary. Build it with `summarizing_runs_window(...)`."""

    summarize: Summarizer
    render_summary: SummaryRenderer
    refolds_mid_run = True
    """The threshold is checked again before every model call of a run, as HasteKit does: a
    run whose tool results reach it folds its older kept runs before its next call."""

    def __init__(
        self,
        *,
        summarize: Summarizer,
        token_threshold: int,
        keep_recent_runs: int = DEFAULT_KEEP_RECENT_RUNS,
        estimate: TokenEstimator = estimate_message_tokens,
        render_summary: SummaryRenderer = render_history_summary,
        fold_max_tokens: int = DEFAULT_FOLD_MAX_TOKENS,
        clear_tool_results: ToolResultClearing | None = None,
    ) -> None:
        if token_threshold < 1:
            raise ConfigError(f"token_threshold must be >= 1, got {token_threshold!r}")
        if fold_max_tokens < 1:
            raise ConfigError(f"fold_max_tokens must be >= 1, got {fold_max_tokens!r}")
        self.summarize = summarize
        self.token_threshold = token_threshold
        self.keep_recent_runs = max(1, keep_recent_runs)
        self.estimate = estimate
        self.render_summary = render_summary
        self.fold_max_tokens = fold_max_tokens
        self.clear_tool_results = clear_tool_results
        # Below the threshold every unsummarized message rides, so the read needs all of them up
        # to the threshold's worth of tokens, AND the newest runs whole however large they are.
        tokens = token_threshold if estimate is estimate_message_tokens else None
        self.read_bound: ReadBound | None = (
            ReadBound(tokens=tokens, runs=self.keep_recent_runs, widest=True)
            if tokens is not None
            else None
        )

    def history_tokens(self, messages: Sequence[Message], ctx: HistoryPolicyContext) -> int:
        """What the threshold is compared with. As HasteKit does, the provider's own count when
        the thread's last call reported one (`ctx.reported_tokens`: everything that call saw
        and wrote) plus the new message; else the estimate: the summary so far (as the prompt
        words it) plus every message it does not cover."""
        if ctx.reported_tokens is not None and messages:
            return ctx.reported_tokens + self.estimate(messages[-1])
        total = sum(self.estimate(m) for m in messages)
        if ctx.summary is not None:
            total += self.estimate(
                Message(role="system", content=self.render_summary(ctx.summary.text))
            )
        return total

    def refold_count(self, kept: Sequence[Message], history_tokens: int) -> int:
        """`RefoldingPolicy`: at the threshold, every kept run but the newest
        `keep_recent_runs` is folded before the run's next model call."""
        if history_tokens < self.token_threshold:
            return 0
        runs = split_runs(kept)
        return sum(len(run) for run in runs[: max(0, len(runs) - self.keep_recent_runs)])

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        if ctx.skipped == 0 and self.history_tokens(messages, ctx) < self.token_threshold:
            return cut_at(messages, 0)
        return _keep_newest_runs(messages, self.keep_recent_runs)

    def __repr__(self) -> str:
        return (
            f"SummarizingRunsWindow(token_threshold={self.token_threshold!r}, "
            f"keep_recent_runs={self.keep_recent_runs!r})"
        )


def summarizing_runs_window(
    summarize: Summarizer,
    token_threshold: int,
    keep_recent_runs: int = DEFAULT_KEEP_RECENT_RUNS,
    estimate: TokenEstimator = estimate_message_tokens,
    render_summary: SummaryRenderer = render_history_summary,
    fold_max_tokens: int = DEFAULT_FOLD_MAX_TOKENS,
    clear_tool_results: ToolResultClearing | None = None,
) -> SummarizingRunsWindow:
    """HasteKit's LLM summarization, rolling: keep everything the summary does not cover until
    its estimated tokens (with the summary's own) REACH `token_threshold` (`>=`); then keep the
    `keep_recent_runs` newest runs verbatim and fold everything older into the summary.

    Runs are never split (see `split_runs`). The run in flight counts as one of the recent runs,
    and `keep_recent_runs` below 1 is raised to 1 so it is never cut. The store reads the newest
    runs plus the newest messages within the threshold, never the thread. `estimate` must be
    pure. Raises `ConfigError` for a `token_threshold` below 1.
    """
    return SummarizingRunsWindow(
        summarize=summarize,
        token_threshold=token_threshold,
        keep_recent_runs=keep_recent_runs,
        estimate=estimate,
        render_summary=render_summary,
        fold_max_tokens=fold_max_tokens,
        clear_tool_results=clear_tool_results,
    )


__all__ = [
    "DEFAULT_KEEP_RECENT_RUNS",
    "RunsWindow",
    "SummarizingRunsWindow",
    "runs_window",
    "split_runs",
    "summarizing_runs_window",
]
