"""History policies: which stored messages of a thread a turn sends to the model.

A policy's `select(messages, ctx)` splits the thread into what the turn keeps and what it drops.
The loop calls it inside the `load:thread` checkpoint and journals its result, so `select` must be
PURE (no clock, no flags, no I/O): a resumed run has to window exactly as the first attempt did.
Anything non-deterministic belongs in `summarize`, which runs in a checkpoint of its own.

Besides `select`, the loop reads three optional attributes with `getattr(policy, name, None)`:

- `max_messages: int | None` -- the read bound. Declaring it is a PROMISE: `select` keeps at most
  that many messages and keeps the NEWEST ones. The loop hands it to the store as
  `ThreadTurnQuery.message_limit`, so a policy that could keep anything older (a pinned brief)
  or that summarizes (it needs the dropped rows) must leave it None.
- `summarize` -- an async `(dropped, ctx) -> HistorySummary`, called once per run when `select`
  dropped something; its text becomes a leading system message.
- `render_summary` -- `(text) -> str`, the wording of that system message
  (default `render_history_summary`).

Built-ins: `window_history` (message count and/or token budget), `runs_window` and
`summarizing_runs_window` (whole runs), `latest_message_only` (`enabled=False`) and
`whole_thread` (no ceiling). `HistoryConfig` is the declarative form; `resolve_policy` applies
the precedence agent -> module `history_policy` -> module `history`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from app.core.messages import Message
from app.core.ports import ModelProvider, Usage
from app.core.summary import render_history_summary, summarize_with_model
from app.core.tokens import TokenEstimator, estimate_message_tokens
from app.errors import ConfigError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- the SPI types -------------------------------------------------------------------------


class HistorySelection(_Frozen):
    """What `select` decided: `keep` is sent (oldest first), `drop` is left out.

    `drop + keep` is the input in order for every built-in policy; `drop` is what a summarizer
    is handed.
    """

    keep: list[Message]
    drop: list[Message]


class HistorySummary(_Frozen):
    """A summarizer's result: the summary text and the tokens the summary cost (for the ledger)."""

    text: str
    usage: Usage


class HistoryPolicyContext(_Frozen):
    """Who a turn is for. A frozen model so fields can be added without changing any signature."""

    thread_id: str
    agent: str
    actor_id: str
    run_id: str


Summarizer: TypeAlias = Callable[[list[Message], HistoryPolicyContext], Awaitable[HistorySummary]]
"""Folds dropped messages into a summary. May do I/O: it runs in a checkpoint of its own."""

SummaryRenderer: TypeAlias = Callable[[str], str]
"""Words a summary for the prompt. Must be pure."""


@runtime_checkable
class HistoryPolicy(Protocol):
    """Decides which stored messages a turn sends. Only `select` is required.

    The loop also reads three optional attributes with `getattr(policy, name, None)`:

    - `max_messages: int | None`: declaring it is a PROMISE about `select`: it keeps at most
      that many messages and keeps the NEWEST ones. The loop hands it to the store as the read
      bound (`ThreadTurnQuery.message_limit`), so `select` only ever sees those rows. A policy
      that can keep anything older (say, a pinned first message), or that summarizes (its
      summarizer needs the dropped rows), must leave it None; None reads the whole thread.
    - `summarize: Summarizer | None`: called once per run, when `select` dropped something, with
      the dropped messages; may do I/O (it runs in the `history:summarize` checkpoint).
    - `render_summary: SummaryRenderer | None`: words the summary as the leading system message;
      None means `render_history_summary`.

    These are not protocol members, so `isinstance(obj, HistoryPolicy)` checks `select` only.
    """

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        """Split `messages` (the thread, oldest first; its last one is the current user message)
        into keep and drop. Must be pure: it runs inside the journaled `load:thread` step."""
        ...


# --- the built-in policies -----------------------------------------------------------------


