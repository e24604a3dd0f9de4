"""Message and token windows: the newest messages of a thread a turn keeps, by count and/or
estimated tokens.

The sliding window moves every turn; the hysteresis window (`min_messages`/`min_tokens`) cuts
in steps, so the prompts between two cuts extend each other and a provider's prompt cache hits;
with a summarizer the window rolls, folding what it leaves out into the thread's summary.
`whole_thread` is the window without an edge. `bounded_agents.core.history` re-exports them all:
import them from there.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Sequence
from typing import Any

from bounded_agents.core.history.clearing import ToolResultClearing
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

DEFAULT_WINDOW_MESSAGES = 40
"""What `window_history()` keeps when given no limit at all, as Adonis's sliding window does."""
DEFAULT_FOLD_MESSAGES = 4
"""The smallest default fold batch: two turns' worth, so even a small summarizing window folds
every other turn at most, not on every turn."""
RATIO_STEP = 0.125
"""A calibrated window's ratio is rounded UP to a multiple of this (`WindowHistory.calibrated`):
its limits move only when the learned ratio crosses a step, not at every reported call, so
the prompts between two steps still extend each other (and a provider's cache hits)."""


def cut_at(messages: Sequence[Message], cut: int) -> HistorySelection:
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
    cache_ttl_seconds: float | None
    """Summarizing only: how long the provider keeps a prompt cache idle; None takes the
    loop's (`HistoryPolicyContext.cache_ttl_seconds`), 0 never folds early (see `select`)."""
    clear_tool_results: ToolResultClearing | None
    """Old tool results replaced in the prompt by placeholders (`ClearingPolicy`); None: off."""

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
        cache_ttl_seconds: float | None = None,
        clear_tool_results: ToolResultClearing | None = None,
    ) -> None:
        _check_limits(
            fold_max_tokens,
            max_messages=max_messages,
            max_tokens=max_tokens,
            fold_messages=fold_messages,
            fold_tokens=fold_tokens,
            cache_ttl_seconds=cache_ttl_seconds,
        )
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
        self.cache_ttl_seconds = cache_ttl_seconds
        self.clear_tool_results = clear_tool_results
        self.fold_messages = (
            fold_messages
            if fold_messages is not None
            else max(DEFAULT_FOLD_MESSAGES, (max_messages or 0) // 2)
        )
        self.fold_tokens = (
            fold_tokens if fold_tokens is not None else max(1, (max_tokens or 0) // 2)
        )
        self.read_bound = self._read_bound()
        self._calibrated: dict[float, WindowHistory] = {}

    def calibrated(self, ratio: float) -> WindowHistory:
        """This window with its token limits in the model's own tokens (`CalibratedPolicy`):
        `max_tokens` (and `min_tokens`, `fold_tokens`) divided by `ratio` rounded up to a
        `RATIO_STEP`, the read bound with them. A model that counts 1.6 tokens per estimated
        one gets a window of `max_tokens / 1.625` estimated tokens, which it counts within
        `max_tokens`. Itself when it has no token limit or the ratio is at most 1 (a
        calibration never widens a window); one copy per step, made once."""
        step = math.ceil(ratio / RATIO_STEP) * RATIO_STEP
        if self.token_limit is None or step <= 1.0:
            return self
        known = self._calibrated.get(step)
        if known is not None:
            return known
        scaled = copy.copy(self)
        scaled._calibrated = {}
        scaled.token_limit = max(1, math.floor(self.token_limit / step))
        if self.min_tokens is not None:  # the low mark stays below the high one
            low = min(math.floor(self.min_tokens / step), scaled.token_limit - 1)
            scaled.min_tokens = low if low >= 1 else None
        scaled.fold_tokens = max(1, math.floor(self.fold_tokens / step))
        scaled.read_bound = scaled._read_bound()
        self._calibrated[step] = scaled
        return scaled

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
        return cut_at(messages, min(cut, n - 1))

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        if self.summarize is None:
            if self.min_messages is None and self.min_tokens is None:
                return self.window(messages)
            return self.hysteresis(messages, ctx)
        # Rolling: `messages` is what the summary does not cover. Below the high mark all of it
        # rides (it is in no summary yet); past it, the window is cut and the rest is folded.
        if ctx.skipped > 0 or self._past_high_mark(messages) or self._cold_and_near(messages, ctx):
            return self.window(messages)
        return cut_at(messages, 0)

    def cold(self, ctx: HistoryPolicyContext) -> bool:
        """Whether the provider's prompt cache is lost anyway: the thread sat idle at least
        the cache's lifetime (this policy's `cache_ttl_seconds`, else the loop's, from
        `AGENT_HISTORY_CACHE_TTL_SECONDS`; 0 is off). A summarizing window then folds as soon
        as its unsummarized part is within half a fold batch of the high mark."""
        own = self.cache_ttl_seconds
        ttl = own if own is not None else ctx.cache_ttl_seconds
        return ttl > 0 and ctx.idle_seconds is not None and ctx.idle_seconds >= ttl

    def _cold_and_near(self, messages: Sequence[Message], ctx: HistoryPolicyContext) -> bool:
        """Fold now rather than in a few turns: between folds each prompt extends the previous
        one (a cache hit) and a fold breaks that prefix once. When the cache is cold anyway
        and the fold is within half a batch, folding now costs no extra miss, and the hot
        turns that would have reached the mark keep extending the prompt instead."""
        return self.cold(ctx) and self._past_high_mark(
            messages, self.fold_messages // 2, self.fold_tokens // 2
        )

    def hysteresis(
        self, messages: Sequence[Message], ctx: HistoryPolicyContext
    ) -> HistorySelection:
        """The window cut in steps: where it starts is a function of the thread's length alone
        (`seq`, or the running token count), so it stays put turn after turn and every prompt
        extends the previous one until the kept part would reach the high mark; then it moves
        by one step (high - low) and starts again at the low mark. The cut then moves forward
        to the next run's start, so a run is never split. `ctx.skipped` and `ctx.tokens_before`
        say where `messages` start in the thread, so a bounded page cuts where the whole thread
        would. A limit without a low mark still cuts as the sliding window does.

        A sliding window moves its start every turn, so no two prompts share more than the
        system prompt and a provider's prompt cache never hits. The start here is the newest
        multiple of the step at or below `len(thread) - min_*` (in messages, or in the thread's
        running token count), a function of the stored thread only: replay and the bounded
        read (at most the high mark) cut exactly where the in-memory policy does. It sends
        `min_*` to `max_* - 1` messages (or tokens), so on average about halfway between the
        marks."""
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
        return cut_at(messages, cut)

    def _past_high_mark(
        self, messages: Sequence[Message], slack_messages: int = 0, slack_tokens: int = 0
    ) -> bool:
        """Whether the unsummarized part reached the high mark, or came within the slack of it."""
        if self.count_limit is not None and len(messages) >= (
            max(1, self.count_limit) + self.fold_messages - slack_messages
        ):
            return True
        if self.token_limit is not None:
            total = sum(self.estimate(m) for m in messages)
            return total >= self.token_limit + self.fold_tokens - slack_tokens
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


def _check_limits(fold_max_tokens: int, **limits: float | None) -> None:
    """Every limit is a count, a budget or a time: none may be negative (nor NaN)."""
    if fold_max_tokens < 1:
        raise ConfigError(f"fold_max_tokens must be >= 1, got {fold_max_tokens!r}")
    for name, value in limits.items():
        if value is not None and not value >= 0:
            raise ConfigError(f"{name} must be >= 0, got {value!r}")


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
    cache_ttl_seconds: float | None = None,
    clear_tool_results: ToolResultClearing | None = None,
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
    and within `max_tokens` by the stored estimate (not with a custom `estimate`).

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

    Without `summarize`, `min_messages` (and/or `min_tokens`, which needs the default
    estimator) make the window HYSTERESIS (`WindowHistory.hysteresis`): a sliding window moves
    its start every turn, so a provider's prompt cache never hits; this one moves it in steps,
    and between two cuts each prompt extends the previous one. `cache_ttl_seconds`: see `cold`.
    `clear_tool_results` replaces old tool results in the prompt by placeholders, in steps
    (`bounded_agents.core.history.clearing`).
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
        cache_ttl_seconds=cache_ttl_seconds,
        clear_tool_results=clear_tool_results,
    )


def latest_message_only() -> WindowHistory:
    """What `HistoryConfig(enabled=False)` builds: only the newest message (the current user
    message) is sent, and the store reads that single row."""
    return window_history(max_messages=1)


class WholeThread:
    """No ceiling: `select` keeps every message, and the whole thread is read."""

    read_bound: ReadBound | None = None
    summarize: Summarizer | None = None

    def __init__(self, clear_tool_results: ToolResultClearing | None = None) -> None:
        self.clear_tool_results = clear_tool_results

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=list(messages), drop=[])

    def __repr__(self) -> str:
        return "WholeThread()"


def whole_thread(clear_tool_results: ToolResultClearing | None = None) -> WholeThread:
    """The policy when nothing is configured anywhere: the whole thread is sent."""
    return WholeThread(clear_tool_results)


__all__ = [
    "DEFAULT_FOLD_MESSAGES",
    "DEFAULT_WINDOW_MESSAGES",
    "WholeThread",
    "WindowHistory",
    "cut_at",
    "latest_message_only",
    "whole_thread",
    "window_history",
]
