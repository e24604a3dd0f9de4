"""History policies: which stored messages of a thread a turn sends to the model.

A policy's `select(messages, ctx)` splits what it is handed into what the turn keeps and what it
drops. The loop calls it inside the `load:thread` checkpoint and journals its result, so `select`
must be PURE (no clock, no flags, no I/O): a resumed run has to window exactly as the first
attempt did. Anything non-deterministic belongs in `summarize`, which runs in checkpoints of its
own. The SPI types (`HistoryPolicy`, `HistorySelection`, `HistorySummary`, ...) live in
`bounded_agents.core.ports` and are re-exported here.

Every built-in policy reads a bounded number of rows per turn (`read_bound`), whatever the
thread's length:

- `window_history`: the newest `max_messages` and/or the newest messages that fit `max_tokens`.
- `runs_window`: the newest `max_runs` runs.
- A SUMMARIZING policy (`window_history(summarize=...)`, `summarizing_runs_window`) is rolling:
  the thread keeps one summary whose boundary (`covers_through_seq`) only moves forward; a turn
  reads that summary plus the messages after it, and folds a batch into the next summary only
  when the unsummarized part passes a high mark (hysteresis: between folds every prompt extends
  the previous one). Nothing is ever both out of the prompt and out of the summary.

`HistoryConfig` is the declarative form; `resolve_policy` applies the precedence agent ->
module `history_policy` -> module `history`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bounded_agents.core.messages import Message
from bounded_agents.core.ports import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    ModelProvider,
    ReadBound,
    Summarizer,
    SummaryRenderer,
)
from bounded_agents.core.summary import (
    DEFAULT_FOLD_MAX_TOKENS,
    render_history_summary,
    summarize_with_model,
)
from bounded_agents.core.tokens import TokenEstimator, estimate_message_tokens
from bounded_agents.errors import ConfigError

DEFAULT_WINDOW_MESSAGES = 40
"""What `window_history()` keeps when given no limit at all, as Adonis's sliding window does."""
DEFAULT_FOLD_MESSAGES = 4
"""The smallest default fold batch: two turns' worth, so even a small summarizing window folds
every other turn at most, not on every turn."""
DEFAULT_KEEP_RECENT_RUNS = 5
"""Runs a summarizing runs window keeps verbatim unless told otherwise (HasteKit's default)."""


# --- the built-in policies -----------------------------------------------------------------


def _cut(messages: Sequence[Message], cut: int) -> HistorySelection:
    return HistorySelection(keep=list(messages[cut:]), drop=list(messages[:cut]))


def _token_fit(messages: Sequence[Message], budget: int, estimate: TokenEstimator) -> int:
    """How many of the newest messages fit `budget`, walking back from the newest; the walk
    stops at the FIRST message that would exceed it (the kept part stays contiguous)."""
    total = fits = 0
    for m in reversed(messages):
        cost = estimate(m)
        if total + cost > budget:
            break
        total += cost
        fits += 1
    return fits