def _cut(messages: Sequence[Message], cut: int) -> HistorySelection:
    return HistorySelection(keep=list(messages[cut:]), drop=list(messages[:cut]))


class WindowHistory:
    """Keeps the newest messages that fit a message count and/or a token budget.

    Build it with `window_history(...)`; see there for the exact rules.
    """

    max_messages: int | None
    """The read bound: `count_limit` when there is no summarizer, else None (see
    `window_history`). A token budget beside the count only ever keeps fewer."""
    count_limit: int | None
    """Most messages kept (the newest always rides, so 0 behaves like 1)."""
    token_limit: int | None
    """Token budget for the kept messages, by `estimate`."""
    estimate: TokenEstimator
    summarize: Summarizer | None
    """Folds what `select` dropped into a summary; None drops it."""
    render_summary: SummaryRenderer

    def __init__(
        self,
        *,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        estimate: TokenEstimator = estimate_message_tokens,
        summarize: Summarizer | None = None,
        render_summary: SummaryRenderer = render_history_summary,
    ) -> None:
        if max_messages is not None and max_messages < 0:
            raise ConfigError(f"max_messages must be >= 0, got {max_messages!r}")
        if max_tokens is not None and max_tokens < 0:
            raise ConfigError(f"max_tokens must be >= 0, got {max_tokens!r}")
        self.count_limit = max_messages
        self.token_limit = max_tokens
        self.estimate = estimate
        self.summarize = summarize
        self.render_summary = render_summary
        # The bound only reaches the store when select can never need an older row: not when a
        # summarizer must be handed the dropped rows, and not for a token-only ceiling.
        self.max_messages = max_messages if summarize is None else None

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        """The larger of the count cut and the token cut, clamped so the newest rides."""
        n = len(messages)
        if n == 0:
            return HistorySelection(keep=[], drop=[])
        cut = 0
        if self.count_limit is not None:
            cut = max(cut, n - self.count_limit)
        if self.token_limit is not None:
            total = 0
            fits = 0
            for m in reversed(messages):
                cost = self.estimate(m)
                if fits > 0 and total + cost > self.token_limit:
                    break  # stop at the first that would exceed: never skip it and go on
                total += cost
                fits += 1
            cut = max(cut, n - fits)
        return _cut(messages, min(cut, n - 1))

    def __repr__(self) -> str:
        return (
            f"WindowHistory(max_messages={self.count_limit!r}, max_tokens={self.token_limit!r}, "
            f"summarize={self.summarize!r})"
        )


def window_history(
    max_messages: int | None = None,
    max_tokens: int | None = None,
    estimate: TokenEstimator = estimate_message_tokens,
    summarize: Summarizer | None = None,
    render_summary: SummaryRenderer = render_history_summary,
) -> WindowHistory:
    """The built-in window: keep the newest messages that fit; the rest is dropped.

    - `max_messages`: the cut by count is `len - max_messages` (never below 0).
    - `max_tokens`: walking from the newest message backwards, the newest is always counted and
      the walk stops at the FIRST message that would push the total over the budget (it does not
      skip it and look further back: the kept part stays contiguous).
    - With both, whichever cuts more wins.
    - The newest message always rides (a turn with nothing to answer is worse than a turn over
      budget), so `max_messages=0` or a newest message alone over `max_tokens` still keeps it.
    - An empty thread gives empty keep and drop. With no limit nothing is dropped.

    `estimate` must be pure (it runs inside `select`). `summarize` folds the dropped messages into
    a summary (`summarize_with_model(model)` is the built-in); `render_summary` words it.

    The policy declares `max_messages` (the store's read bound, a promise that `select` keeps at
    most that many and keeps the newest) ONLY for a count window without a summarizer. A token-only
    ceiling names no row count, and a summarizer must be handed rows a bounded read would never
    fetch, so both read the whole thread. Raises `ConfigError` for a negative limit.
    """
    return WindowHistory(
        max_messages=max_messages,
        max_tokens=max_tokens,
        estimate=estimate,
        summarize=summarize,
        render_summary=render_summary,
    )


