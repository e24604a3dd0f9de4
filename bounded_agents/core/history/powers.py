"""The powers a history policy may declare beyond `select`, as protocols the loop probes.

`HistoryPolicy` (core/ports.py) is the one required method. A policy says what else it can do by
having these members: the loop asks only through the `supports_*` guards below (one probing
style, as core/ports.py does for stores) and knows no policy's own fields. A new policy that
reads a bounded page, summarizes, or refolds between model calls implements the protocol and
needs no change to the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeGuard, runtime_checkable

from bounded_agents.core.history.clearing import ToolResultClearing
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicy, ReadBound, Summarizer, SummaryRenderer
from bounded_agents.core.summary import DEFAULT_FOLD_MAX_TOKENS, render_history_summary


@runtime_checkable
class BoundedReadPolicy(Protocol):
    """Declares what a turn asks the store for; None reads every unsummarized message."""

    read_bound: ReadBound | None


@runtime_checkable
class MessageCountPolicy(Protocol):
    """The older promise of a read bound: the newest `max_messages` messages."""

    max_messages: int | None


@runtime_checkable
class SummarizingPolicy(Protocol):
    """Folds what `select` drops into the thread's rolling summary (None: it does not)."""

    summarize: Summarizer | None


@runtime_checkable
class SummaryRenderingPolicy(Protocol):
    """Words the summary as the prompt's system message (default: `render_history_summary`)."""

    render_summary: SummaryRenderer


@runtime_checkable
class FoldBudgetPolicy(Protocol):
    """The estimated tokens one fold chunk may hand the summarizer, the summary so far included."""

    fold_max_tokens: int


@runtime_checkable
class RefoldingPolicy(Protocol):
    """A summarizing policy that decides again before every model call of a run.

    `refold_count` answers "refold?" itself: given the run's kept history (oldest first, with
    seqs) and the estimated tokens of the prompt after its system prompt, how many of the
    oldest kept messages to fold now (0: none). It must be pure: a replay asks it again and
    must get the same answer."""

    def refold_count(self, kept: Sequence[Message], history_tokens: int) -> int: ...


@runtime_checkable
class ClearingPolicy(Protocol):
    """Clears old tool results from the prompt in steps (`core/history/clearing.py`);
    None: every kept result rides verbatim."""

    clear_tool_results: ToolResultClearing | None


@runtime_checkable
class CalibratedPolicy(Protocol):
    """Token limits that can be put in the model's own tokens: `calibrated(ratio)` is the
    policy with each token limit divided by `ratio` (the model counts `ratio` tokens per
    estimated one: `bounded_agents.core.calibration`), or the policy itself when nothing
    changes. The loop asks it every turn, so it must be cheap and return the same object for
    the same ratio (a policy whose limits moved every turn would break the prompt cache)."""

    def calibrated(self, ratio: float) -> HistoryPolicy: ...


@runtime_checkable
class LegacyWindowPolicy(Protocol):
    """The pre-`select` method a journal of the legacy path was recorded with."""

    def window(self, messages: Sequence[Message]) -> object: ...


def supports_bounded_read(policy: HistoryPolicy) -> TypeGuard[BoundedReadPolicy]:
    return isinstance(policy, BoundedReadPolicy) and isinstance(policy.read_bound, ReadBound)


def supports_message_count(policy: HistoryPolicy) -> TypeGuard[MessageCountPolicy]:
    return isinstance(policy, MessageCountPolicy) and isinstance(policy.max_messages, int)


def supports_summarizing(policy: HistoryPolicy) -> TypeGuard[SummarizingPolicy]:
    return isinstance(policy, SummarizingPolicy) and callable(policy.summarize)


def supports_summary_rendering(policy: HistoryPolicy) -> TypeGuard[SummaryRenderingPolicy]:
    return isinstance(policy, SummaryRenderingPolicy) and callable(policy.render_summary)


def supports_fold_budget(policy: HistoryPolicy) -> TypeGuard[FoldBudgetPolicy]:
    return isinstance(policy, FoldBudgetPolicy) and isinstance(policy.fold_max_tokens, int)


def supports_refolding(policy: HistoryPolicy) -> TypeGuard[RefoldingPolicy]:
    return isinstance(policy, RefoldingPolicy) and supports_summarizing(policy)


def supports_clearing(policy: HistoryPolicy) -> TypeGuard[ClearingPolicy]:
    return isinstance(policy, ClearingPolicy) and isinstance(
        policy.clear_tool_results, ToolResultClearing
    )


def result_clearing(policy: HistoryPolicy) -> ToolResultClearing | None:
    """The policy's tool-result clearing, or None when it clears nothing."""
    return policy.clear_tool_results if supports_clearing(policy) else None


def supports_calibration(policy: HistoryPolicy) -> TypeGuard[CalibratedPolicy]:
    return isinstance(policy, CalibratedPolicy)


def calibrated_policy(policy: HistoryPolicy, ratio: float) -> HistoryPolicy:
    """`policy` with its token limits in the model's tokens (`CalibratedPolicy`); a policy
    without that power, unchanged."""
    return policy.calibrated(ratio) if supports_calibration(policy) else policy


def supports_legacy_window(policy: HistoryPolicy) -> TypeGuard[LegacyWindowPolicy]:
    return isinstance(policy, LegacyWindowPolicy)


def policy_summarizer(policy: HistoryPolicy) -> Summarizer | None:
    """The policy's summarizer, or None when it keeps no rolling summary."""
    return policy.summarize if supports_summarizing(policy) else None


def summary_renderer(policy: HistoryPolicy) -> SummaryRenderer:
    return policy.render_summary if supports_summary_rendering(policy) else render_history_summary


def fold_budget(policy: HistoryPolicy) -> int:
    """The policy's fold chunk budget (a declared 0 or none: the default)."""
    declared = policy.fold_max_tokens if supports_fold_budget(policy) else 0
    return declared or DEFAULT_FOLD_MAX_TOKENS


def read_bound(policy: HistoryPolicy) -> ReadBound | None:
    """What a turn asks the store for: the policy's declared `read_bound`, or the older
    `max_messages` promise as a message count; None reads everything.

    A message count is at least 1: the newest message (the turn's own user message) always
    rides, so a policy declaring 0 still needs that row read.
    """
    if supports_bounded_read(policy):
        bound = policy.read_bound
        assert bound is not None  # the guard
        if bound.messages is not None and bound.messages < 1:
            return bound.model_copy(update={"messages": 1})
        return bound
    if supports_message_count(policy):
        assert policy.max_messages is not None  # the guard
        return ReadBound(messages=max(1, policy.max_messages))
    return None


POLICY_PROTOCOLS: tuple[type, ...] = (
    BoundedReadPolicy,
    MessageCountPolicy,
    SummarizingPolicy,
    SummaryRenderingPolicy,
    FoldBudgetPolicy,
    RefoldingPolicy,
    ClearingPolicy,
    CalibratedPolicy,
    LegacyWindowPolicy,
)
"""Every power a policy may declare, for docs and the test that lists them."""