class WindowHistory:
    """Keeps the newest messages that fit a message count and/or a token budget; with a
    summarizer, folds the rest into a rolling summary; with a low mark (`min_messages`,
    `min_tokens`) and no summarizer, cuts in steps (hysteresis). Build it with
    `window_history(...)`."""

    count_limit: int | None
    """Most messages kept (the newest always rides, so 0 behaves like 1). Summarizing, the
    count the window is cut back to when it folds."""
    token_limit: int | None
    """Token budget for the kept messages, by `estimate`."""
    min_messages: int | None
    """Not summarizing: the low mark of a hysteresis window, whose high mark is `count_limit`."""
    min_tokens: int | None
    """Not summarizing: the low mark of a token hysteresis window (high mark `token_limit`)."""
    fold_messages: int
    """Summarizing only: unsummarized messages past `count_limit` that trigger a fold."""
    fold_tokens: int
    """Summarizing only: unsummarized tokens past `token_limit` that trigger a fold."""
    estimate: TokenEstimator
    summarize: Summarizer | None
    """Folds what `select` dropped into the rolling summary; None drops it."""
    render_summary: SummaryRenderer
    read_bound: ReadBound | None
    """What the store reads per turn (see `window_history`)."""
    fold_max_tokens: int
    """Summarizer input per call at most (the summary so far plus a chunk of messages)."""

    def __init__(
        self,
        *,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        estimate: TokenEstimator = estimate_message_tokens,
        summarize: Summarizer | None = None,
        render_summary: SummaryRenderer = render_history_summary,
        fold_messages: int | None = None,
        fold_tokens: int | None = None,
        fold_max_tokens: int = DEFAULT_FOLD_MAX_TOKENS,
        min_messages: int | None = None,
        min_tokens: int | None = None,
    ) -> None:
        for name, value in (
            ("max_messages", max_messages),
            ("max_tokens", max_tokens),
            ("fold_messages", fold_messages),
            ("fold_tokens", fold_tokens),
        ):
            if value is not None and value < 0:
                raise ConfigError(f"{name} must be >= 0, got {value!r}")
        if fold_max_tokens < 1:
            raise ConfigError(f"fold_max_tokens must be >= 1, got {fold_max_tokens!r}")
        _check_marks("messages", max_messages, min_messages)
        _check_marks("tokens", max_tokens, min_tokens)
        if summarize is not None:
            # One rhythm for both knobs: the high mark is `max_*`, the fold cuts back to `min_*`.
            if min_messages is not None:
                assert max_messages is not None  # _check_marks
                fold_messages = _fold_from_marks(
                    "messages", max_messages, min_messages, fold_messages
                )
                max_messages, min_messages = min_messages, None
            if min_tokens is not None:
                assert max_tokens is not None
                fold_tokens = _fold_from_marks("tokens", max_tokens, min_tokens, fold_tokens)
                max_tokens, min_tokens = min_tokens, None
        elif min_tokens is not None and estimate is not estimate_message_tokens:
            raise ConfigError(
                "min_tokens: a token hysteresis window cuts by the running token count the "
                "store keeps, which only the default estimator (estimate_message_tokens) gives"
            )
        self.count_limit = max_messages
        self.token_limit = max_tokens
        self.min_messages = min_messages
        self.min_tokens = min_tokens
        self.estimate = estimate
        self.summarize = summarize
        self.render_summary = render_summary
        self.fold_max_tokens = fold_max_tokens
        self.fold_messages = (
            fold_messages
            if fold_messages is not None
            else max(DEFAULT_FOLD_MESSAGES, (max_messages or 0) // 2)
        )
        self.fold_tokens = (
            fold_tokens if fold_tokens is not None else max(1, (max_tokens or 0) // 2)
        )
        self.read_bound = self._read_bound()

    def _read_bound(self) -> ReadBound | None:
        # Summarizing, the unsummarized part may grow to the high mark before it folds, so the
        # read takes up to a fold batch more than the window. A token budget reaches the store
        # only with the estimator the store itself stores per message.
        extra_m = self.fold_messages if self.summarize is not None else 0
        extra_t = self.fold_tokens if self.summarize is not None else 0
        messages = None if self.count_limit is None else max(1, self.count_limit) + extra_m
        tokens = None
        if self.token_limit is not None and self.estimate is estimate_message_tokens:
            tokens = self.token_limit + extra_t
        if messages is None and tokens is None:
            return None
        return ReadBound(messages=messages, tokens=tokens)

    def window(self, messages: Sequence[Message]) -> HistorySelection:
        """The plain sliding window: the larger of the count cut and the token cut, clamped so
        the newest rides. What `select` does without a summarizer."""
        n = len(messages)
        if n == 0:
            return HistorySelection(keep=[], drop=[])
        cut = 0
        if self.count_limit is not None:
            cut = max(cut, n - self.count_limit)
        if self.token_limit is not None:
            cut = max(cut, n - _token_fit(messages, self.token_limit, self.estimate))
        return _cut(messages, min(cut, n - 1))

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        if self.summarize is None:
            if self.min_messages is None and self.min_tokens is None:
                return self.window(messages)
            return self.hysteresis(messages, ctx)
        # Rolling: `messages` is what the summary does not cover. Below the high mark all of it
        # rides (it is in no summary yet); past it, the window is cut and the rest is folded.
        if ctx.skipped > 0 or self._past_high_mark(messages):
            return self.window(messages)
        return _cut(messages, 0)

    def hysteresis(
        self, messages: Sequence[Message], ctx: HistoryPolicyContext
    ) -> HistorySelection:
        """The window cut in steps: where it starts is a function of the thread's length alone
        (`seq`, or the running token count), so it stays put turn after turn and every prompt
        extends the previous one until the kept part would reach the high mark; then it moves
        by one step (high - low) and starts again at the low mark. The cut then moves forward
        to the next run's start, so a run is never split. `ctx.skipped` and `ctx.tokens_before`
        say where `messages` start in the thread, so a bounded page cuts where the whole thread
        would. A limit without a low mark still cuts as the sliding window does."""
        n = len(messages)
        if n == 0:
            return HistorySelection(keep=[], drop=[])
        cut = 0
        if self.min_messages is not None and self.count_limit is not None:
            step = self.count_limit - self.min_messages
            cut = _grid(ctx.skipped + n, self.min_messages, step) - ctx.skipped
        elif self.count_limit is not None:
            cut = n - self.count_limit
        if self.min_tokens is not None and self.token_limit is not None:
            starts = list(itertools.accumulate((self.estimate(m) for m in messages), initial=0))
            total = ctx.tokens_before + starts[-1]
            grid = _grid(total, self.min_tokens, self.token_limit - self.min_tokens)
            first = next(
                (i for i, s in enumerate(starts[:-1]) if ctx.tokens_before + s >= grid), n - 1
            )
            cut = max(cut, first)
        elif self.token_limit is not None:
            cut = max(cut, n - _token_fit(messages, self.token_limit, self.estimate))
        cut = min(max(cut, 0), n - 1)
        while cut < n - 1 and messages[cut].role != "user":
            cut += 1
        return _cut(messages, cut)

    def _past_high_mark(self, messages: Sequence[Message]) -> bool:
        if self.count_limit is not None and len(messages) >= (
            max(1, self.count_limit) + self.fold_messages
        ):
            return True
        if self.token_limit is not None:
            total = sum(self.estimate(m) for m in messages)
            return total >= self.token_limit + self.fold_tokens
        return False

    def __repr__(self) -> str:
        marks = "".join(
            f", {name}={value!r}"
            for name, value in (
                ("min_messages", self.min_messages),
                ("min_tokens", self.min_tokens),
            )
            if value is not None
        )
        return (
            f"WindowHistory(max_messages={self.count_limit!r}, max_tokens={self.token_limit!r}"
            f"{marks}, summarize={self.summarize!r})"
        )


def _grid(length: int, low: int, step: int) -> int:
    """Where a hysteresis window starts: the newest multiple of `step` at or below
    `length - low` (0 while the thread is shorter than the low mark). What is kept,
    `length - grid`, is then between `low` and `low + step - 1`."""
    return max(0, (length - low) // step * step)


def _check_marks(unit: str, high: int | None, low: int | None) -> None:
    if low is None:
        return
    if low < 1:
        raise ConfigError(f"min_{unit} must be >= 1, got {low!r}")
    if high is None:
        raise ConfigError(f"min_{unit}: needs max_{unit} (the high mark)")
    if low >= high:
        raise ConfigError(
            f"min_{unit}: the low mark must be below max_{unit} ({high!r}), got {low!r}"
        )


def _fold_from_marks(unit: str, high: int, low: int, fold: int | None) -> int:
    """A summarizing window given both marks folds `high - low` at a time; a `fold_*` that
    says otherwise is refused rather than silently losing to one of them."""
    if fold is not None and fold != high - low:
        raise ConfigError(
            f"fold_{unit}: with min_{unit} the fold is max_{unit} - min_{unit} ({high - low}), "
            f"got {fold!r}; give one of fold_{unit} and min_{unit}"
        )
    return high - low


_UNSET: Any = object()


def window_history(
    max_messages: int | None = _UNSET,
    max_tokens: int | None = None,
    estimate: TokenEstimator = estimate_message_tokens,
    summarize: Summarizer | None = None,
    render_summary: SummaryRenderer = render_history_summary,
    *,
    fold_messages: int | None = None,
    fold_tokens: int | None = None,
    fold_max_tokens: int = DEFAULT_FOLD_MAX_TOKENS,
    min_messages: int | None = None,
    min_tokens: int | None = None,
) -> WindowHistory:
    """The built-in window: keep the newest messages that fit; the rest is dropped or folded.

    - `max_messages`: the cut by count is `len - max_messages` (never below 0). Called with no
      limit at all, `window_history()` keeps `DEFAULT_WINDOW_MESSAGES` (40); pass
      `max_messages=None` with `max_tokens` for a token-only window.
    - `max_tokens`: walking from the newest message backwards, the walk stops at the FIRST
      message that would push the total over the budget (it does not skip it and look further
      back: the kept part stays contiguous).
    - With both, whichever cuts more wins. The newest message always rides (a turn with
      nothing to answer is worse than a turn over budget).

    The store reads only what the window can keep (`read_bound`): the newest `max_messages`,
    and the newest messages within `max_tokens` by the stored estimate (a custom `estimate`
    cannot be computed by the store, so then only the count bounds the read).

    With `summarize` (`summarize_with_model(model)` is the built-in) the window is ROLLING:
    every message the thread's summary does not cover rides verbatim until that part reaches
    a high mark, `max_messages + fold_messages` messages or `max_tokens + fold_tokens` tokens
    (defaults: half the window, and `fold_messages` at least 4, two turns). Then the window is
    cut back to `max_messages`/`max_tokens` and what it left out is folded into the summary
    with the summary so far, in calls of at most `fold_max_tokens` input each. So a fold
    happens every few turns, the prompt between folds extends the previous one, and the
    summarizer's input per fold is O(fold batch), never O(thread). `min_messages` /
    `min_tokens` say the same in marks: `max_*` is the high mark and the fold cuts back to
    `min_*` (so `fold_* = max_* - min_*`; giving a different `fold_*` as well is refused).

    Without `summarize`, `min_messages` (and/or `min_tokens`) make the window HYSTERESIS: a
    sliding window moves its start every turn, so no two prompts share more than the system
    prompt and a provider's prompt cache never hits. This one keeps its start while the kept
    part grows from the low mark towards the high mark (`max_*`), then moves it by one step
    (`max_* - min_*`), back to the low mark, at the start of a run (never inside one). The
    start is the newest multiple of the step at or below `len(thread) - min_*` (in messages,
    or in the thread's running token count), a function of the stored thread only: replay and
    the bounded read (at most the high mark) cut exactly where the in-memory policy does.
    Between two cuts each prompt extends the previous one; it sends `min_*` to `max_* - 1`,
    so on average about halfway between the marks. `min_tokens` needs the default estimator.
    Raises `ConfigError` for a negative limit, or a low mark without a high one or not below it.
    """
    if max_messages is _UNSET:
        max_messages = DEFAULT_WINDOW_MESSAGES if max_tokens is None else None
    return WindowHistory(
        max_messages=max_messages,
        max_tokens=max_tokens,
        estimate=estimate,
        summarize=summarize,
        render_summary=render_summary,
        fold_messages=fold_messages,
        fold_tokens=fold_tokens,
        fold_max_tokens=fold_max_tokens,
        min_messages=min_messages,
        min_tokens=min_tokens,
    )


def latest_message_only() -> WindowHistory:
    """What `HistoryConfig(enabled=False)` builds: only the newest message (the current user
    message) is sent, and the store reads that single row."""
    return window_history(max_messages=1)


class WholeThread:
    """No ceiling: `select` keeps every message, and the whole thread is read."""

    read_bound: ReadBound | None = None
    summarize: Summarizer | None = None

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=list(messages), drop=[])

    def __repr__(self) -> str:
        return "WholeThread()"


def whole_thread() -> WholeThread:
    """The policy when nothing is configured anywhere: the whole thread is sent."""
    return WholeThread()


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
    return _cut(messages, sum(len(r) for r in dropped))


class RunsWindow:
    """Keeps the newest `max_runs` whole runs. Build it with `runs_window(...)`."""

    summarize: Summarizer | None = None

    def __init__(self, *, max_runs: int) -> None:
        if max_runs < 0:
            raise ConfigError(f"max_runs must be >= 0, got {max_runs!r}")
        self.max_runs = max_runs
        self.read_bound = ReadBound(runs=max(1, max_runs))

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return _keep_newest_runs(messages, self.max_runs)

    def __repr__(self) -> str:
        return f"RunsWindow(max_runs={self.max_runs!r})"


def runs_window(max_runs: int) -> RunsWindow:
    """Keep the newest `max_runs` runs whole; drop everything older (no summary).

    Runs are grouped by `split_runs`, and a run is never split: a question is never separated
    from its answer or a tool call from what followed it. The run in flight (the newest, which
    holds the current user message) counts as one of the `max_runs` and is never cut, so
    `max_runs=0` still keeps it. The store reads from the start of the `max_runs`-th newest run
    (one statement). Raises `ConfigError` for a negative `max_runs`.
    """
    return RunsWindow(max_runs=max_runs)


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
            return _cut(messages, 0)
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
    )


# --- declarative configuration -------------------------------------------------------------


class HistoryConfig(BaseModel):
    """The declarative history `history=` takes (a plain dict is accepted too, see `coerce`),
    with HasteKit's configuration surface. One strategy per config:

    - a window: `max_messages` and/or `max_tokens` (with no limit at all, 40 messages);
      `min_messages`/`min_tokens` make it a hysteresis window (`max_*` the high mark);
      `summarize` makes it a rolling summarizing window (`fold_messages`, `fold_tokens`, or
      `min_*`: then the fold cuts back from `max_*` to `min_*`);
    - a runs window: `runs` (whole runs, nothing summarized);
    - summarized runs: `summary_token_threshold` with `summarize` (and `keep_recent_runs`);
    - `enabled=False`: only the current user message.

    Invalid values, unknown keys and strategies mixed in one config are a `ConfigError` naming
    the key (`coerce` turns pydantic's error into one).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """False sends only the current user message: the model sees no history at all."""
    max_messages: int | None = Field(default=None, ge=1)
    """Keep at most this many newest messages."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Keep the newest messages whose estimated tokens fit. Whichever limit cuts more wins."""
    min_messages: int | None = Field(default=None, ge=1)
    """The low mark: the window grows from here to `max_messages` and is then cut back here,
    at a run's start, so prompts between cuts extend each other (a provider's prompt cache
    hits). Summarizing, the count a fold cuts back to (`fold_messages = max - min`)."""
    min_tokens: int | None = Field(default=None, ge=1)
    """The same as `min_messages`, in estimated tokens, below `max_tokens`."""
    runs: int | None = Field(default=None, ge=1)
    """Keep the newest this many runs whole (HasteKit's sliding window)."""
    summarize: bool | Summarizer = False
    """True folds what the window leaves out into a rolling summary made by the module's model
    (`summarize_with_model`); a `Summarizer` is used as is; False drops it."""
    summary_token_threshold: int | None = Field(default=None, ge=1)
    """Summarize old runs once the history's estimated tokens reach this (HasteKit's LLM
    summarization); needs `summarize`."""
    keep_recent_runs: int = Field(default=DEFAULT_KEEP_RECENT_RUNS, ge=1)
    """With `summary_token_threshold`: runs kept verbatim when the rest is summarized."""
    fold_messages: int | None = Field(default=None, ge=1)
    """Summarizing window: unsummarized messages past `max_messages` that trigger a fold
    (default half the window, at least 4)."""
    fold_tokens: int | None = Field(default=None, ge=1)
    """Summarizing window: unsummarized tokens past `max_tokens` that trigger a fold."""
    fold_max_tokens: int = Field(default=DEFAULT_FOLD_MAX_TOKENS, ge=1)
    """Summarizer input per call at most; a longer backlog is folded in several calls."""
    summary_carry: Literal["rewrite", "append"] = "rewrite"
    """With `summarize=True`: how the built-in summarizer carries the summary so far forward
    (`summarize_with_model`'s `carry`): `rewrite` asks the model for the updated summary,
    `append` asks it for notes on the new messages alone and appends them (for small models
    that drop what they are asked to copy)."""

    @model_validator(mode="after")
    def _one_strategy(self) -> HistoryConfig:
        window = self.max_messages is not None or self.max_tokens is not None
        summarizing = self.summarize is not False
        if self.runs is not None and (window or self.summary_token_threshold is not None):
            raise ValueError(
                "runs: a runs window cannot be combined with max_messages, "
                "max_tokens or summary_token_threshold"
            )
        if self.runs is not None and summarizing:
            raise ValueError(
                "runs: a runs window drops old runs; to summarize them set "
                "summary_token_threshold (and keep_recent_runs) instead"
            )
        if self.summary_token_threshold is not None:
            if window:
                raise ValueError(
                    "summary_token_threshold: summarized runs cannot be combined "
                    "with max_messages or max_tokens"
                )
            if not summarizing:
                raise ValueError("summary_token_threshold: needs summarize (True or a summarizer)")
        elif "keep_recent_runs" in self.model_fields_set:
            raise ValueError("keep_recent_runs: only applies with summary_token_threshold")
        for key in ("fold_messages", "fold_tokens"):
            if getattr(self, key) is not None and not (window and summarizing):
                raise ValueError(f"{key}: only applies to a summarizing window")
        for unit in ("messages", "tokens"):
            high, low = getattr(self, f"max_{unit}"), getattr(self, f"min_{unit}")
            fold = getattr(self, f"fold_{unit}")
            if low is None:
                continue
            if high is None:
                raise ValueError(f"min_{unit}: needs max_{unit} (the high mark)")
            if low >= high:
                raise ValueError(f"min_{unit}: must be below max_{unit} ({high})")
            if fold is not None and fold != high - low:
                raise ValueError(
                    f"fold_{unit}: contradicts min_{unit} (a fold cuts from max_{unit} back "
                    f"to min_{unit}, {high - low} at a time); give one of them"
                )
        return self

    @classmethod
    def coerce(cls, value: HistoryConfig | Mapping[str, Any]) -> HistoryConfig:
        """A `HistoryConfig` as is, or one validated from a mapping (`{"max_messages": 6}`).
        A bad mapping is a `ConfigError` naming the key."""
        if isinstance(value, HistoryConfig):
            return value
        if isinstance(value, Mapping):
            try:
                return cls.model_validate(dict(value))
            except ValidationError as exc:
                raise config_error("history", exc) from None
        raise ConfigError(f"history must be a HistoryConfig or a dict, got {value!r}")


def config_error(where: str, exc: ValidationError, prefix: str = "") -> ConfigError:
    """One readable `ConfigError` from pydantic's, each problem led by the key it is about
    (as an environment variable, `AGENT_HISTORY_RUNS`, when `prefix` is given)."""

    def name(key: str) -> str:
        return f"{prefix}{key.upper()}" if prefix else key

    problems = []
    for err in exc.errors():
        message = err["msg"].removeprefix("Value error, ")
        if err["loc"]:
            key = ".".join(str(p) for p in err["loc"])
            problems.append(f"{name(key)}: {message}")
        else:  # a cross-field rule: its message leads with the key already
            key, sep, rest = message.partition(": ")
            problems.append(f"{name(key)}: {rest}" if sep else message)
    return ConfigError(f"invalid {where}: " + "; ".join(problems))


def policy_from_config(config: HistoryConfig, model: ModelProvider | None) -> HistoryPolicy:
    """Build the policy a `HistoryConfig` describes.

    `enabled=False` gives `latest_message_only()`. `runs` gives `runs_window`,
    `summary_token_threshold` gives `summarizing_runs_window`, anything else a `window_history`
    (40 messages when no limit is given). `summarize=True` binds `summarize_with_model(model)`
    and raises `ConfigError` when no model is given; a callable `summarize` is used as is.
    """
    if not config.enabled:
        return latest_message_only()
    if config.runs is not None:
        return runs_window(config.runs)
    summarizer: Summarizer | None
    if config.summarize is True:
        if model is None:
            raise ConfigError("history summarize=True needs a model to summarize with")
        summarizer = summarize_with_model(model, carry=config.summary_carry)
    elif config.summarize is False:
        summarizer = None
    else:
        summarizer = config.summarize
    if config.summary_token_threshold is not None:
        assert summarizer is not None  # the config's own validation guarantees it
        return summarizing_runs_window(
            summarizer,
            config.summary_token_threshold,
            keep_recent_runs=config.keep_recent_runs,
            fold_max_tokens=config.fold_max_tokens,
        )
    if config.max_messages is None and config.max_tokens is None:
        max_messages: int | None = DEFAULT_WINDOW_MESSAGES
    else:
        max_messages = config.max_messages
    return window_history(
        max_messages=max_messages,
        max_tokens=config.max_tokens,
        summarize=summarizer,
        fold_messages=config.fold_messages,
        fold_tokens=config.fold_tokens,
        fold_max_tokens=config.fold_max_tokens,
        min_messages=config.min_messages,
        min_tokens=config.min_tokens,
    )


HistorySpec: TypeAlias = HistoryConfig | Mapping[str, Any] | HistoryPolicy
"""What `history=` accepts: a config, a dict validated into one, or a policy."""


def _from_spec(spec: HistorySpec, model: ModelProvider | None, where: str) -> HistoryPolicy:
    if isinstance(spec, HistoryConfig | Mapping):
        return policy_from_config(HistoryConfig.coerce(spec), model)
    if isinstance(spec, HistoryPolicy):
        return spec
    raise ConfigError(f"{where} must be a HistoryConfig, a dict or a HistoryPolicy, got {spec!r}")


def resolve_policy(
    agent_history: HistorySpec | None,
    module_history_policy: HistoryPolicy | None,
    module_history: HistoryConfig | Mapping[str, Any] | None,
    model: ModelProvider | None = None,
) -> HistoryPolicy:
    """The policy a turn uses, most specific first (docs/history.md): the
    agent's `@agent(history=...)` (config, dict or policy), then the module's `history_policy`,
    then the module's `history`.

    The first one set wins outright; nothing is merged across levels. With none set the whole
    thread is sent (`whole_thread()`). `model` is what `summarize=True` binds; a config that asks
    for a summary without one raises `ConfigError`, as does a value of the wrong type. The
    module-wide levels are validated whether or not an agent overrides them (`for_root` calls
    `validate_module_history` first).
    """
    if agent_history is not None:
        return _from_spec(agent_history, model, "agent history")
    if module_history_policy is not None:
        return module_history_policy
    if module_history is not None:
        return policy_from_config(HistoryConfig.coerce(module_history), model)
    return whole_thread()


def validate_module_history(
    module_history_policy: HistoryPolicy | None,
    module_history: HistoryConfig | Mapping[str, Any] | None,
    model: ModelProvider | None,
) -> None:
    """Refuse a bad module-wide history at wiring time, even when every agent overrides it:
    a setting that is never used is still a mistake its author wants to hear about."""
    if module_history_policy is not None and not isinstance(module_history_policy, HistoryPolicy):
        raise ConfigError(f"history_policy must be a HistoryPolicy, got {module_history_policy!r}")
    if module_history is not None:
        policy_from_config(HistoryConfig.coerce(module_history), model)


__all__ = [
    "DEFAULT_KEEP_RECENT_RUNS",
    "DEFAULT_WINDOW_MESSAGES",
    "HistoryConfig",
    "HistoryPolicy",
    "HistoryPolicyContext",
    "HistorySelection",
    "HistorySpec",
    "HistorySummary",
    "RunsWindow",
    "Summarizer",
    "SummarizingRunsWindow",
    "SummaryRenderer",
    "WholeThread",
    "WindowHistory",
    "config_error",
    "latest_message_only",
    "policy_from_config",
    "resolve_policy",
    "runs_window",
    "split_runs",
    "summarizing_runs_window",
    "validate_module_history",
    "whole_thread",
    "window_history",
]