def latest_message_only() -> WindowHistory:
    """What `HistoryConfig(enabled=False)` builds: only the newest message (the current user
    message) is sent. Declares `max_messages=1`, so the store reads a single row."""
    return window_history(max_messages=1)


class WholeThread:
    """No ceiling: `select` keeps every message. Declares no bound, so the whole thread is read."""

    max_messages: int | None = None
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

    A run is one user message and everything the agent did for it. Consecutive messages with the
    same `run_id` form one run; a message with a different non-None `run_id` starts a new one.
    For messages without a `run_id`, a user message starts a new run and any other message joins
    the run before it (messages before the first user message form a run of their own).
    """
    runs: list[list[Message]] = []
    key: str | None = None
    for m in messages:
        starts = (
            not runs
            or (m.run_id is not None and m.run_id != key)
            or (m.run_id is None and m.role == "user")
        )
        if starts:
            runs.append([m])
            key = m.run_id
        else:
            runs[-1].append(m)
    return runs


def _keep_newest_runs(messages: Sequence[Message], n_runs: int) -> HistorySelection:
    runs = split_runs(messages)
    dropped = runs[: max(0, len(runs) - max(1, n_runs))]
    cut = sum(len(r) for r in dropped)
    return _cut(messages, cut)


class RunsWindow:
    """Keeps the newest `max_runs` whole runs. Build it with `runs_window(...)`."""

    max_messages: int | None = None
    """Always None: a run's size is unbounded, so no row count follows from a run count."""
    summarize: Summarizer | None = None

    def __init__(self, *, max_runs: int) -> None:
        if max_runs < 0:
            raise ConfigError(f"max_runs must be >= 0, got {max_runs!r}")
        self.max_runs = max_runs

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return _keep_newest_runs(messages, self.max_runs)

    def __repr__(self) -> str:
        return f"RunsWindow(max_runs={self.max_runs!r})"


def runs_window(max_runs: int) -> RunsWindow:
    """Keep the newest `max_runs` runs whole; drop everything older (no summary).

    Runs are grouped by `split_runs`, and a run is never split: a question is never separated
    from its answer or a tool call from what followed it. The run in flight (the newest, which
    holds the current user message) counts as one of the `max_runs` and is never cut, so
    `max_runs=0` still keeps it. Declares no `max_messages`: a run can hold any number of
    messages, so no read bound follows from a run count and the whole thread is read.
    Raises `ConfigError` for a negative `max_runs`.
    """
    return RunsWindow(max_runs=max_runs)


class SummarizingRunsWindow:
    """Summarizes old runs once the history passes a token threshold.
    Build it with `summarizing_runs_window(...)`."""

    max_messages: int | None = None
    """Always None: a summarizer must be handed the dropped rows, so the whole thread is read."""
    summarize: Summarizer
    render_summary: SummaryRenderer

    def __init__(
        self,
        *,
        summarize: Summarizer,
        token_threshold: int,
        keep_recent_runs: int = 2,
        estimate: TokenEstimator = estimate_message_tokens,
        render_summary: SummaryRenderer = render_history_summary,
    ) -> None:
        if token_threshold < 1:
            raise ConfigError(f"token_threshold must be >= 1, got {token_threshold!r}")
        self.summarize = summarize
        self.token_threshold = token_threshold
        self.keep_recent_runs = max(1, keep_recent_runs)
        self.estimate = estimate
        self.render_summary = render_summary

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        total = sum(self.estimate(m) for m in messages)
        if total <= self.token_threshold:
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
    keep_recent_runs: int = 2,
    estimate: TokenEstimator = estimate_message_tokens,
    render_summary: SummaryRenderer = render_history_summary,
) -> SummarizingRunsWindow:
    """Keep everything until the thread's estimated tokens pass `token_threshold`; then keep the
    `keep_recent_runs` most recent runs verbatim and drop everything older, which the loop hands
    to `summarize` (e.g. `summarize_with_model(model)`) and folds into one system message.

    Runs are never split (see `split_runs`). The run in flight counts as one of the recent runs,
    and `keep_recent_runs` below 1 is raised to 1 so it is never cut. Declares no `max_messages`:
    the summarizer needs the rows a bounded read would leave out. `estimate` must be pure.
    Raises `ConfigError` for a `token_threshold` below 1.
    """
    return SummarizingRunsWindow(
        summarize=summarize,
        token_threshold=token_threshold,
        keep_recent_runs=keep_recent_runs,
        estimate=estimate,
        render_summary=render_summary,
    )


# --- declarative configuration -------------------------------------------------------------


class HistoryConfig(BaseModel):
    """The declarative ceiling `history=` takes (a plain dict is accepted too, see `coerce`).

    It builds a `window_history` (see `policy_from_config`). Unknown keys and limits below 1 are
    rejected with a pydantic `ValidationError` naming the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_messages: int | None = Field(default=None, ge=1)
    """Keep at most this many newest messages. Also the store's read bound unless summarizing."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Keep the newest messages whose estimated tokens fit. Whichever limit cuts more wins."""
    summarize: bool | Summarizer = False
    """True folds dropped messages into a summary made by the module's model
    (`summarize_with_model`); a `Summarizer` is used as is; False drops them."""
    enabled: bool = True
    """False sends only the current user message: the model sees no history at all."""

    @classmethod
    def coerce(cls, value: HistoryConfig | Mapping[str, Any]) -> HistoryConfig:
        """A `HistoryConfig` as is, or one validated from a mapping (`{"max_messages": 6}`)."""
        if isinstance(value, HistoryConfig):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value))
        raise ConfigError(f"history must be a HistoryConfig or a dict, got {value!r}")


def policy_from_config(config: HistoryConfig, model: ModelProvider | None) -> HistoryPolicy:
    """Build the policy a `HistoryConfig` describes.

    `enabled=False` gives `latest_message_only()` (the limits and `summarize` are ignored).
    Otherwise a `window_history` with the config's limits; `summarize=True` binds
    `summarize_with_model(model)` and raises `ConfigError` when no model is given, and a callable
    `summarize` is used as is.
    """
    if not config.enabled:
        return latest_message_only()
    summarizer: Summarizer | None
    if config.summarize is True:
        if model is None:
            raise ConfigError("history summarize=True needs a model to summarize with")
        summarizer = summarize_with_model(model)
    elif config.summarize is False:
        summarizer = None
    else:
        summarizer = config.summarize
    return window_history(
        max_messages=config.max_messages, max_tokens=config.max_tokens, summarize=summarizer
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
    """The policy a turn uses, most specific first (README "Wire it into your app"): the
    agent's `@agent(history=...)` (config, dict or policy), then the module's `history_policy`,
    then the module's `history`.

    The first one set wins outright; nothing is merged across levels. With none set the whole
    thread is sent (`whole_thread()`). `model` is what `summarize=True` binds; a config that asks
    for a summary without one raises `ConfigError`, as does a value of the wrong type.
    """
    if agent_history is not None:
        return _from_spec(agent_history, model, "agent history")
    if module_history_policy is not None:
        if not isinstance(module_history_policy, HistoryPolicy):
            raise ConfigError(
                f"history_policy must be a HistoryPolicy, got {module_history_policy!r}"
            )
        return module_history_policy
    if module_history is not None:
        return policy_from_config(HistoryConfig.coerce(module_history), model)
    return whole_thread()


__all__ = [
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
    "latest_message_only",
    "policy_from_config",
    "resolve_policy",
    "runs_window",
    "split_runs",
    "summarizing_runs_window",
    "whole_thread",
    "window_history",
]
